"""Service Bus's SQL-92 subset, read: the tokenizer and the parser of filter conditions and rule actions.

Grammar and limits follow Microsoft's two reference pages (clauses RULES-SQL-*):
- https://learn.microsoft.com/en-us/azure/service-bus-messaging/service-bus-messaging-sql-filter
- https://learn.microsoft.com/en-us/azure/service-bus-messaging/service-bus-messaging-sql-rule-action

``parse_filter(text)`` and ``parse_action(text)`` refuse invalid text with an argument error that
names the problem and its position ("at line 1, position 9": RULES-SQL-014), and return the tree
that ``sqlfilter`` evaluates. The unknown value and the evaluation error live here too, as the
vocabulary both halves share. Standard library only; no I/O.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import ErrorCode, ServiceBusError
from .timevalues import is_time

#: SQL filter and action texts are at most 1024 characters; an action has at most 32 statements
#: (https://learn.microsoft.com/en-us/azure/service-bus-messaging/service-bus-quotas).
MAX_EXPRESSION_LENGTH = 1024
MAX_ACTION_STATEMENTS = 32
#: The model's bound on nesting (parentheses, NOT, signs, operator chains): deeper trees are
#: refused at creation, so that neither parsing nor evaluation can exhaust the stack. The docs
#: state no such limit; real filters stay far below it.
MAX_DEPTH = 64

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

KEYWORDS = frozenset(
    {"AND", "OR", "NOT", "IN", "LIKE", "ESCAPE", "IS", "NULL", "EXISTS", "TRUE", "FALSE", "SET", "REMOVE"}
)


class _Unknown:
    """SQL's third truth value (and the value of a non-existent user property)."""

    _instance: "_Unknown | None" = None

    def __new__(cls) -> "_Unknown":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __bool__(self) -> bool:  # never silently truthy
        raise TypeError("UNKNOWN has no truth value; compare with `is UNKNOWN`")


UNKNOWN = _Unknown()


class FilterEvaluationError(Exception):
    """Evaluating a filter or an action failed for this message (RULES-DLQ-001)."""


def syntax_error(kind: str, text: str, position: int, detail: str) -> ServiceBusError:
    """RULES-SQL-014: refused at creation, naming the problem and where (1-based position)."""
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    return ServiceBusError(
        ErrorCode.ARGUMENT_ERROR,
        f"The {kind} expression is not valid: {detail} at line {line}, position {column}.",
        transient=False,
    )


# ---------------------------------------------------------------------- tokens


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # int, float, str, ident, qident (delimited/quoted), param, op, kw, end
    value: Any
    pos: int


_OPS = ("<>", "!=", ">=", "<=", "=", ">", "<", "+", "-", "*", "/", "%", "(", ")", ",", ".", ";")
_NUMBER = re.compile(r"(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")


def _is_letter(c: str) -> bool:
    return c.isalpha()


def _is_digit(c: str) -> bool:
    return c.isdecimal()


