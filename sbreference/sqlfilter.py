"""Service Bus's SQL-92 subset: filter conditions and rule actions, evaluated (parsed in ``sqlparse``).

Grammar, types and the unknown value follow Microsoft's two reference pages (clauses RULES-SQL-*):
- https://learn.microsoft.com/en-us/azure/service-bus-messaging/service-bus-messaging-sql-filter
- https://learn.microsoft.com/en-us/azure/service-bus-messaging/service-bus-messaging-sql-rule-action

``parse_filter(text)`` and ``parse_action(text)`` refuse invalid text with an argument error that
names the problem and its position ("at line 1, position 9": RULES-SQL-014). A parsed filter is
evaluated against a ``Properties`` view of one message; the result is ``True``, ``False`` or
``UNKNOWN`` (a message is selected only when it is ``True``: RULES-SQL-004). Evaluation errors
(a non-existent system property, operands C# cannot bind, an integer divided by zero) raise
``FilterEvaluationError``: the caller dead-letters or skips the message (RULES-DLQ-001).

Readings where the pages are silent, chosen once and listed as discrepancies in
sbspec/clauses/rules.toml: operands of AND/OR/IN are all evaluated (no short-circuit, so an error
anywhere is an error); ``=`` between a string and a number is an operator-binding error, as in
C#; LIKE is case-sensitive (ordinal), as C# string equality is.

Standard library only; no I/O; ``newid()`` draws from a caller-supplied source (deterministic
by default), never from a random generator.
"""


from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Iterator, Mapping

# The reading half (tokens, parser, trees), re-exported: callers import both halves from here.
from .sqlparse import (
    INT64_MAX,
    INT64_MIN,
    KEYWORDS,
    MAX_ACTION_STATEMENTS,
    MAX_DEPTH,
    MAX_EXPRESSION_LENGTH,
    UNKNOWN,
    FilterEvaluationError,
    SqlActionStatement,
    SqlExpression,
    Token,
    _int64,
    _Unknown,
    parse_action,
    parse_filter,
    syntax_error,
    tokenize,
)
from .timevalues import MAX_US, Guid, Instant, Span, Uri, as_guid, compare_times, is_time, negate_time, time_arithmetic, time_name

# ------------------------------------------------------------------ properties

#: System properties a filter or action may name with ``sys.`` (case-insensitive), and the
#: ``Message`` field each reads. Label and Subject are one property (Subject is the newer name).
SYSTEM_PROPERTIES: dict[str, str] = {
    "messageid": "message_id",
    "correlationid": "correlation_id",
    "to": "to",
    "replyto": "reply_to",
    "label": "subject",
    "subject": "subject",
    "sessionid": "session_id",
    "replytosessionid": "reply_to_session_id",
    "contenttype": "content_type",
    "partitionkey": "partition_key",
    "timetolive": "time_to_live",
    "scheduledenqueuetimeutc": "scheduled_enqueue_time",
    "sequencenumber": "sequence_number",
    "enqueuedtimeutc": "enqueued_time",
    "size": "size",
    # RULES-SQL-017: BrokeredMessage's other public properties, as they are at the topic
    "deliverycount": "delivery_count",
    "enqueuedsequencenumber": "enqueued_sequence_number",
    "expiresatutc": "expires_at",
    "deadlettersource": "dead_letter_source",
    "lockeduntilutc": "locked_until",
    "locktoken": "lock_token",
}
#: System properties an action may SET or REMOVE; the rest are the broker's.
WRITABLE_SYSTEM_PROPERTIES = frozenset(
    {"message_id", "correlation_id", "to", "reply_to", "subject", "session_id", "reply_to_session_id", "content_type",
     "partition_key", "time_to_live", "scheduled_enqueue_time"}
)
_STRING_SYSTEM = frozenset(WRITABLE_SYSTEM_PROPERTIES - {"time_to_live", "scheduled_enqueue_time"})


#: RULES-SQL-016: system properties the model keeps as virtual milliseconds and a filter sees as a DateTime
#: (an instant: the rules' epoch plus the milliseconds) or a TimeSpan (a length), as BrokeredMessage has them.
INSTANT_FIELDS = frozenset({"enqueued_time", "scheduled_enqueue_time", "expires_at"})
DURATION_FIELDS = frozenset({"time_to_live"})


