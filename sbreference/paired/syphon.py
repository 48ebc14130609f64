"""The syphon: message pumps that move messages from the backlog queues to their
destinations (PAIR-SYPH-*, PAIR-COST-001).

One long-poll receive is outstanding on every backlog queue in [0, BacklogQueueCount)
(never on extra ones: PAIR-BACKLOG-004). A poll lasts 15 minutes (PAIR-SYPH-004) and ends
early only when messages arrive; then the next one starts. Each poll is one receive call,
so ten idle queues cost 40 calls an hour (PAIR-SYPH-005).

Every message received (peek-lock) goes to the entity named by its x-ms-path with its
properties translated back (PAIR-SYPH-002/003), and is completed in the backlog queue only
once that send succeeded: nothing is lost between the two. If the destination refuses it
(still unavailable), the message is left locked; when the lock expires (the backlog
queue's LockDuration, 1 minute) it comes back and is tried again, for as long as it takes:
the backlog queues' MaxDeliveryCount is int.MaxValue, so it is never dead-lettered for
that. Meanwhile the messages behind it, for other destinations, keep moving.

The seeds say nothing of a backlog message without x-ms-path (not written by a paired
sender): the model dead-letters it, so it stays visible and is not retried forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..clock import MINUTE
from ..message import Message
from .rewrite import X_MS_PATH, from_backlog

#: PAIR-SYPH-004: "The syphon performs a long poll receive that lasts 15 minutes."
LONG_POLL = 15 * MINUTE

NO_DESTINATION = "NoDestination"


@dataclass(frozen=True)
class Forward:
    """Decision: send ``message`` (restored) to ``destination`` in the primary namespace,
    then complete the backlog copy ``handle`` (whatever the shell uses to settle it)."""

    backlog_index: int
    destination: str
    message: Message
    handle: Any = None


@dataclass(frozen=True)
class DeadLetter:
    """Decision: dead-letter the backlog copy ``handle``: it names no destination."""

    backlog_index: int
    reason: str
    description: str
    handle: Any = None


class Syphon:
    """The syphon of one process, over backlog queues 0 .. count-1."""

    def __init__(self, count: int, now: int) -> None:
        self.count = count
        self.poll_started: dict[int, int] = {}
        self.receive_calls = 0
        self.poll_log: list[tuple[int, int]] = []  # (start time, queue) of every receive call
        self.retry_at: dict[int, int] = {}  # queue -> when a message it holds locked comes back
        for index in range(count):
            self._poll(index, now)

    def _poll(self, index: int, at: int) -> None:
        self.poll_started[index] = at
        self.receive_calls += 1
        self.poll_log.append((at, index))

    # --------------------------------------------------------------- time

    def next_due(self) -> int | None:
        times = [start + LONG_POLL for start in self.poll_started.values()]
        times.extend(self.retry_at.values())
        return min(times) if times else None

    def tick(self, now: int) -> None:
        """Polls that ran their 15 minutes end empty and the next begins at once."""
        for index, start in self.poll_started.items():
            while start + LONG_POLL <= now:
                start += LONG_POLL
                self._poll(index, start)
        for index in [i for i, at in self.retry_at.items() if at <= now]:
            del self.retry_at[index]

    # ----------------------------------------------------------- messages

    def received(self, index: int, messages: list[tuple[Message, Any]], now: int) -> list[Forward | DeadLetter]:
        """The poll on queue ``index`` returned ``messages`` (each with the shell's handle):
        that poll ends and the next starts now. Returns what to do with each."""
        if not messages:
            return []
        self._poll(index, now)
        # the queue was looked at now: a retry still pending for it is spent (a lock that ended
        # earlier than the client computed brought its message back before the retry instant;
        # keeping the stale instant would hide the next failure's retry behind it)
        self.retry_at.pop(index, None)
        out: list[Forward | DeadLetter] = []
        for message, handle in messages:
            try:
                destination, restored = from_backlog(message)
            except ValueError:
                out.append(DeadLetter(index, NO_DESTINATION, f"The message has no {X_MS_PATH} property.", handle))
                continue
            out.append(Forward(index, destination, restored, handle))
        return out

    def forward_failed(self, index: int, locked_until: int | None) -> None:
        """The destination refused it: the message stays locked in the backlog queue and
        comes back when the lock expires; look at that queue again then."""
        if locked_until is not None:
            current = self.retry_at.get(index)
            self.retry_at[index] = locked_until if current is None else min(current, locked_until)


def idle_receive_calls(count: int, duration: int) -> int:
    """PAIR-SYPH-005: the receive calls a syphon over ``count`` empty backlog queues
    starts in ``duration`` milliseconds, found by running the machine."""
    syphon = Syphon(count, 0)
    while True:
        due = syphon.next_due()
        if due is None or due >= duration:
            return syphon.receive_calls
        syphon.tick(due)