def tokenize(text: str, kind: str) -> list[Token]:
    out: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        start = i
        if c == "'":  # string constant; '' is one quote
            i += 1
            buf = []
            while True:
                if i >= n:
                    raise syntax_error(kind, text, start, "unterminated string constant")
                if text[i] == "'":
                    if i + 1 < n and text[i + 1] == "'":
                        buf.append("'")
                        i += 2
                        continue
                    i += 1
                    break
                buf.append(text[i])
                i += 1
            out.append(Token("str", "".join(buf), start))
        elif c in "[\"":  # delimited [..]] or quoted ".."" identifier
            close = "]" if c == "[" else '"'
            i += 1
            buf = []
            while True:
                if i >= n:
                    raise syntax_error(kind, text, start, "unterminated identifier")
                if text[i] == close:
                    if i + 1 < n and text[i + 1] == close:
                        buf.append(close)
                        i += 2
                        continue
                    i += 1
                    break
                buf.append(text[i])
                i += 1
            if not buf:
                raise syntax_error(kind, text, start, "empty identifier")
            out.append(Token("qident", "".join(buf), start))
        elif _is_digit(c) or (c == "." and i + 1 < n and _is_digit(text[i + 1])):
            m = _NUMBER.match(text, i)
            if m is None or not m.group(0).isascii():
                raise syntax_error(kind, text, start, "malformed number")
            i = m.end()
            if i < n and (_is_letter(text[i]) or text[i] == "_"):
                raise syntax_error(kind, text, start, "malformed number")
            lexeme = m.group(0)
            if "." in lexeme or "e" in lexeme or "E" in lexeme:
                value = float(lexeme)
                if math.isinf(value):
                    raise syntax_error(kind, text, start, f"number {lexeme} is out of range")
                out.append(Token("float", value, start))
            else:
                value = int(lexeme)
                if value > INT64_MAX + 1:  # the +1 allows -9223372036854775808
                    raise syntax_error(kind, text, start, f"integer {lexeme} is out of the Int64 range")
                out.append(Token("int", value, start))
        elif _is_letter(c):
            i += 1
            while i < n and (_is_letter(text[i]) or _is_digit(text[i]) or text[i] == "_"):
                i += 1
            word = text[start:i]
            if word.upper() in KEYWORDS:
                out.append(Token("kw", word.upper(), start))
            else:
                out.append(Token("ident", word, start))
        elif c == "@":
            i += 1
            while i < n and (_is_letter(text[i]) or _is_digit(text[i]) or text[i] == "_"):
                i += 1
            if i == start + 1:
                raise syntax_error(kind, text, start, "'@' must start a parameter name")
            out.append(Token("param", text[start:i], start))
        else:
            for op in _OPS:
                if text.startswith(op, i):
                    out.append(Token("op", "<>" if op == "!=" else op, start))
                    i += len(op)
                    break
            else:
                raise syntax_error(kind, text, start, f"unexpected character {c!r}")
    out.append(Token("end", None, n))
    return out


# ------------------------------------------------------------------------ parser
#
# The tree is nested tuples, the first item naming the node:
#   ("const", v) ("prop", scope, name) ("param", name) ("newid",) ("propfn", e)
#   ("neg", e) ("pos", e) ("arith", op, l, r) ("cmp", op, l, r)
#   ("and", l, r) ("or", l, r) ("not", e) ("isnull", e, negated) ("in", e, items, negated)
#   ("like", e, pattern, escape_or_None, negated) ("exists", prop)

_COMPARISONS = ("=", "<>", ">", ">=", "<", "<=")


