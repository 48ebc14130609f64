"""Close/fault coordination of the paired factories (PAIR-CLOSE-001/002).

"Within an application that hosts the syphon, once the primary or secondary
MessagingFactory faults or is closed without its partner also being faulted/closed and
the syphon detects this state, the syphon acts. If the other MessagingFactory is not
closed within 5 seconds, the syphon will fault the still open MessagingFactory."

The model's syphon detects the state at once. The partner is faulted at exactly 5 seconds
unless it closed (or faulted) before; in a process without the syphon nothing happens.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..clock import SECOND
from ..errors import ErrorCode, ServiceBusError
from .options import PRIMARY, SECONDARY

OPEN, CLOSED, FAULTED = "open", "closed", "faulted"
CLOSE_GRACE = 5 * SECOND


@dataclass(frozen=True)
class FaultFactory:
    """Decision: fault the factory ``which`` (PRIMARY or SECONDARY)."""

    which: str


def partner(which: str) -> str:
    if which not in (PRIMARY, SECONDARY):
        raise ValueError(f"a factory of the pair is {PRIMARY!r} or {SECONDARY!r}, not {which!r}")
    return SECONDARY if which == PRIMARY else PRIMARY


class FactoryPair:
    """The states of the primary and secondary MessagingFactory of one pairing."""

    def __init__(self, hosts_syphon: bool) -> None:
        self.hosts_syphon = hosts_syphon
        self.state = {PRIMARY: OPEN, SECONDARY: OPEN}
        self.deadline: int | None = None  # when the still-open partner gets faulted

    def is_open(self, which: str) -> bool:
        return self.state[which] == OPEN

    def require_open(self, which: str) -> None:
        if not self.is_open(which):
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION, f"The {which} MessagingFactory is {self.state[which]}.", transient=False
            )

    def closed(self, which: str, now: int) -> None:
        self._ended(which, CLOSED, now)

    def faulted(self, which: str, now: int) -> None:
        self._ended(which, FAULTED, now)

    def _ended(self, which: str, how: str, now: int) -> None:
        other = partner(which)
        if self.state[which] != OPEN:
            return  # already closed or faulted: nothing changes
        self.state[which] = how
        if self.state[other] != OPEN:
            self.deadline = None  # both ended (the partner closed in time, or had ended already)
        elif self.hosts_syphon:
            self.deadline = now + CLOSE_GRACE  # PAIR-CLOSE-001: the syphon acts

    def next_due(self) -> int | None:
        return self.deadline

    def tick(self, now: int) -> list[FaultFactory]:
        """PAIR-CLOSE-002: at 5 seconds, fault the partner still open."""
        if self.deadline is None or now < self.deadline:
            return []
        self.deadline = None
        still_open = [w for w in (PRIMARY, SECONDARY) if self.state[w] == OPEN]
        for which in still_open:
            self.state[which] = FAULTED
        return [FaultFactory(w) for w in still_open]
