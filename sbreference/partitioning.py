"""Partitioned queues and topics (seed 003, clauses PART-*).

A partitioned entity is several partitions, each with its own store and its own broker
(PART-STRUCT-001): here, each partition is an ordinary ``MessageStore`` (the settlement
state machine, reused as is) plus its own sequence counter and duplicate detection.
This module is the sending side; ``partitions.PartitionedStore`` puts the partitions
behind the interface of a single store, so the namespace serves a partitioned queue
exactly as a plain one (PART-RECV-003).

Where Service Bus leaves the choice open, the model says what is allowed and takes a
``choose`` argument; the defaults are the reference's own deterministic policy:

- which partition an unkeyed message goes to: any available one (PART-DISC-001);
  by default round-robin, skipping unavailable partitions (PART-NOKEY-001/002);
- which partition a key maps to: a fixed function of the key that the broker picks
  (PART-KEY-006); the model uses CRC-32 of the key, and once a key has a partition it
  keeps it;
- which partition answers a receive first: the head of any available partition
  (PART-RECV-001); by default the partitions take turns (round-robin);
- which partition a peek reads: any partition at or after the one the requested
  sequence number belongs to (PART-PEEK-002); by default the first such.

Sequence numbers carry the partition in their top 16 bits, as on Azure: ``partition <<
48 | n``, with ``n`` counting per partition (PART-SEQ-001).
"""


from __future__ import annotations

import heapq
from typing import Callable

from .clock import NEVER, TIMESPAN_MAX
from .dedup import DuplicateDetection
from .entity import LARGE_MESSAGE, PING_CONTENT_TYPE, Entity, EntityDescription, FanOut, counted, effective_time_to_live, expiry
from .errors import ErrorCode, ServiceBusError
from .message import ACTIVE, Message, State, StoredMessage
# Numbering, keys and the partitioned store, re-exported: callers import them from here.
from .partitions import (
    MAX_PARTITIONED_ENTITIES,
    PREMIUM_PARTITION_COUNTS,
    SEQUENCE_BITS,
    STANDARD_PARTITION_COUNT,
    TOKEN_STRIDE,
    Chooser,
    PartitionedStore,
    key_hash,
    partition_key,
    partition_of,
    sequence_number,
)
from .rules import RuleSet


# -------------------------------------------------------------- the entities