class _Parser:
    def __init__(self, text: str, kind: str, parameters: Mapping[str, Any] | None = None) -> None:
        if len(text) > MAX_EXPRESSION_LENGTH:
            raise ServiceBusError(
                ErrorCode.ARGUMENT_ERROR,
                f"The {kind} expression is {len(text)} characters long; the maximum is {MAX_EXPRESSION_LENGTH}.",
                transient=False,
            )
        self.text = text
        self.kind = kind
        self.tokens = tokenize(text, kind)
        self.i = 0
        self.depth = 0
        self.parameters = {k.lower(): v for k, v in (parameters or {}).items()}

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"the expression nests more than {MAX_DEPTH} levels deep")

    # -- helpers
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def error(self, detail: str, token: Token | None = None) -> ServiceBusError:
        t = token or self.tok
        return syntax_error(self.kind, self.text, t.pos, detail)

    def at(self, kind: str, value: Any = None) -> bool:
        t = self.tok
        return t.kind == kind and (value is None or t.value == value)

    def take(self, kind: str, value: Any = None) -> Token | None:
        if self.at(kind, value):
            t = self.tok
            self.i += 1
            return t
        return None

    def expect(self, kind: str, value: Any = None, what: str = "") -> Token:
        t = self.take(kind, value)
        if t is None:
            found = "the end of the expression" if self.tok.kind == "end" else repr(self.text[self.tok.pos:self.tok.pos + 12])
            raise self.error(f"expected {what or value or kind}, found {found}")
        return t

    def end(self) -> None:
        if not self.at("end"):
            raise self.error(f"unexpected {self.text[self.tok.pos:self.tok.pos + 12]!r}")

    # -- predicates
    def predicate(self) -> tuple:
        self.enter()
        left = self.conjunction()
        while self.take("kw", "OR"):
            left = ("or", left, self.conjunction())
        self.depth -= 1
        return left

    def conjunction(self) -> tuple:
        left = self.negation()
        while self.take("kw", "AND"):
            left = ("and", left, self.negation())
        return left

    def negation(self) -> tuple:
        if self.take("kw", "NOT"):
            self.enter()
            inner = self.negation()
            self.depth -= 1
            return ("not", inner)
        return self.comparison()

    def comparison(self) -> tuple:
        if self.take("kw", "EXISTS"):
            self.expect("op", "(", "'(' after EXISTS")
            prop = self.property_ref(self.tok)
            self.expect("op", ")", "')'")
            return ("exists", prop)
        left = self.additive()
        t = self.tok
        if t.kind == "op" and t.value in _COMPARISONS:
            self.i += 1
            return ("cmp", t.value, left, self.additive())
        if self.take("kw", "IS"):
            negated = self.take("kw", "NOT") is not None
            self.expect("kw", "NULL", "NULL after IS")
            if left[0] not in ("prop", "propfn"):
                raise self.error("IS [NOT] NULL applies to a property", t)
            return ("isnull", left, negated)
        negated = False
        if self.at("kw", "NOT") and self.tokens[self.i + 1].kind == "kw" and self.tokens[self.i + 1].value in ("IN", "LIKE"):
            self.i += 1
            negated = True
        if self.take("kw", "IN"):
            self.expect("op", "(", "'(' after IN")
            items = [self.additive()]
            while self.take("op", ","):
                items.append(self.additive())
            self.expect("op", ")", "')' or ','")
            return ("in", left, tuple(items), negated)
        if self.take("kw", "LIKE"):
            pattern = self.additive()
            escape = self.additive() if self.take("kw", "ESCAPE") else None
            return ("like", left, pattern, escape, negated)
        if negated:
            raise self.error("expected IN or LIKE after NOT")
        return left

    # -- expressions
    def additive(self) -> tuple:
        left = self.multiplicative()
        while self.tok.kind == "op" and self.tok.value in ("+", "-"):
            op = self.tok.value
            self.i += 1
            left = ("arith", op, left, self.multiplicative())
        return left

    def multiplicative(self) -> tuple:
        left = self.unary()
        while self.tok.kind == "op" and self.tok.value in ("*", "/", "%"):
            op = self.tok.value
            self.i += 1
            left = ("arith", op, left, self.unary())
        return left

    def unary(self) -> tuple:
        if self.take("op", "-"):
            if self.at("int"):  # -9223372036854775808 is a constant, not a negated overflow
                t = self.take("int")
                return ("const", _int64(-t.value))
            self.enter()
            inner = self.unary()
            self.depth -= 1
            return ("neg", inner)
        if self.take("op", "+"):
            self.enter()
            inner = self.unary()
            self.depth -= 1
            return ("pos", inner)
        return self.primary()

    def primary(self) -> tuple:
        t = self.tok
        if t.kind == "int":
            self.i += 1
            if t.value > INT64_MAX:
                raise self.error(f"integer {t.value} is out of the Int64 range", t)
            return ("const", t.value)
        if t.kind in ("float", "str"):
            self.i += 1
            return ("const", t.value)
        if t.kind == "kw" and t.value in ("TRUE", "FALSE", "NULL"):
            self.i += 1
            return ("const", {"TRUE": True, "FALSE": False, "NULL": None}[t.value])
        if t.kind == "param":
            self.i += 1
            name = t.value.lower()
            if name not in self.parameters:
                raise self.error(f"parameter {t.value} has no value", t)
            value = self.parameters[name]
            # RULES-SQL-016: dates and durations too (the REST API's d6p1:dateTime and d6p1:duration parameters)
            if not (isinstance(value, (str, int, float, bool)) or is_time(value)) or (
                    isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX):
                raise self.error(f"parameter {t.value} must be a string, a 64-bit integer, a double, a boolean, a date or a duration", t)
            return ("const", value)
        if t.kind == "op" and t.value == "(":
            self.i += 1
            inner = self.predicate()
            self.expect("op", ")", "')'")
            return inner
        if t.kind == "ident" and self.tokens[self.i + 1].kind == "op" and self.tokens[self.i + 1].value == "(":
            name = t.value.lower()
            if name == "newid":
                self.i += 2
                self.expect("op", ")", "')' after newid(")
                return ("newid",)
            if name in ("property", "p"):
                self.i += 2
                inner = self.additive()
                self.expect("op", ")", "')'")
                return ("propfn", inner)
            raise self.error(f"unknown function {t.value!r}", t)
        if t.kind in ("ident", "qident"):
            return self.property_ref(t)
        if t.kind == "end":
            raise self.error("unexpected end of the expression", t)
        raise self.error(f"unexpected {self.text[t.pos:t.pos + 12]!r}", t)

    def property_ref(self, t: Token) -> tuple:
        if t.kind not in ("ident", "qident"):
            raise self.error("expected a property name", t)
        self.i += 1
        if t.kind == "ident" and t.value.lower() in ("sys", "user") and self.at("op", "."):
            self.i += 1
            name = self.tok
            if name.kind not in ("ident", "qident"):
                raise self.error("expected a property name after the scope", name)
            self.i += 1
            return ("prop", t.value.lower(), name.value)
        return ("prop", "user", t.value)


