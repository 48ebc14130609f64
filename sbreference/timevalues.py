"""Dates and durations as rules see them (RULES-CORR-004, RULES-SQL-016), and newid()'s GUIDs (RULES-SQL-018).

Service Bus evaluates filters and actions over .NET values: a date is a DateTime, a duration a TimeSpan,
and "operators follow the same semantics as the C# operator binding"
(https://learn.microsoft.com/azure/service-bus-messaging/service-bus-messaging-sql-filter). The model reads
no clock, so it does not use the ``datetime`` module (tests/test_reference_purity.py): a DateTime is an
``Instant`` (.NET ticks, 100 ns, since 1970-01-01T00:00:00Z), a TimeSpan a ``Span`` (ticks: a TimeSpan's own
resolution, as Service Bus's AMQP encoding com.microsoft:timespan carries it; ``us`` reads them in microseconds). The values
clients give (Python's ``datetime`` and ``timedelta``, as the SDKs and serve's AMQP codec hand them over)
are read by their fields (``as_time``) and compared by instant; a date without an offset is UTC (AMQP
timestamps are UTC). C#'s bindings: two dates or two durations compare with all six operators; date -
date is a duration; date +/- duration a date; duration +/- duration a duration, and negates.
"""

from __future__ import annotations

import calendar
from typing import Any, Callable

#: DateTime's range (0001-01-01 to 9999-12-31T23:59:59.9999999), in ticks (100 ns) and in microseconds from 1970;
#: TimeSpan's, in ticks (Int64).
MIN_TICKS = -621_355_968_000_000_000
MAX_TICKS = 2_534_023_007_999_999_999
MIN_US, MAX_US = MIN_TICKS // 10, MAX_TICKS // 10
SPAN_TICKS = 2**63


class _Ticks:
    """What a DateTime and a TimeSpan share: a count of ticks (100 ns) within the type's range, made from
    microseconds or ``ticks`` (outside it: OverflowError, as C#'s), equal only to the same type's same count."""

    __slots__ = ("ticks",)
    LOWEST: int
    HIGHEST: int
    OUTSIDE: str

    def __init__(self, us: int = 0, *, ticks: int | None = None) -> None:
        ticks = us * 10 if ticks is None else ticks
        if not self.LOWEST <= ticks <= self.HIGHEST:
            raise OverflowError(self.OUTSIDE)
        self.ticks = ticks

    @property
    def us(self) -> int:
        return self.ticks // 10

    def __eq__(self, other: Any) -> bool:
        o = as_time(other)
        return type(o) is type(self) and o.ticks == self.ticks

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.ticks))


class Instant(_Ticks):
    """A DateTime: ticks since 1970-01-01T00:00:00Z."""

    __slots__ = ()
    LOWEST, HIGHEST, OUTSIDE = MIN_TICKS, MAX_TICKS, "a date outside DateTime's range"

    def timestamp(self) -> float:
        return self.ticks / 10_000_000

    def isoformat(self) -> str:
        seconds, fraction = divmod(self.ticks, 10_000_000)
        return _iso(seconds) + (f".{fraction:07d}".rstrip("0") if fraction else "") + "Z"

    def __repr__(self) -> str:
        return f"Instant({self.isoformat()})"


class Span(_Ticks):
    """A TimeSpan: ticks, an Int64."""

    __slots__ = ()
    LOWEST, HIGHEST, OUTSIDE = -SPAN_TICKS, SPAN_TICKS - 1, "a duration outside TimeSpan's range"

    def total_seconds(self) -> float:
        return self.ticks / 10_000_000

    def __repr__(self) -> str:
        return f"Span({self.ticks} ticks)"


def _iso(seconds: int) -> str:
    days, rest = divmod(seconds, 86_400)
    y, m, d = _civil(days)
    return f"{y:04d}-{m:02d}-{d:02d}T{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}"