class PartitionedEntity(Entity):
    """The sending side of a partitioned queue or topic."""

    partitioned = True

    def __init__(
        self,
        path: str,
        description: EntityDescription,
        next_lock_token: Callable[[], int],
        partition_count: int,
        partition_tokens: list[Callable[[], int]] | None = None,
    ) -> None:
        super().__init__(path, description, next_lock_token)
        self.partition_tokens = partition_tokens
        self.duplicates = None  # duplicate detection lives in each partition (PART-DUP-001)
        self.partition_count = partition_count
        self.available = [True] * partition_count
        self.counters = [0] * partition_count
        #: Each partition's sequence number 0 (``sequence_number(i, 0)``), and the partition after each: the usual
        #: send adds and looks up (Python 3.11 runs << | and % on ints through their generic paths).
        self.sequence_base = [sequence_number(i, 0) for i in range(partition_count)]
        self.next_partition = [(i + 1) % partition_count for i in range(partition_count)]
        self.partition_duplicates = [
            DuplicateDetection(description.duplicate_detection_history_time_window)
            if description.requires_duplicate_detection else None
            for _ in range(partition_count)
        ]
        self.rotation = 0  # where round-robin continues (PART-NOKEY-001)
        self.pinned: dict[str, int] = {}  # key -> its partition, once chosen (PART-KEY-006)

    def tokens_for(self, index: int) -> Callable[[], int]:
        """Lock tokens for partition ``index``: unique, and telling their partition (``token % TOKEN_STRIDE``).
        The namespace's counter of that partition index when it gives them (no Python call per token),
        else drawn from the shared counter."""
        if self.partition_tokens is not None:
            return self.partition_tokens[index]
        shared = self.next_lock_token
        return lambda: shared() * TOKEN_STRIDE + index

    # -- availability (fault injection: PART-AVAIL-*, PART-MGMT-002/004)
    def set_partition_available(self, index: int, available: bool) -> None:
        if not 0 <= index < self.partition_count:
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"'{self.path}' has no partition {index} (it has {self.partition_count})")
        self.available[index] = available

    def require_available(self, index: int) -> None:
        if not self.available[index]:
            raise ServiceBusError(
                ErrorCode.ENTITY_UNAVAILABLE,
                f"Partition {index} of '{self.path}' is temporarily unavailable.",
                transient=True,
            )

    def require_all_available(self, operation: str) -> None:
        down = [i for i, up in enumerate(self.available) if not up]
        if down:
            raise ServiceBusError(
                ErrorCode.ENTITY_UNAVAILABLE,
                f"Cannot {operation} '{self.path}': partition(s) {down} are unavailable, and the operation must reach every partition.",
                transient=True,
            )

    @property
    def availability_status(self) -> str:
        return "available" if all(self.available) else "limited"

    # -- choosing a partition
    def partition_for_key(self, key: str) -> int:
        """A key's partition: the one it was pinned to, or the reference's hash."""
        index = self.pinned.get(key)
        return index if index is not None else key_hash(key, self.partition_count)

    def allowed_partitions(self, key: str | None) -> list[int]:
        """Where a message with this key may go now (in the default's order).

        Keyed: the partition the key is pinned to, and an error if that partition is
        down (PART-KEY-008). A key seen for the first time may go to any partition (the
        broker's key function is its own: PART-KEY-006), the reference's hash first; the
        reference refuses it when its hash names a partition that is down.
        Unkeyed: every available partition, in round-robin order from where the last
        unkeyed message went (PART-NOKEY-001/002); an error only if all are down.
        """
        if key is not None:
            index = self.pinned.get(key)
            if index is not None:
                self.require_available(index)
                return [index]
            own = key_hash(key, self.partition_count)
            self.require_available(own)
            return [own] + [i for i in range(self.partition_count) if i != own and self.available[i]]
        n = self.partition_count
        allowed = [(self.rotation + i) % n for i in range(n) if self.available[(self.rotation + i) % n]]
        if not allowed:
            raise ServiceBusError(ErrorCode.ENTITY_UNAVAILABLE, f"No partition of '{self.path}' is available.", transient=True)
        return allowed

    def _choose(self, key: str | None, choose: Chooser | None) -> int:
        if choose is None:
            index = self._default_partition(key)
        else:
            allowed = self.allowed_partitions(key)
            index = choose(allowed)
            if index not in allowed:
                raise ValueError(f"choose() picked partition {index}, not among the allowed {allowed}")
        if key is None:
            self.rotation = (index + 1) % self.partition_count
        else:
            self.pinned.setdefault(key, index)
        return index

    def _default_partition(self, key: str | None) -> int:
        """The reference's own choice: the first of ``allowed_partitions(key)``,
        found without listing them."""
        available = self.available
        if key is None:
            n = self.partition_count
            for step in range(n):
                index = (self.rotation + step) % n
                if available[index]:
                    return index
            return self.allowed_partitions(None)[0]  # none available: the error
        index = self.pinned.get(key)
        if index is None:
            index = key_hash(key, self.partition_count)
        self.require_available(index)
        return index

    # -- sending
    def accept(self, messages: list[Message], now: int, choose: Chooser | None = None) -> list[int | None]:
        """A batch is one transfer and goes to one partition: its messages must share a
        partition key (or all have none)."""
        if len(messages) == 1:
            return [self.accept_one(messages[0], now, choose)]
        if self.schedule_order:
            self.tick(now)
        detection = self.description.requires_duplicate_detection
        sizes = self.check(messages, now)
        keys = {partition_key(m, detection) for m in messages}
        if len(keys) > 1:
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION,
                "All messages of a batch sent to a partitioned entity must have the same partition key.",
            )
        return self._accept_in(self._choose(keys.pop(), choose), messages, sizes, now)

    def accept_one(self, message: Message, now: int, choose: Chooser | None = None) -> int | None:
        """``accept`` for one message: its sequence number (``None``: a duplicate)."""
        if self.schedule_order:
            self.tick(now)
        detection = self.description.requires_duplicate_detection
        size = self.check_one(message, now)
        if message.session_id is None and message.partition_key is None and not detection:
            if choose is None and message.scheduled_enqueue_time is None:  # the common case, unkeyed (PART-NOKEY-001)
                index = self.rotation
                if not self.available[index]:
                    index = self._default_partition(None)
                self.rotation = self.next_partition[index]
                self.counters[index] = n = self.counters[index] + 1
                seq = self.sequence_base[index] + n  # sequence_number(index, n)
                self.deliver_to(index, message, seq, now, size)
                return seq
            key = None
        else:
            key = partition_key(message, detection)
        return self._accept_in(self._choose(key, choose), [message], [size], now)[0]

    def _accept_in(self, index: int, messages: list[Message], sizes: list[int], now: int) -> list[int | None]:
        """Checked messages, in partition ``index``: each a duplicate there (PART-DUP-001), held
        until its time, or delivered with the partition's next number."""
        out: list[int | None] = []
        for message, size in zip(messages, sizes):
            if self._is_duplicate(index, message, now):
                out.append(None)
                continue
            when = message.scheduled_enqueue_time
            if when is not None and when > now:
                out.append(self._hold_scheduled_in(index, message, size, when))
                continue
            seq = self._next_sequence(index)
            self.deliver_to(index, message, seq, now, size)
            out.append(seq)
        return out

    def _is_duplicate(self, index: int, message: Message, now: int) -> bool:
        """PART-DUP-001: uniqueness is MessageId plus PartitionKey, judged per partition."""
        detector = self.partition_duplicates[index]
        if detector is None or message.message_id is None:
            return False
        key = f"{message.message_id}\x00{message.partition_key or ''}"
        if detector.is_duplicate(key, now):
            return True
        detector.record(key, now)
        return False

    def _next_sequence(self, index: int) -> int:
        self.counters[index] += 1
        return sequence_number(index, self.counters[index])

    def schedule(self, messages: list[Message], enqueue_time: int, now: int, choose: Chooser | None = None) -> list[int]:
        self.tick(now)
        sizes = self.check(messages, now)
        out = []
        for message, size in zip(messages, sizes):
            index = self._choose(partition_key(message, self.description.requires_duplicate_detection), choose)
            if self._is_duplicate(index, message, now):
                out.append(self._next_sequence(index))  # dropped, but answered (Entity.schedule, audit row OP-052)
                continue
            if enqueue_time <= now:
                seq = self._next_sequence(index)
                self.deliver_to(index, message, seq, now, size)
                out.append(seq)
            else:
                out.append(self._hold_scheduled_in(index, message, size, enqueue_time))
        return out

    def _hold_scheduled_in(self, index: int, message: Message, size: int, enqueue_time: int) -> int:
        seq = self._next_sequence(index)
        held = StoredMessage(message.with_changes(scheduled_enqueue_time=enqueue_time), seq, enqueue_time, NEVER, size, State.SCHEDULED, partition=index)
        self.scheduled[seq] = held
        heapq.heappush(self.schedule_order, (enqueue_time, seq))
        self.bytes += size
        return seq

    def tick(self, now: int) -> None:
        """Scheduled messages materialise in their own partition with a new number."""
        order = self.schedule_order
        while order and order[0][0] <= now:
            when, seq = heapq.heappop(order)
            held = self.scheduled.pop(seq, None)
            if held is None:
                continue
            self.bytes -= held.size
            self.accessed_at = max(self.accessed_at, when)  # its enqueue is a send (SETTLE-IDLE-002)
            index = partition_of(seq)
            self.deliver_to(index, held.message, self._next_sequence(index), when, held.size)

    def deliver(self, message: Message, seq: int, now: int, size: int) -> None:
        self.deliver_to(partition_of(seq), message, seq, now, size)

    def deliver_to(self, index: int, message: Message, seq: int, now: int, size: int) -> None:
        raise NotImplementedError

    def stored(self, message: Message, seq: int, now: int, size: int, index: int, *ceilings: int) -> StoredMessage:
        if message.time_to_live is None and not ceilings and self.description.default_message_time_to_live >= TIMESPAN_MAX:
            return StoredMessage(message, seq, now, NEVER, size, partition=index)  # never expires (the usual case)
        ttl = effective_time_to_live(message.time_to_live, self.description.default_message_time_to_live, *ceilings)
        return StoredMessage(message, seq, now, expiry(now, ttl), size, partition=index)


