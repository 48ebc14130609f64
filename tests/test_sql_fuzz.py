"""Fuzzing the SQL filter parser and evaluator against a second, independent evaluator.

Hypothesis draws expression trees over a message's properties, prints them as SQL text (random
keyword case, spacing, identifier quoting), parses the text with ``sbreference.sqlfilter`` and
evaluates it; ``oracle`` evaluates the drawn tree directly, written from the documentation's
tables rather than from the model's code (truth tables as lookups, C# binding as a type table).
Both must agree on the value (TRUE / FALSE / UNKNOWN, or the number or string) or both fail to
evaluate. A second property feeds the parser arbitrary text: it answers with a parsed filter or
an argument error naming a position inside the text, never anything else.

Bounded: the default profile runs a few hundred examples in seconds (RULES-SQL-*).
"""

from __future__ import annotations

import math
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbreference import ErrorCode, ServiceBusError
from sbreference.sqlfilter import UNKNOWN, Evaluator, FilterEvaluationError, Properties, parse_action, parse_filter

U = "U"  # the oracle's unknown
ERR = "error"

# ------------------------------------------------------------------ the oracle

T, F = True, False
AND = {(T, T): T, (T, F): F, (T, U): U, (F, T): F, (F, F): F, (F, U): F, (U, T): U, (U, F): F, (U, U): U}
OR = {(T, T): T, (T, F): T, (T, U): T, (F, T): T, (F, F): F, (F, U): U, (U, T): T, (U, F): U, (U, U): U}
NOT = {T: F, F: T, U: U}


class Fail(Exception):
    pass


def kind(v):
    if v is U or v is None:
        return "u"
    if v is True or v is False:
        return "b"
    if type(v) is int:
        return "i"
    if type(v) is float:
        return "d"
    if type(v) is str:
        return "s"
    return "o"


def tv(v):
    """A value as a truth value, or Fail."""
    k = kind(v)
    if k == "u":
        return U
    if k == "b":
        return v
    raise Fail


def wrap(n):
    n &= (1 << 64) - 1
    return n - (1 << 64) if n >> 63 else n


def text_of(v):
    if v is True:
        return "True"
    if v is False:
        return "False"
    if type(v) is float:
        if v != v:
            return "NaN"
        if v in (math.inf, -math.inf):
            return "\u221e" if v > 0 else "-\u221e"
        if v == int(v) and abs(v) < 1e15:
            return "%d" % int(v)
        return repr(v).replace("e", "E")
    return "%s" % (v,)


def o_arith(op, a, b):
    ka, kb = kind(a), kind(b)
    if "u" in (ka, kb):
        return U
    if op == "+" and "s" in (ka, kb) and {ka, kb} <= {"s", "i", "d", "b"}:
        return text_of(a) + text_of(b)
    if ka not in "id" or kb not in "id":
        raise Fail
    if ka == kb == "i":
        if op in "/%":
            if b == 0 or (a == -(2**63) and b == -1):
                raise Fail
            q = int(a / b) if abs(a) < 2**52 and abs(b) < 2**52 else _trunc_div(a, b)
            return wrap(q) if op == "/" else wrap(a - b * q)
        return wrap({"+": a + b, "-": a - b, "*": a * b}[op])
    a, b = float(a), float(b)
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        if b == 0:
            if a == 0 or a != a:
                return math.nan
            return math.inf if (a > 0) == (math.copysign(1, b) > 0) else -math.inf
        return a / b
    if b == 0 or a != a or b != b or a in (math.inf, -math.inf):
        return math.nan
    return math.fmod(a, b)