@dataclass(frozen=True)
class SqlExpression:
    """A parsed SQL filter condition."""

    text: str
    tree: tuple


@dataclass(frozen=True)
class SqlActionStatement:
    verb: str  # "SET" or "REMOVE"
    target: tuple  # ("prop", scope, name)
    value: tuple | None = None


def parse_filter(text: str, parameters: Mapping[str, Any] | None = None) -> SqlExpression:
    """Parse a SQL filter condition; invalid text is an argument error with its position."""
    if not isinstance(text, str) or not text.strip():
        raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, "A SQL filter needs a non-empty expression.", transient=False)
    p = _Parser(text, "SQL filter", parameters)
    tree = p.predicate()
    p.end()
    _check_depth(p, tree)
    return SqlExpression(text, tree)


def parse_action(text: str, parameters: Mapping[str, Any] | None = None) -> tuple[SqlActionStatement, ...]:
    """Parse SQL rule action statements (``SET p = e``, ``REMOVE p``, separated by ``;`` or ``,``)."""
    if not isinstance(text, str) or not text.strip():
        raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, "A SQL rule action needs a non-empty expression.", transient=False)
    p = _Parser(text, "SQL rule action", parameters)
    out: list[SqlActionStatement] = []
    while not p.at("end"):
        t = p.tok
        if p.take("kw", "SET"):
            target = p.property_ref(p.tok)
            p.expect("op", "=", "'=' after the property")
            out.append(SqlActionStatement("SET", target, p.additive()))
        elif p.take("kw", "REMOVE"):
            out.append(SqlActionStatement("REMOVE", p.property_ref(p.tok)))
        else:
            raise p.error("expected SET or REMOVE", t)
        if not (p.take("op", ";") or p.take("op", ",")) and not p.at("end"):
            if not (p.at("kw", "SET") or p.at("kw", "REMOVE")):
                raise p.error("expected ';', ',' or the end of the action")
        if len(out) > MAX_ACTION_STATEMENTS:
            raise p.error(f"an action has at most {MAX_ACTION_STATEMENTS} statements", t)
    for statement in out:
        if statement.value is not None:
            _check_depth(p, statement.value)
    return tuple(out)


def _check_depth(p: _Parser, tree: tuple) -> None:
    """Operator chains (a + a + ... + a) nest without recursion in the parser: bound the tree."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH * 2:
            raise syntax_error(p.kind, p.text, 0, f"the expression nests more than {MAX_DEPTH * 2} operations deep")
        for child in node[1:]:
            if isinstance(child, tuple) and child and isinstance(child[0], str):
                stack.append((child, depth + 1))
            elif isinstance(child, tuple):
                stack.extend((c, depth + 1) for c in child if isinstance(c, tuple))


# -------------------------------------------------------------------- evaluation


def _int64(value: int) -> int:
    """C# long arithmetic is unchecked: it wraps."""
    return ((value - INT64_MIN) % 2**64) + INT64_MIN