class PartitionedQueue(PartitionedEntity):
    kind = "queue"

    def __init__(self, path: str, description: EntityDescription, next_lock_token: Callable[[], int], partition_count: int,
                 partition_tokens: list[Callable[[], int]] | None = None) -> None:
        super().__init__(path, description, next_lock_token, partition_count, partition_tokens)
        self.store = PartitionedStore(self, [self._new_store(path, description, self.tokens_for(i)) for i in range(partition_count)])

    def deliver_to(self, index: int, message: Message, seq: int, now: int, size: int) -> None:
        if message.content_type is not None and message.content_type == PING_CONTENT_TYPE:
            return  # PAIR-PING-002
        store = self.store.partitions[index]
        if self.description.forward_to is not None and self.forward(message, seq, now, store):
            return
        self.bytes += size if size <= LARGE_MESSAGE else counted(size)  # SETTLE-TIER-008 (a partitioned Premium message is at most 1 MB: once)
        if now >= store._due:
            store.tick(now)
        if message.time_to_live is None and self.description.default_message_time_to_live >= TIMESPAN_MAX:
            store.enqueue(StoredMessage(message, seq, now, NEVER, size, ACTIVE, 0, index))  # never expires: the usual case
        else:
            store.enqueue(self.stored(message, seq, now, size, index))