def _trunc_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def o_cmp(op, a, b):
    ka, kb = kind(a), kind(b)
    if "u" in (ka, kb):
        return U
    if ka in "id" and kb in "id":
        if "d" in (ka, kb):
            a, b = float(a), float(b)
        r = {"=": a == b, "<>": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        return r
    if ka == kb and op in ("=", "<>"):
        return (a == b) == (op == "=")
    raise Fail


def o_like(v, p, e):
    if U in (kind(v), kind(p)) or kind(v) == "u" or kind(p) == "u" or (e is not None and kind(e) == "u"):
        return U
    if kind(v) != "s" or kind(p) != "s":
        raise Fail
    if e is not None and (kind(e) != "s" or len(e) != 1):
        raise Fail
    # A backtracking matcher over the pattern, independent of regular expressions.
    toks = []
    i = 0
    while i < len(p):
        if e is not None and p[i] == e:
            if i + 1 == len(p):
                raise Fail
            toks.append(("lit", p[i + 1]))
            i += 2
        elif p[i] == "%":
            toks.append(("any",))
            i += 1
        elif p[i] == "_":
            toks.append(("one",))
            i += 1
        else:
            toks.append(("lit", p[i]))
            i += 1
    memo = {}

    def m(ti, si):
        if (ti, si) in memo:
            return memo[ti, si]
        if ti == len(toks):
            r = si == len(v)
        elif toks[ti][0] == "any":
            r = any(m(ti + 1, k) for k in range(si, len(v) + 1))
        elif si < len(v) and (toks[ti][0] == "one" or toks[ti][1] == v[si]):
            r = m(ti + 1, si + 1)
        else:
            r = False
        memo[ti, si] = r
        return r

    return m(0, 0)


SYS = {"messageid": "message_id", "label": "subject", "subject": "subject"}


def o_prop(scope, name, msg):
    system, user = msg
    if scope == "sys":
        if name.lower() not in SYS:
            raise Fail
        return system.get(SYS[name.lower()])
    for k in user:
        if k == name:
            return user[k]
    for k in user:
        if k.lower() == name.lower():
            return user[k]
    return U


def oracle(node, msg):
    t = node[0]
    if t == "const":
        return node[1]
    if t == "prop":
        return o_prop(node[1], node[2], msg)
    if t == "arith":
        return o_arith(node[1], oracle(node[2], msg), oracle(node[3], msg))
    if t == "neg":
        v = oracle(node[1], msg)
        k = kind(v)
        if k == "u":
            return U
        if k == "i":
            return wrap(-v)
        if k == "d":
            return -v
        raise Fail
    if t == "cmp":
        return o_cmp(node[1], oracle(node[2], msg), oracle(node[3], msg))
    if t == "and":
        return AND[tv(oracle(node[1], msg)), tv(oracle(node[2], msg))]
    if t == "or":
        return OR[tv(oracle(node[1], msg)), tv(oracle(node[2], msg))]
    if t == "not":
        return NOT[tv(oracle(node[1], msg))]
    if t == "isnull":
        v = oracle(node[1], msg)
        r = kind(v) == "u"
        return r != node[2]
    if t == "exists":
        scope, name = node[1][1], node[1][2]
        v = o_prop(scope, name, msg)
        return not (v is U or (scope == "sys" and v is None))
    if t == "in":
        left = oracle(node[1], msg)
        items = [oracle(i, msg) for i in node[2]]
        if kind(left) == "u":
            return U
        acc = F
        for item in items:
            acc = OR[acc, o_cmp("=", left, item)]
        return NOT[acc] if node[3] else acc
    if t == "like":
        v, p = oracle(node[1], msg), oracle(node[2], msg)
        e = oracle(node[3], msg) if node[3] is not None else None
        r = o_like(v, p, e)
        return NOT[r] if node[4] else r
    raise AssertionError(t)


# ------------------------------------------------------------------ generation

NAMES = ["a", "b", "s", "missing", "Color"]
INTS = st.one_of(st.integers(-5, 5), st.sampled_from([2**63 - 1, -(2**63), 2**31, 10**12]))
FLOATS = st.one_of(st.sampled_from([0.0, 0.5, -2.5, 1e-5, 3.0, 1e16]), st.floats(-1e6, 1e6, allow_nan=False, width=32))
STRINGS = st.text(alphabet="ab%_'\\ x", max_size=5)
VALUES = st.one_of(INTS, FLOATS, STRINGS, st.booleans())

props = st.one_of(
    st.tuples(st.just("prop"), st.just("user"), st.sampled_from(NAMES)),
    st.tuples(st.just("prop"), st.just("sys"), st.sampled_from(["MessageId", "Label", "label", "Nope"])),
)
consts = st.one_of(VALUES.map(lambda v: ("const", v)), st.just(("const", None)))


def expressions():
    return st.recursive(
        st.one_of(consts, props),
        lambda inner: st.one_of(
            st.tuples(st.just("arith"), st.sampled_from("+-*/%"), inner, inner),
            st.tuples(st.just("neg"), inner),
        ),
        max_leaves=4,
    )


def predicates():
    expr = expressions()
    base = st.one_of(
        st.tuples(st.just("cmp"), st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), expr, expr),
        st.tuples(st.just("isnull"), props, st.booleans()),
        st.tuples(st.just("exists"), props),
        st.tuples(st.just("in"), expr, st.lists(expr, min_size=1, max_size=3).map(tuple), st.booleans()),
        st.tuples(st.just("like"), expr, expr, st.one_of(st.none(), expr), st.booleans()),
        st.sampled_from([("const", True), ("const", False)]),
    )
    return st.recursive(
        base,
        lambda inner: st.one_of(
            st.tuples(st.just("and"), inner, inner),
            st.tuples(st.just("or"), inner, inner),
            st.tuples(st.just("not"), inner),
        ),
        max_leaves=5,
    )


