"""The transfer dead-letter queue: what a send via an entity could not deliver (TXN-VIA-002, TXN-VIA-003).

"When a message can't be forwarded to its destination in auto forward or send via scenarios, the message is
placed in the transfer dead-letter queue (TDLQ) of the source entity that did the forwarding, not on the
destination entity", addressed as ``<queue path>/$Transfer/$DeadLetterQueue`` or ``<topic path>/Subscriptions/
<subscription path>/$Transfer/$DeadLetterQueue``, and "you receive from it the same way you receive from a
regular dead-letter queue" (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-dead-letter-queues).
A topic used as the transfer entity has one too (``<topic>/$Transfer/$DeadLetterQueue``: the legacy client's
TopicClient.FormatTransferDeadLetterPath). In the model only send via strands messages here; a failed
auto-forward dead-letters in the source's ordinary dead-letter queue (SETTLE-DISC-007).

The queue is a dead-letter ``MessageStore`` made when first needed and kept on its owner (the queue, topic or
subscription) as ``transfer_dead_letter``: no time to live, no dead-lettering out of it, locks as its owner's.
Its messages count toward TransferDeadLetterMessageCount, not the entity's size (reading: the pages are silent).
"""

from __future__ import annotations

from typing import Any

from .clock import NEVER
from .message import Message, State, StoredMessage, message_size
from .paths import transfer_dead_letter_path
from .store import MessageStore


class TransferDeadLetterQueue(MessageStore):
    """A dead-letter store whose sequence numbers are its own (its messages were never enqueued anywhere), whose locks
    last its owner's lock duration as it is now (a topic's description has the default, 1 minute)."""

    def __init__(self, path: str, owner: Any, next_lock_token: Any) -> None:
        self.owner = owner
        d = owner.description
        super().__init__(path, d.lock_duration, d.max_delivery_count, is_dead_letter=True, next_lock_token=next_lock_token)
        self.last_sequence_number = 0

    @property
    def lock_duration(self) -> int:  # type: ignore[override]
        return self.owner.description.lock_duration

    @lock_duration.setter
    def lock_duration(self, value: int) -> None:
        pass  # always the owner's

    def __len__(self) -> int:
        """The messages it holds (TransferDeadLetterMessageCount)."""
        return len(self.messages)

    def __bool__(self) -> bool:
        return True

    def strand(self, message: Message, now: int, reason: str, description: str) -> None:
        """A message the transfer could not deliver arrives, with why (TXN-VIA-002)."""
        self.last_sequence_number += 1
        stored = StoredMessage(message, self.last_sequence_number, now, NEVER, message_size(message), State.ACTIVE)
        stored.dead_letter_reason = reason
        stored.dead_letter_description = description
        self.tick(now)
        self.enqueue(stored)


def transfer_dead_letter_queue(owner: Any, path: str, next_lock_token: Any) -> TransferDeadLetterQueue:
    """``owner``'s transfer dead-letter queue (a queue, topic or subscription at ``path``), made on first use."""
    existing = owner.__dict__.get("transfer_dead_letter")
    if isinstance(existing, TransferDeadLetterQueue):
        return existing
    tdlq = TransferDeadLetterQueue(transfer_dead_letter_path(path), owner, next_lock_token)
    owner.transfer_dead_letter = tdlq
    return tdlq


def transfer_dead_letter_stores(entity: Any) -> list[TransferDeadLetterQueue]:
    """The transfer dead-letter queues an entity (a queue or topic) and its subscriptions have made so far: their
    locks end in time like any dead-letter queue's (what a server waits on: ``Namespace.next_due``)."""
    made = [getattr(owner, "transfer_dead_letter", None) for owner in (entity, *entity.stores)]
    return [tdlq for tdlq in made if isinstance(tdlq, TransferDeadLetterQueue)]
