"""Partitions: how sequence numbers and keys name a partition, and N stores behind one.

A partitioned entity is several partitions, each with its own store (PART-STRUCT-001).
``PartitionedStore`` puts the partition stores behind the interface of a single
``MessageStore``, so the namespace serves a partitioned queue exactly as a plain one
(PART-RECV-003). The sending side (choosing a partition, numbering, duplicate detection
per partition) is ``partitioning.PartitionedEntity``; the open choices and their
defaults are described there.

Sequence numbers carry the partition in their top 16 bits, as on Azure: ``partition <<
48 | n``, with ``n`` counting per partition (PART-SEQ-001).
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from .errors import ErrorCode, ServiceBusError
from .message import Delivery, Message, State, StoredMessage
from .store import MessageStore

if TYPE_CHECKING:
    from .partitioning import PartitionedEntity

#: Basic and Standard namespaces always create 16 partitions (PART-STRUCT-002).
STANDARD_PARTITION_COUNT = 16
#: Premium partition counts documented as allowed (PART-STRUCT-003).
PREMIUM_PARTITION_COUNTS = (1, 2, 4)
#: At most this many partitioned queues and topics per Basic/Standard namespace (PART-LIMIT-002).
MAX_PARTITIONED_ENTITIES = 100

SEQUENCE_BITS = 48
_LOW = (1 << SEQUENCE_BITS) - 1
#: Lock tokens of partition stores carry their partition: ``token % TOKEN_STRIDE``.
TOKEN_STRIDE = 64

Chooser = Callable[[list[int]], int]


# ----------------------------------------------------------- pure functions


def sequence_number(partition: int, n: int) -> int:
    return (partition << SEQUENCE_BITS) | n


def partition_of(sequence: int) -> int:
    return sequence >> SEQUENCE_BITS


def partition_key(message: Message, duplicate_detection: bool) -> str | None:
    """The key that pins a message to a partition, or ``None`` (PART-KEY-001..005).

    SessionId first; else PartitionKey; else MessageId, but only with duplicate
    detection. A PartitionKey that differs from the SessionId is refused.
    """
    if message.session_id is not None:
        if message.partition_key is not None and message.partition_key != message.session_id:
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION,
                f"The PartitionKey '{message.partition_key}' of the message is different from its "
                f"SessionId '{message.session_id}'; they must be identical.",
            )
        return message.session_id
    if message.partition_key is not None:
        return message.partition_key
    if duplicate_detection:
        return message.message_id
    return None


def key_hash(key: str, partitions: int) -> int:
    """The reference's own key -> partition function (stable across runs and machines)."""
    return zlib.crc32(key.encode("utf-8")) % partitions


# --------------------------------------------------------------- the stores