def kw(word, draw):
    return "".join(c.upper() if draw(st.booleans()) else c.lower() for c in word)


def render(node, draw) -> str:
    sp = lambda: draw(st.sampled_from([" ", "  ", "\t", "\n "]))  # noqa: E731
    t = node[0]
    if t == "const":
        v = node[1]
        if v is None:
            return kw("null", draw)
        if v is True or v is False:
            return kw("true" if v else "false", draw)
        if type(v) is int:
            return f"({v})" if v < 0 else str(v)
        if type(v) is float:
            r = repr(v)
            if "e" not in r and "." not in r:
                r += ".0"
            return f"({r})" if v < 0 or r.startswith("-") else r
        return "'" + v.replace("'", "''") + "'"
    if t == "prop":
        scope, name = node[1], node[2]
        style = draw(st.sampled_from(["plain", "bracket", "quote"]))
        ident = name if style == "plain" else ("[" + name.replace("]", "]]") + "]" if style == "bracket" else '"' + name + '"')
        if scope == "sys":
            return kw("sys", draw) + "." + ident
        return (kw("user", draw) + "." + ident) if draw(st.booleans()) else ident
    if t == "arith":
        return f"({render(node[2], draw)}{sp()}{node[1]}{sp()}{render(node[3], draw)})"
    if t == "neg":
        return f"(-{render(node[1], draw)})"
    if t == "cmp":
        op = node[1] if node[1] != "<>" else draw(st.sampled_from(["<>", "!="]))
        return f"({render(node[2], draw)}{sp()}{op}{sp()}{render(node[3], draw)})"
    if t in ("and", "or"):
        return f"({render(node[1], draw)}{sp()}{kw(t, draw)}{sp()}{render(node[2], draw)})"
    if t == "not":
        return f"({kw('not', draw)}{sp()}{render(node[1], draw)})"
    if t == "isnull":
        return f"({render(node[1], draw)}{sp()}{kw('is', draw)}{sp()}{kw('not', draw) + sp() if node[2] else ''}{kw('null', draw)})"
    if t == "exists":
        return f"{kw('exists', draw)}({render(node[1], draw)})"
    if t == "in":
        items = ("," + sp()).join(render(i, draw) for i in node[2])
        return f"({render(node[1], draw)}{sp()}{kw('not', draw) + sp() if node[3] else ''}{kw('in', draw)}{sp()}({items}))"
    if t == "like":
        esc = f"{sp()}{kw('escape', draw)}{sp()}{render(node[3], draw)}" if node[3] is not None else ""
        return f"({render(node[1], draw)}{sp()}{kw('not', draw) + sp() if node[4] else ''}{kw('like', draw)}{sp()}{render(node[2], draw)}{esc})"
    raise AssertionError(t)