class Properties:
    """What a filter sees of one message: system values by field, user properties by key.

    User property names are case-insensitive (an exact key wins over a differently cased one).
    ``epoch_ms``: the UTC instant, in epoch milliseconds, of the model's time 0 (RULES-SQL-016).
    """

    def __init__(self, system: Mapping[str, Any], user: Mapping[str, Any], epoch_ms: int = 0) -> None:
        self.system = dict(system)
        self.user = dict(user)
        self.epoch_ms = epoch_ms

    def system_value(self, field: str) -> Any:
        """The value of a system field as a filter sees it: times as DateTime and TimeSpan (RULES-SQL-016)."""
        v = self.system.get(field)
        if v is None or type(v) is not int:
            return v
        if field in INSTANT_FIELDS:  # past DateTime.MaxValue (never): the largest DateTime
            return Instant(min((self.epoch_ms + v) * 1000, MAX_US))
        if field in DURATION_FIELDS:
            return Span(v * 1000)
        return v

    def user_key(self, name: str) -> str | None:
        if name in self.user:
            return name
        low = name.lower()
        for key in self.user:
            if key.lower() == low:
                return key
        return None

    def system_field(self, name: str) -> str:
        field = SYSTEM_PROPERTIES.get(name.lower())
        if field is None:
            raise FilterEvaluationError(f"'sys.{name}' is not a system property of the message")
        return field

    def get(self, scope: str, name: str) -> Any:
        """The value, ``None`` for a null value, ``UNKNOWN`` for a non-existent user property."""
        if scope == "sys":
            return self.system_value(self.system_field(name))
        key = self.user_key(name)
        return UNKNOWN if key is None else self.user[key]

    def exists(self, scope: str, name: str) -> bool:
        if scope == "sys":
            return self.system.get(self.system_field(name)) is not None
        return self.user_key(name) is not None


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def type_name(v: Any) -> str:
    if as_guid(v) is not None:
        return "Guid"
    if isinstance(v, Uri):
        return "Uri"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "long"
    if isinstance(v, float):
        return "double"
    if isinstance(v, str):
        return "string"
    return time_name(v) or type(v).__name__


def cs_string(v: Any) -> str:
    """C#'s ToString of a value, as string concatenation uses it."""
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "\u221e" if v > 0 else "-\u221e"
        if v == int(v) and abs(v) < 1e15:
            return str(int(v))
        return repr(v).replace("e", "E")
    return str(v)


def _missing(v: Any) -> bool:
    return v is UNKNOWN or v is None


#: The longest string an expression may build (ours: Service Bus documents none, and would refuse a copy
#: larger than the entity's maximum message size anyway).
MAX_STRING = 1 << 22  # our bound (4 Mi characters), documented in sbspec/clauses/rules.toml


def arithmetic(op: str, a: Any, b: Any) -> Any:
    """``+ - * / %`` with C#'s binding: long op long is long (unchecked, division truncates,
    by zero an error), a double makes it double; + with a string concatenates."""
    if _missing(a) or _missing(b):
        return UNKNOWN
    if is_time(a) or is_time(b):  # RULES-SQL-016
        try:
            result = time_arithmetic(op, a, b)
        except OverflowError:
            raise FilterEvaluationError(f"'{op}' on {type_name(a)} and {type_name(b)} is out of {type_name(a)}'s range") from None
        if result is None:
            raise FilterEvaluationError(f"operator '{op}' cannot be applied to operands of type {type_name(a)} and {type_name(b)}")
        return result
    if op == "+" and (isinstance(a, str) or isinstance(b, str)):
        if isinstance(a, (str, int, float, bool)) and isinstance(b, (str, int, float, bool)):
            joined = cs_string(a) + cs_string(b)
            if len(joined) > MAX_STRING:  # a rule action doubling a string per statement would exhaust memory
                raise FilterEvaluationError(f"a string of {len(joined)} characters exceeds {MAX_STRING}, the largest a message can carry")
            return joined
    if not (_is_number(a) and _is_number(b)):
        raise FilterEvaluationError(f"operator '{op}' cannot be applied to operands of type {type_name(a)} and {type_name(b)}")
    if isinstance(a, int) and isinstance(b, int):
        if op == "+":
            return _int64(a + b)
        if op == "-":
            return _int64(a - b)
        if op == "*":
            return _int64(a * b)
        if b == 0:
            raise FilterEvaluationError("attempted to divide by zero")
        if a == INT64_MIN and b == -1:
            raise FilterEvaluationError("arithmetic operation resulted in an overflow")  # as C# does
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # truncates toward zero
        return _int64(q) if op == "/" else _int64(a - b * q)
    x, y = float(a), float(b)
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if op == "/":
        if y == 0:
            return math.nan if x == 0 or math.isnan(x) else math.copysign(math.inf, x) * math.copysign(1.0, y)
        return x / y
    if y == 0 or math.isinf(x) or math.isnan(y) or math.isnan(x):
        return math.nan
    return math.fmod(x, y)  # the sign of the dividend, as C#'s %