class PartitionedStore:
    """N partition stores behind the interface of one ``MessageStore``.

    Used for a partitioned queue, a subscription of a partitioned topic, and their
    dead-letter queues. Every operation finds the partition it concerns (by lock token,
    by sequence number, by session) or, for a receive, asks every available partition.
    """

    def __init__(self, owner: "PartitionedEntity", partitions: list[MessageStore], is_dead_letter: bool = False) -> None:
        self.owner = owner
        self.partitions = partitions
        self.is_dead_letter = is_dead_letter
        self.path = partitions[0].path
        self.requires_session = partitions[0].requires_session
        self.dead_letter_queue: PartitionedStore | None = None
        self.parent: PartitionedStore | None = None
        self.turn = 0  # the partition that answers the next receive first, by default
        n = len(partitions)
        #: From each partition whose turn it is, the partitions in the order they are asked.
        self.turn_order = [tuple((turn + step) % n for step in range(n)) for turn in range(n)]
        self.next_turn = [(index + 1) % n for index in range(n)]  # whose turn it is after index answered
        if not is_dead_letter:
            self.dead_letter_queue = PartitionedStore(owner, [p.dead_letter_queue for p in partitions], True)
            self.dead_letter_queue.parent = self

    # -- finding the partition
    def _up(self, index: int) -> MessageStore:
        self.owner.require_available(index)
        return self.partitions[index]

    def _by_token(self, lock_token: int) -> MessageStore:
        index = lock_token % TOKEN_STRIDE
        partitions = self.partitions
        if index >= len(partitions):
            return partitions[0]  # not a token of ours: any partition answers "lock lost"
        if not self.owner.available[index]:
            self.owner.require_available(index)  # raises
        return partitions[index]

    def _by_session(self, session_id: str) -> MessageStore:
        return self._up(self.owner.partition_for_key(session_id))

    def available_partitions(self) -> list[int]:
        return [i for i in range(len(self.partitions)) if self.owner.available[i]]

    # -- time
    def tick(self, now: int) -> None:
        for store in self.partitions:
            store.tick(now)

    def next_due(self) -> int | None:
        times = [t for t in (s.next_due() for s in self.partitions) if t is not None]
        return min(times) if times else None

    # -- receive
    def allowed_heads(self, now: int) -> list[int]:
        """Partitions whose head a receive may return now (PART-RECV-001), oldest head first."""
        heads = []
        for index in self.available_partitions():
            head = self.partitions[index].available_head(now)
            if head is not None:
                heads.append((head.enqueued_time, index))
        return [index for _, index in sorted(heads)]

    def receive(
        self,
        now: int,
        holder: int,
        max_count: int,
        mode: str,
        session_id: str | None = None,
        choose: Chooser | None = None,
    ) -> list[Delivery]:
        """Each message comes from the head of some available partition (PART-RECV-001);
        the others stay where they are for later receives (PART-RECV-002).

        ``choose`` picks the partition; without it, the reference's own answer: for each
        message, the first available partition with a message ready answers, starting from
        the one whose turn it is (the partitions take turns)."""
        if session_id is not None or self.requires_session:
            if session_id is None:
                return self.partitions[0].receive(now, holder, max_count, mode, None)  # the usual error
            return self._by_session(session_id).receive(now, holder, max_count, mode, session_id)
        if choose is not None:
            return self._receive_chosen(now, holder, max_count, mode, choose)
        partitions = self.partitions
        available = self.owner.available
        if max_count == 1:  # the usual receive: the partition whose turn it is has a message ready, and answers
            index = self.turn
            store = partitions[index]
            if available[index] and now < store._due and store.lane.available:
                self.turn = self.next_turn[index]
                return store.receive(now, holder, 1, mode)
        out: list[Delivery] = []
        while len(out) < max_count:
            for index in self.turn_order[self.turn]:
                store = partitions[index]
                if not available[index]:
                    continue
                if now >= store._due:
                    store.tick(now)
                if store.lane.available:
                    got = store.receive(now, holder, 1, mode)
                    if got:
                        self.turn = self.next_turn[index]
                        if max_count == 1:
                            return got  # one message asked: the partition's answer is the answer
                        out.append(got[0])
                        break
            else:
                break  # no partition has a message ready
        return out

    def _receive_chosen(self, now: int, holder: int, max_count: int, mode: str, choose: Chooser) -> list[Delivery]:
        out: list[Delivery] = []
        while len(out) < max_count:
            allowed = self.allowed_heads(now)
            if not allowed:
                break
            index = choose(allowed)
            if index not in allowed:
                raise ValueError(f"choose() picked partition {index}, not among the allowed {allowed}")
            out.extend(self.partitions[index].receive(now, holder, 1, mode))
            self.turn = self.next_turn[index]
        return out

    # -- settlement
    def complete(self, now: int, holder: int, lock_token: int) -> None:
        index = lock_token % TOKEN_STRIDE
        if index < len(self.partitions) and self.owner.available[index]:
            self.partitions[index].complete(now, holder, lock_token)  # _by_token's usual answer
        else:
            self._by_token(lock_token).complete(now, holder, lock_token)

    def abandon(self, now: int, holder: int, lock_token: int, properties: dict | None = None) -> None:
        self._by_token(lock_token).abandon(now, holder, lock_token, properties)

    def release(self, now: int, holder: int, lock_token: int) -> None:
        self._by_token(lock_token).release(now, holder, lock_token)

    def defer(self, now: int, holder: int, lock_token: int, properties: dict | None = None) -> None:
        self._by_token(lock_token).defer(now, holder, lock_token, properties)

    def dead_letter(self, now: int, holder: int, lock_token: int, reason: str | None = None, description: str | None = None,
                    properties: dict | None = None) -> None:
        self._by_token(lock_token).dead_letter(now, holder, lock_token, reason, description, properties)

    def renew_lock(self, now: int, holder: int, lock_token: int) -> int:
        return self._by_token(lock_token).renew_lock(now, holder, lock_token)

    def receive_deferred(
        self, now: int, holder: int, sequence_numbers: Iterable[int], mode: str, session_id: str | None = None
    ) -> list[Delivery]:
        wanted = list(sequence_numbers)
        by_partition: dict[int, list[int]] = {}
        for seq in wanted:
            index = partition_of(seq)
            if index >= len(self.partitions):
                raise ServiceBusError(ErrorCode.MESSAGE_NOT_FOUND, f"No deferred message with sequence number {seq}.")
            self.owner.require_available(index)
            by_partition.setdefault(index, []).append(seq)
        for index, seqs in by_partition.items():  # all or none: check before taking any
            for seq in seqs:
                msg = self.partitions[index].messages.get(seq)
                if msg is None or msg.state is not State.DEFERRED:
                    raise ServiceBusError(ErrorCode.MESSAGE_NOT_FOUND, f"No deferred message with sequence number {seq}.")
        found: dict[int, Delivery] = {}
        for index, seqs in by_partition.items():
            for d in self.partitions[index].receive_deferred(now, holder, seqs, mode, session_id):
                found[d.sequence_number] = d
        return [found[seq] for seq in wanted]

    # -- peek
    def allowed_peek_partitions(self, now: int, from_sequence_number: int, session_id: str | None = None) -> list[int]:
        """Partitions a peek from this number may read (PART-PEEK-002): those at or after
        the number's own partition that hold a message at or after it."""
        first = partition_of(max(from_sequence_number, 0))
        out = []
        for index in self.available_partitions():
            if index < first:
                continue
            store = self.partitions[index]
            store.tick(now)
            if any(seq >= from_sequence_number and (session_id is None or m.session_id == session_id)
                   for seq, m in store.messages.items()):
                out.append(index)
        return out

    def peek(
        self,
        now: int,
        from_sequence_number: int,
        max_count: int,
        session_id: str | None = None,
        choose: Chooser | None = None,
        scheduled: Sequence[Delivery] = (),
    ) -> list[Delivery]:
        """One partition's messages from ``from_sequence_number`` on: possibly fewer than
        asked even though other partitions hold more (PART-PEEK-003)."""
        if session_id is not None:
            index = self.owner.partition_for_key(session_id)
            self.owner.require_available(index)
            allowed = [index]
        else:
            allowed = self.allowed_peek_partitions(now, from_sequence_number)
            for d in scheduled:
                index = partition_of(d.sequence_number)
                if d.sequence_number >= from_sequence_number and index not in allowed and self.owner.available[index]:
                    allowed.append(index)
            allowed.sort()
        if not allowed:
            return []
        index = choose(allowed) if choose is not None else allowed[0]
        found = self.partitions[index].peek(now, from_sequence_number, max_count, session_id)
        extra = [d for d in scheduled if partition_of(d.sequence_number) == index and d.sequence_number >= from_sequence_number]
        if extra:
            found = sorted(found + extra, key=lambda d: d.sequence_number)[:max_count]
        return found

    # -- sessions
    def accept_session(self, now: int, holder: int, session_id: str):
        return self._by_session(session_id).accept_session(now, holder, session_id)

    def available_sessions(self, now: int) -> list[str]:
        ready = []
        for index in self.available_partitions():
            store = self.partitions[index]
            for sid in store.available_sessions(now):
                head = store.sessions[sid].head()
                ready.append((head.enqueued_time, head.sequence_number, sid))
        return [sid for *_, sid in sorted(ready)]

    def renew_session_lock(self, now: int, holder: int, session_id: str) -> int:
        return self._by_session(session_id).renew_session_lock(now, holder, session_id)

    def release_session(self, now: int, holder: int, session_id: str) -> None:
        self._by_session(session_id).release_session(now, holder, session_id)

    def get_session_state(self, now: int, holder: int, session_id: str) -> bytes | None:
        return self._by_session(session_id).get_session_state(now, holder, session_id)

    def set_session_state(self, now: int, holder: int, session_id: str, state: bytes | None, limit: int | None = None) -> None:
        self._by_session(session_id).set_session_state(now, holder, session_id, state, limit)

    def state_count(self) -> int:
        """SETTLE-SESS-011: the sessions holding a state, over the partitions."""
        return sum(store.state_count() for store in self.partitions)

    # -- connections, counts
    def drop_holder(self, now: int, holder: int) -> None:
        for store in self.partitions:
            store.drop_holder(now, holder)

    def counts(self) -> dict[str, int]:
        """Summed over the partitions that answer (PART-MGMT-003)."""
        total = {"active": 0, "deferred": 0, "dead_letter": 0}
        for index in self.available_partitions():
            for key, value in self.partitions[index].counts().items():
                total[key] += value
        return total

    @property
    def messages(self) -> dict[int, StoredMessage]:
        """Every live message of every partition (for inspection; not a hot path)."""
        out: dict[int, StoredMessage] = {}
        for store in self.partitions:
            out.update(store.messages)
        return out

    @property
    def locks(self) -> dict[int, StoredMessage]:
        out: dict[int, StoredMessage] = {}
        for store in self.partitions:
            out.update(store.locks)
        return out