messages = st.tuples(
    st.fixed_dictionaries({}, optional={"message_id": st.text(alphabet="ab%", max_size=3), "subject": st.text(alphabet="ab_", max_size=3)}),
    st.dictionaries(st.sampled_from(["a", "b", "s", "color", "A"]), st.one_of(VALUES, st.none()), max_size=4),
)


def same(model, expected) -> bool:
    if model is UNKNOWN or model is None:
        return expected is U or expected is None
    if model is True or model is False:
        return expected is model
    if type(model) is float and type(expected) is float:
        return (model != model and expected != expected) or model == expected
    return type(model) is type(expected) and model == expected


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_parser_and_evaluator_agree_with_the_oracle(data):
    tree = data.draw(st.one_of(predicates(), expressions()), label="tree")
    text = render(tree, data.draw)
    msg = data.draw(messages, label="message")
    note = f"{text!r} on {msg!r}"
    parsed = parse_filter(text)
    props = Properties({"message_id": None, "subject": None, **msg[0]}, msg[1])
    try:
        expected = oracle(tree, msg)
    except Fail:
        expected = ERR
    try:
        got = Evaluator(props).eval(parsed.tree)
    except FilterEvaluationError:
        got = ERR
    if expected == ERR or got == ERR:
        assert got == expected, note
    else:
        assert same(got, expected), f"{note}: model {got!r}, oracle {expected!r}"


SQLISH = st.lists(
    st.sampled_from(list("abAB_ 0123456789.,;()=<>!+-*/%'\"[]@eE\n") + ["AND ", "OR ", "NOT ", " IN ", " LIKE ", " IS ", "NULL", "EXISTS", "sys.", "user.", "ESCAPE ", "SET ", "REMOVE "]),
    max_size=30,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(SQLISH)
def test_any_text_parses_or_is_refused_with_a_position(text):
    for parse in (parse_filter, parse_action):
        try:
            parse(text)
        except ServiceBusError as error:
            assert error.code is ErrorCode.ARGUMENT_ERROR
            if text.strip():
                m = re.search(r"at line (\d+), position (\d+)\.$", error.text)
                assert m, error.text
                line, col = int(m[1]), int(m[2])
                lines = text.split("\n")
                assert 1 <= line <= len(lines) and 1 <= col <= len(lines[line - 1]) + 1, (text, error.text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_actions_agree_with_the_oracle(data):
    """SET out = <expression>, applied to a message, stores what the oracle computes (UNKNOWN:
    null); an action that cannot evaluate fails exactly where the oracle does."""
    from sbreference import Message
    from sbreference.rules import SqlRuleAction, properties_of

    tree = data.draw(expressions(), label="tree")
    text = "SET out = " + render(tree, data.draw)
    system, user = data.draw(messages, label="message")
    message = Message(b"", message_id=system.get("message_id"), subject=system.get("subject"), application_properties=user)
    msg = ({"message_id": message.message_id, "subject": message.subject}, user)
    try:
        expected = oracle(tree, msg)
    except Fail:
        expected = ERR
    try:
        out = SqlRuleAction(text).apply(message, properties_of(message))
        got = out.application_properties["out"]
    except FilterEvaluationError:
        got = ERR
    if expected == ERR or got == ERR:
        assert got == expected, text
    else:
        assert same(UNKNOWN if got is None else got, expected), f"{text!r}: model {got!r}, oracle {expected!r}"
    assert message.application_properties == user  # the message itself never changes