def negate(a: Any) -> Any:
    if _missing(a):
        return UNKNOWN
    try:
        span = negate_time(a)
    except OverflowError:  # -TimeSpan.MinValue: C#'s OverflowException
        raise FilterEvaluationError("negating TimeSpan.MinValue overflows") from None
    if span is not None:
        return span  # TimeSpan has a unary minus (RULES-SQL-016)
    if not _is_number(a):
        raise FilterEvaluationError(f"operator '-' cannot be applied to an operand of type {type_name(a)}")
    return _int64(-a) if isinstance(a, int) else -a


def compare(op: str, a: Any, b: Any) -> Any:
    """Comparison with C#'s binding: numbers promote (long to double); two dates or two durations are
    ordered (RULES-SQL-016); strings, booleans and other values of one type compare for (in)equality
    only; other pairs are binding errors."""
    if _missing(a) or _missing(b):
        return UNKNOWN
    if _is_number(a) and _is_number(b):
        if isinstance(a, float) or isinstance(b, float):
            a, b = float(a), float(b)
        return {"=": a == b, "<>": a != b, ">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b}[op]
    kind = type(a)
    if kind is not type(b) or (kind is not str and kind is not bool):
        ga, gb = as_guid(a), as_guid(b)
        if ga is not None and gb is not None and op in ("=", "<>"):  # two System.Guid (RULES-SQL-018)
            return (ga == gb) is (op == "=")
        timed = compare_times(op, a, b)
        if timed is not None:
            return timed
    if kind is type(b) and not _is_number(a):
        if op == "=":
            return a == b
        if op == "<>":
            return a != b
    raise FilterEvaluationError(f"operator '{op}' cannot be applied to operands of type {type_name(a)} and {type_name(b)}")


def truth(v: Any, where: str) -> Any:
    if v is UNKNOWN or v is None:
        return UNKNOWN
    if isinstance(v, bool):
        return v
    raise FilterEvaluationError(f"{where} needs a boolean, not a {type_name(v)}")


def and3(a: Any, b: Any) -> Any:
    if a is False or b is False:
        return False
    if a is UNKNOWN or b is UNKNOWN:
        return UNKNOWN
    return True


def or3(a: Any, b: Any) -> Any:
    if a is True or b is True:
        return True
    if a is UNKNOWN or b is UNKNOWN:
        return UNKNOWN
    return False


def not3(a: Any) -> Any:
    return UNKNOWN if a is UNKNOWN else (not a)


def like(value: Any, pattern: Any, escape: Any) -> Any:
    """``%`` any run, ``_`` any one character, the escape character makes the next one literal."""
    if _missing(value) or _missing(pattern) or (escape is not None and _missing(escape)):
        return UNKNOWN
    for name, v in (("value", value), ("pattern", pattern)):
        if not isinstance(v, str):
            raise FilterEvaluationError(f"LIKE needs a string {name}, not a {type_name(v)}")
    if escape is not None and (not isinstance(escape, str) or len(escape) != 1):
        raise FilterEvaluationError("the ESCAPE character must be a string of length 1")
    return like_match(value, like_tokens(pattern, escape))


#: ``%`` (any run) and ``_`` (any one character) in a tokenized LIKE pattern; anything else is a literal
ANY_RUN, ANY_ONE = object(), object()


def like_tokens(pattern: str, escape: str | None) -> list[Any]:
    """The pattern as literals and wildcards; the escape character makes the next one literal.
    Runs of ``%`` are one ``%``."""
    out: list[Any] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if escape is not None and c == escape:
            if i + 1 >= len(pattern):
                raise FilterEvaluationError("the LIKE pattern ends with its escape character")
            out.append(pattern[i + 1])
            i += 2
            continue
        token = ANY_RUN if c == "%" else ANY_ONE if c == "_" else c
        if not (token is ANY_RUN and out and out[-1] is ANY_RUN):
            out.append(token)
        i += 1
    return out


def like_match(value: str, tokens: list[Any]) -> bool:
    """Wildcard matching in O(len(value) * len(tokens)) at worst: on a mismatch go back only to
    the last ``%`` (which then takes one more character). A regular expression backtracks
    exponentially on patterns such as ``%a%a%a%b`` (a sender controls the value, and may control
    the pattern: ``user.a LIKE user.p``), which would stop the broker on one message."""
    v = t = 0
    star_t, star_v = -1, 0
    n, m = len(value), len(tokens)
    while v < n:
        if t < m and tokens[t] is not ANY_RUN and (tokens[t] is ANY_ONE or tokens[t] == value[v]):
            v += 1
            t += 1
        elif t < m and tokens[t] is ANY_RUN:
            star_t, star_v = t, v
            t += 1
        elif star_t >= 0:
            star_v += 1
            v, t = star_v, star_t + 1
        else:
            return False
    while t < m and tokens[t] is ANY_RUN:
        t += 1
    return t == m


def _deterministic_guids() -> Callable[[], str]:
    counter = itertools.count(1)
    def guid() -> str:
        h = f"{next(counter):032x}"
        return Guid(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")

    return guid


#: RULES-SQL-018: newid() is "generated by the System.Guid.NewGuid() method", a new GUID on every call: one counter
#: for every evaluation (not one per message), counted rather than random (the model draws no randomness).
_NEW_GUID = _deterministic_guids()


class Evaluator:
    """Evaluates trees against one message's properties."""

    def __init__(self, props: Properties, new_guid: Callable[[], str] | None = None) -> None:
        self.props = props
        self.new_guid = new_guid or _NEW_GUID

    def eval(self, node: tuple) -> Any:
        kind = node[0]
        if kind == "const":
            return node[1]
        if kind == "prop":
            return self.props.get(node[1], node[2])
        if kind == "cmp":
            return compare(node[1], self.eval(node[2]), self.eval(node[3]))
        if kind == "and":
            return and3(truth(self.eval(node[1]), "AND"), truth(self.eval(node[2]), "AND"))
        if kind == "or":
            return or3(truth(self.eval(node[1]), "OR"), truth(self.eval(node[2]), "OR"))
        if kind == "not":
            return not3(truth(self.eval(node[1]), "NOT"))
        if kind == "arith":
            return arithmetic(node[1], self.eval(node[2]), self.eval(node[3]))
        if kind == "neg":
            return negate(self.eval(node[1]))
        if kind == "pos":
            v = self.eval(node[1])
            if not _missing(v) and not _is_number(v) and time_name(v) != "TimeSpan":
                raise FilterEvaluationError(f"operator '+' cannot be applied to an operand of type {type_name(v)}")
            return UNKNOWN if _missing(v) else v
        if kind == "isnull":
            v = self.eval(node[1])
            isnull = v is UNKNOWN or v is None
            return (not isnull) if node[2] else isnull
        if kind == "exists":
            return self.props.exists(node[1][1], node[1][2])
        if kind == "in":
            left = self.eval(node[1])
            items = [self.eval(item) for item in node[2]]
            if _missing(left):
                return UNKNOWN
            result: Any = False
            for item in items:
                result = or3(result, compare("=", left, item))
            return not3(result) if node[3] else result
        if kind == "like":
            value, pattern = self.eval(node[1]), self.eval(node[2])
            escape = self.eval(node[3]) if node[3] is not None else None
            result = like(value, pattern, escape)
            return not3(result) if node[4] else result
        if kind == "newid":
            return self.new_guid()
        if kind == "propfn":
            name = self.eval(node[1])
            if _missing(name):
                return UNKNOWN
            if not isinstance(name, str):
                raise FilterEvaluationError(f"property() needs a string name, not a {type_name(name)}")
            scope, prop = split_property_name(name)
            return self.props.get(scope, prop)
        raise AssertionError(f"unknown node {kind!r}")

    def matches(self, expression: SqlExpression) -> bool:
        """RULES-SQL-004: selected only when the condition is TRUE (not FALSE, not UNKNOWN)."""
        return truth(self.eval(expression.tree), "a filter") is True


def split_property_name(name: str) -> tuple[str, str]:
    low = name.lower()
    if low.startswith("sys."):
        return "sys", name[4:]
    if low.startswith("user."):
        return "user", name[5:]
    return "user", name


def evaluate(expression: SqlExpression, props: Properties) -> Any:
    """The condition's value: True, False or UNKNOWN (or FilterEvaluationError)."""
    return truth(Evaluator(props).eval(expression.tree), "a filter")


def iter_props(node: Any) -> Iterator[tuple]:
    """Every property a tree names (for tests and diagnostics)."""
    if isinstance(node, tuple) and node:
        if node[0] == "prop":
            yield node
            return
        for child in node[1:] if isinstance(node[0], str) else node:
            if isinstance(child, tuple):
                yield from iter_props(child)