def _civil(days: int) -> tuple[int, int, int]:
    """The proleptic Gregorian date ``days`` after 1970-01-01 (Howard Hinnant's civil_from_days)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (m <= 2), m, d


def as_time(v: Any) -> Instant | Span | None:
    """``v`` as an Instant or a Span if it is a date or a duration (ours, or a ``datetime``/``timedelta``
    read by its fields: an aware date by its UTC instant, a naive one as UTC), else None."""
    if type(v) in (str, int, float, bool) or v is None:
        return None
    if isinstance(v, (Instant, Span)):
        return v
    if hasattr(v, "utctimetuple") and hasattr(v, "microsecond"):  # a datetime (not a bare date: no utctimetuple)
        return Instant(calendar.timegm(v.utctimetuple()) * 1_000_000 + v.microsecond)
    if hasattr(v, "total_seconds") and hasattr(v, "days") and hasattr(v, "microseconds"):  # a timedelta
        span = Span.__new__(Span)  # (unchecked: a timedelta may exceed TimeSpan; its readers refuse one that does)
        span.ticks = ((v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds) * 10
        return span
    return None


class Guid(str):
    """A System.Guid, as newid() makes one (RULES-SQL-018): its text ("D" format) is what C# concatenates; compared
    with a string it binds no operator (the evaluator compares values of one type only)."""

    __slots__ = ()


def as_guid(v: Any) -> Guid | None:
    """``v`` as a Guid if it is one: newid()'s, or a uuid.UUID (an AMQP uuid as clients and serve read one: the
    same System.Guid to Service Bus; recognised by its fields, the model imports no uuid), else None."""
    if isinstance(v, Guid):
        return v
    if type(v).__name__ == "UUID" and hasattr(v, "int") and hasattr(v, "hex"):
        return Guid(str(v))
    return None


class Uri(str):
    """A System.Uri (a message property Service Bus's AMQP encoding marks as com.microsoft:uri): its AbsoluteUri. As a
    GUID, compared with a string it binds no operator (C# has no == between Uri and string)."""

    __slots__ = ()


#: How a date, duration or GUID an action computed leaves the model (RULES-SQL-016: SET user.at = sys.EnqueuedTimeUtc):
#: a converter the host installs (sbconform's server installs one to datetime and to com.microsoft:timespan),
#: else the model's own Instant and Span. A conversion of types, the same for every namespace in a process.
_outward: Callable[[Instant | Span | Guid | Uri], Any] | None = None


def install_outward(convert: Callable[[Instant | Span | Guid | Uri], Any] | None) -> None:
    global _outward
    _outward = convert


def outward(v: Any) -> Any:
    """``v`` as it is stored on a message: a date, duration or GUID converted by the host's converter, if any."""
    if _outward is None or type(v) in (str, int, float, bool) or v is None:
        return v
    if isinstance(v, (Guid, Uri)):
        return _outward(v)
    t = as_time(v)
    return v if t is None else _outward(t)


def is_time(v: Any) -> bool:
    return as_time(v) is not None


def time_name(v: Any) -> str | None:
    t = as_time(v)
    return None if t is None else "DateTime" if type(t) is Instant else "TimeSpan"


_ORDER = {"=": lambda a, b: a == b, "<>": lambda a, b: a != b, ">": lambda a, b: a > b,
          ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}


def compare_times(op: str, a: Any, b: Any) -> bool | None:
    """The comparison if ``a`` and ``b`` are both dates or both durations, else None (no binding)."""
    ta, tb = as_time(a), as_time(b)
    if ta is None or tb is None or type(ta) is not type(tb):
        return None
    return _ORDER[op](ta.ticks, tb.ticks)


def time_arithmetic(op: str, a: Any, b: Any) -> Instant | Span | None:
    """C#'s DateTime and TimeSpan ``+`` and ``-``; None where nothing binds. OverflowError past DateTime's range."""
    ta, tb = as_time(a), as_time(b)
    if ta is None or tb is None or op not in "+-":
        return None
    sign = 1 if op == "+" else -1
    if type(ta) is Instant and type(tb) is Instant:
        return Span(ticks=ta.ticks - tb.ticks) if op == "-" else None
    if type(ta) is Instant:
        return Instant(ticks=ta.ticks + sign * tb.ticks)
    if type(tb) is Span:
        return Span(ticks=ta.ticks + sign * tb.ticks)
    return None


def negate_time(a: Any) -> Span | None:
    t = as_time(a)
    return Span(ticks=-t.ticks) if type(t) is Span else None


def same_time(expected: Any, actual: Any) -> bool | None:
    """Correlation equality of dates and durations (RULES-CORR-004): None if ``expected`` is neither."""
    te = as_time(expected)
    if te is None:
        return None
    ta = as_time(actual)
    return ta is not None and type(ta) is type(te) and ta.ticks == te.ticks
