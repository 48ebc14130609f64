"""The virtual clock.

Time is a whole number of milliseconds since the namespace started. Nothing in the
model reads the wall clock: time moves only when a caller advances it, so every run
is repeatable and a lock that expires "after 60 seconds" expires at exactly 60_000.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

MILLISECOND = 1
SECOND = 1000 * MILLISECOND
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR

#: .NET ``TimeSpan.MaxValue`` (10675199.02:48:05.4775807) in whole milliseconds.
#: The seeds use it for "never" (backlog queue TTL and auto-delete-on-idle).
TIMESPAN_MAX = 922_337_203_685_477

#: An instant that never comes: the expiry of a message whose time to live is
#: ``TIMESPAN_MAX`` (.NET shows ``DateTime.MaxValue``), and "nothing is due".
NEVER = 1 << 62

#: .NET ``int.MaxValue``, the backlog queues' max delivery count.
INT_MAX = 2**31 - 1


@runtime_checkable
class Clock(Protocol):
    """What the model reads time from: ``now`` in whole milliseconds, never going back.

    ``VirtualClock`` is the model's own; a server on real time passes a wall clock
    (``sbconform.server.server.WallClock``: milliseconds since it started), whose
    ``advance`` and ``advance_to`` leave time to the wall and return ``now``."""

    @property
    def now(self) -> int: ...

    def advance(self, duration: int) -> int: ...

    def advance_to(self, instant: int) -> int: ...


class VirtualClock:
    """A monotonic clock that only moves when told to."""

    __slots__ = ("now",)

    def __init__(self, start: int = 0) -> None:
        self.now = start

    def advance(self, duration: int) -> int:
        """Let ``duration`` milliseconds pass; returns the new time."""
        if duration < 0:
            raise ValueError(f"time cannot go backwards (advance by {duration} ms)")
        self.now += duration
        return self.now

    def advance_to(self, instant: int) -> int:
        """Let time pass until ``instant`` (no-op if it is already past)."""
        if instant > self.now:
            self.now = instant
        return self.now

    def __repr__(self) -> str:
        return f"VirtualClock(now={self.now})"


def seconds(value: float) -> int:
    """Convert seconds (as people and SDKs write them) to model milliseconds."""
    return round(value * SECOND)