class PartitionedSubscription:
    kind = "subscription"

    def __init__(self, topic: "PartitionedTopic", name: str, description: EntityDescription) -> None:
        self.topic = topic
        self.name = name
        self.path = f"{topic.path}/Subscriptions/{name}"
        self.description = description
        self.store = PartitionedStore(topic, [topic._new_store(self.path, description, topic.tokens_for(i)) for i in range(topic.partition_count)])
        self.rules = RuleSet()  # RULES-RULE-001: $Default, the true filter


class PartitionedTopic(FanOut, PartitionedEntity):
    kind = "topic"

    def __init__(self, path: str, description: EntityDescription, next_lock_token: Callable[[], int], partition_count: int,
                 partition_tokens: list[Callable[[], int]] | None = None) -> None:
        super().__init__(path, description, next_lock_token, partition_count, partition_tokens)
        self.subscriptions: dict[str, PartitionedSubscription] = {}
        self.copies: dict[int, int] = {}
        self.large: dict[int, int] = {}  # SETTLE-TIER-008 (none: a partitioned Premium message is at most 1 MB)

    def add_subscription(self, name: str, description: EntityDescription) -> PartitionedSubscription:
        key = name.lower()
        if key in self.subscriptions:
            raise ServiceBusError(ErrorCode.ENTITY_ALREADY_EXISTS, f"The subscription '{name}' already exists in topic '{self.path}'.")
        sub = self.subscriptions[key] = PartitionedSubscription(self, name, description)
        return sub

    def remove_subscription(self, name: str) -> None:
        sub = self.subscriptions.pop(name.lower(), None)
        if sub is None:
            raise ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, f"No subscription '{name}' in topic '{self.path}'.")
        for store in sub.store.partitions:
            self.stores.remove(store)
            self.bytes -= store.state_bytes()  # SETTLE-SESS-010: its session states go with it
            for s in (store, store.dead_letter_queue):
                for msg in list(s.messages.values()):
                    self._released(msg)

    def deliver_to(self, index: int, message: Message, seq: int, now: int, size: int) -> None:
        self.fan_out(
            message, seq, now, size,
            store_of=lambda sub: sub.store.partitions[index],
            stored_of=lambda sub, m, s: self.stored(m, s, now, size, index, sub.description.default_message_time_to_live),
        )
