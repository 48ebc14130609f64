"""Pings (PAIR-PING-*): the message, and the task that sends it while an entity is down.

"A ping message is an empty BrokeredMessage with its ContentType property set to
application/vnd.ms-servicebus-ping and a TimeToLive value of 1 second" (PAIR-PING-001).
The broker never delivers one (PAIR-PING-002: ``sbreference.entity``, ``deliver``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..clock import SECOND
from ..entity import PING_CONTENT_TYPE
from ..message import Message

PING_TIME_TO_LIVE = 1 * SECOND


def ping_session_id(n: int) -> str:
    """The SessionId of the ``n``-th ping: 32 hex digits, as ``Guid.NewGuid().ToString("N")``
    (deterministic here: the model draws nothing at random)."""
    return f"{n:032x}"


def ping_message(session_id: str | None = None) -> Message:
    """PAIR-PING-001: empty, the ping content type, 1 second to live.

    It also carries a fresh SessionId: the Microsoft.ServiceBus client's ping
    (``SendAvailabilityPairedNamespaceOptions.PingAsyncResult``, decompiled, found in a code
    index, repository not identified) sets ``SessionId = Guid.NewGuid().ToString("N")``. Without
    it a primary queue or topic requiring sessions refuses every ping (a message without a
    SessionId), and such an entity would never fail back (issue 13). The seeds do not mention it;
    it changes nothing for other entities, and the broker drops the ping either way
    (PAIR-PING-002)."""
    return Message(body=b"", content_type=PING_CONTENT_TYPE, time_to_live=PING_TIME_TO_LIVE, session_id=session_id)


def is_ping(content_type: str | None) -> bool:
    return content_type == PING_CONTENT_TYPE


@dataclass
class PingTask:
    """One entity of one factory, while it is considered unavailable (PAIR-PING-003).

    It starts when the entity fails over (PAIR-FAIL-006) and pings once every
    ``interval`` from then on: the first ping one interval after the failover. A shell
    that comes late sends one ping, not the ones it missed, and keeps the phase.
    """

    interval: int
    next_at: int

    @classmethod
    def start(cls, now: int, interval: int) -> "PingTask":
        return cls(interval, now + interval)

    def due(self, now: int) -> bool:
        return self.next_at <= now

    def sent(self, now: int) -> None:
        """A ping went out at ``now``; the next one is due one interval after the last due time."""
        while self.next_at <= now:
            self.next_at += self.interval
