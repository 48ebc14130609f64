"""Entities: queues, topics and subscriptions.

An entity is what a sender addresses. It assigns sequence numbers, applies duplicate
detection, size limits and quota, holds scheduled messages until their time, and
hands accepted messages to its store(s): a queue to its own, a topic a copy to each
subscription. Descriptions live in ``description``; settlement in ``store.MessageStore``.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable, Iterable

from .clock import NEVER, TIMESPAN_MAX
from .deadletter import SESSION_ID_IS_NULL, forward_failure
from .dedup import DuplicateDetection
# Descriptions and their limits, re-exported: callers import them from here.
from .description import (  # noqa: F401
    KB,
    KIND_FIELDS,
    MAX_NAME_LENGTH,
    MAX_PATH_LENGTH,
    MAX_SUBSCRIPTIONS_PER_TOPIC,
    MB,
    EntityDescription,
    effective_time_to_live,
    expiry,
)
from .errors import ErrorCode, ServiceBusError
from .message import MESSAGE_OVERHEAD, PROPERTY_LIMIT, Delivery, Message, State, StoredMessage, header_problem, message_size
from .rules import RuleSet, route
from .store import MessageStore
from .transfer import transfer_dead_letter_stores

#: Content type of the paired-namespace ping (PAIR-PING-001).
PING_CONTENT_TYPE = "application/vnd.ms-servicebus-ping"

#: Longest MessageId and SessionId, in characters (service-bus-quotas: "Maximum size of a
#: message ID 128", "Maximum size of a message session ID 128"; the SDKs hold PartitionKey to the
#: same 128): SETTLE-SEND-008.
MAX_ID_LENGTH = 128

#: SETTLE-TIER-008: "A large message (size > 1 MB) sent to a queue is counted twice. A large message (size > 1 MB) sent
#: to a topic is counted X + 1 times, where X is the number of subscriptions whose filter condition matches the message"
#: (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-quotas).
LARGE_MESSAGE = 1 * MB


def counted(size: int, times: int = 2) -> int:
    """SETTLE-TIER-008: the bytes a message of ``size`` takes from its entity, held ``times`` times if it is large."""
    return size * times if size > LARGE_MESSAGE else size


#: A message forwarded through more entities than this is dead-lettered instead.
MAX_TRANSFER_HOPS = 4


class Entity:
    """What queues and topics share: the sending side."""

    kind = "entity"

    def __init__(
        self,
        path: str,
        description: EntityDescription,
        next_lock_token: Callable[[], int],
    ) -> None:
        self.path = path
        self.description = description
        self.next_lock_token = next_lock_token
        self.last_sequence_number = 0
        self.duplicates = (
            DuplicateDetection(description.duplicate_detection_history_time_window)
            if description.requires_duplicate_detection
            else None
        )
        self.scheduled: dict[int, StoredMessage] = {}
        self.schedule_order: list[tuple[int, int]] = []  # heap of (enqueue time, seq)
        self.bytes = 0  # held by this entity, for the quota (SETTLE-SEND-005)
        self.max_bytes = description.max_size_in_megabytes * MB
        self.stores: list[MessageStore] = []
        #: A queue that requires sessions takes only messages with a SessionId; chosen at
        #: creation only (PART-CREATE-002). A topic takes any (its subscriptions decide).
        self.sends_need_session_id = self.kind == "queue" and description.requires_session
        #: Set by the namespace: delivers a message to another entity (auto-forwarding).
        self.router: Callable[[str, Message, int], None] | None = None

    partitioned = False
    #: SETTLE-ENT-004 (runtime properties), SETTLE-IDLE-*: set by the namespace (``idle``).
    created_at = updated_at = accessed_at = used_at = 0
    #: SETTLE-TIER-006: the tier's batch limit, set by the namespace (None: the max message size).
    max_batch_size: int | None = None
    #: SETTLE-TIER-008: how many times a large message counts toward this entity (a queue: twice; a topic: once at the
    #: door, then once more per subscription taking a copy, ``FanOut.fan_out``).
    large_times = 2
    #: TXN-VIA-002: messages sent via this entity whose destination was disabled at the commit (its transfer dead-letter
    #: queue: counted, TransferDeadLetterMessageCount; not receivable in the model).
    transfer_dead_letter: tuple[Message, ...] = ()

    def forward(self, message: Message, seq: int, now: int, store: MessageStore, description: EntityDescription | None = None) -> bool:
        """Auto-forwarding: hand the message to ``forward_to`` instead of storing it here.

        The message keeps its properties, so a partition key keeps choosing the
        destination's partition (PART-FWD-001). If the destination refuses it, or the
        chain is too long, it is dead-lettered here instead. Returns whether it left.
        """
        d = description or self.description
        if d.forward_to is None or self.router is None:
            return False
        try:
            self.router(d.forward_to, message, now)
        except ServiceBusError as error:
            dead = StoredMessage(message, seq, now, NEVER, message_size(message))
            dead.dead_letter_reason, dead.dead_letter_description = forward_failure(error, message.session_id)
            store.dead_letter_queue.enqueue(dead)
            self.bytes += counted(dead.size, self.large_times)
        return True

    # ---------------------------------------------------------------- send

    def check_one(self, m: Message, now: int) -> int:
        """``check`` for a single message, without lists: its size, once it fits every limit."""
        size = message_size(m)
        header = size - MESSAGE_OVERHEAD - len(m.body)  # at least each property's size, and each ID's length
        # (a message over 1 MB counts more than its size, SETTLE-TIER-008: ``check`` measures it)
        if size <= self.description.max_message_size and size <= LARGE_MESSAGE and self.bytes + size <= self.max_bytes and (
            m.session_id is not None or not self.sends_need_session_id
        ) and (header <= MAX_ID_LENGTH or (  # then no ID (SETTLE-SEND-008) nor header (SETTLE-SEND-009) limit can apply
            header <= PROPERTY_LIMIT and (m.message_id is None or len(m.message_id) <= MAX_ID_LENGTH)
            and (m.session_id is None or len(m.session_id) <= MAX_ID_LENGTH)
            and (m.partition_key is None or len(m.partition_key) <= MAX_ID_LENGTH))):
            return size
        return self.check([m], now)[0]  # raises the error that applies

    def check(self, messages: list[Message], now: int) -> list[int]:
        """Everything that may reject a send, before anything is accepted (all or none)."""
        d = self.description
        for m in messages:  # SETTLE-SEND-008
            for name, value in (("MessageId", m.message_id), ("SessionId", m.session_id), ("PartitionKey", m.partition_key)):
                if value is not None and len(value) > MAX_ID_LENGTH:
                    raise ServiceBusError(
                        ErrorCode.ARGUMENT_ERROR,
                        f"The {name} of {len(value)} characters is longer than the maximum of {MAX_ID_LENGTH}.",
                        transient=False,
                    )
        sizes = [message_size(m) for m in messages]
        total = sum(sizes)
        for size in sizes:
            if size > d.max_message_size:
                raise ServiceBusError(
                    ErrorCode.MESSAGE_SIZE_EXCEEDED,
                    f"The message of {size} bytes exceeds the maximum message size of {d.max_message_size} bytes.",
                    transient=False,
                )
        for m in messages:  # SETTLE-SEND-009
            problem = header_problem(m)
            if problem is not None:
                raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"The message was refused: {problem}.", transient=False)
        batch_limit = min(d.max_message_size, self.max_batch_size or d.max_message_size)  # SETTLE-TIER-006
        if len(messages) > 1 and total > batch_limit:
            raise ServiceBusError(
                ErrorCode.MESSAGE_SIZE_EXCEEDED,
                f"The batch of {total} bytes exceeds the maximum batch size of {batch_limit} bytes.",
                transient=False,
            )
        if self.sends_need_session_id:
            for m in messages:
                if m.session_id is None:
                    raise ServiceBusError(
                        ErrorCode.INVALID_OPERATION,
                        "The SessionId was not set on a message, and it cannot be sent to the entity. "
                        "Entities that have session support enabled can only receive messages that have the SessionId set.",
                    )
        if self.bytes + sum(counted(size, self.large_times) for size in sizes) > self.max_bytes:
            raise ServiceBusError(
                ErrorCode.QUOTA_EXCEEDED,
                f"The maximum entity size has been reached or exceeded for {self.kind} '{self.path}': "
                f"size {self.bytes} bytes, max {self.max_bytes} bytes.",
                transient=False,
            )
        return sizes

    def accept(self, messages: list[Message], now: int) -> list[int | None]:
        """SETTLE-SEND-001: accept a message or a batch (all or none); returns sequence numbers.

        ``None`` marks a message accepted but dropped as a duplicate (SETTLE-DUP-001).
        """
        if len(messages) == 1:
            return [self.accept_one(messages[0], now)]
        if self.schedule_order:
            self.tick(now)
        return self._accept_checked(messages, self.check(messages, now), now)

    def accept_one(self, message: Message, now: int) -> int | None:
        """``accept`` for one message: its sequence number (``None``: a duplicate)."""
        if self.schedule_order:
            self.tick(now)
        size = self.check_one(message, now)
        if self.duplicates is None and message.scheduled_enqueue_time is None:  # the usual send
            self.last_sequence_number = seq = self.last_sequence_number + 1
            self.deliver(message, seq, now, size)
            return seq
        return self._accept_checked([message], [size], now)[0]

    def _accept_checked(self, messages: list[Message], sizes: list[int], now: int) -> list[int | None]:
        """Messages that passed ``check``: each is a duplicate (SETTLE-DUP-001), held until its
        scheduled time (SETTLE-SCHED-001) or delivered now with the next sequence number."""
        out: list[int | None] = []
        duplicates = self.duplicates
        for message, size in zip(messages, sizes):
            if duplicates is not None:
                if duplicates.is_duplicate(message.message_id, now):
                    out.append(None)
                    continue
                duplicates.record(message.message_id, now)
            when = message.scheduled_enqueue_time
            if when is not None and when > now:
                out.append(self._hold_scheduled(message, size, when))
                continue
            self.last_sequence_number += 1
            seq = self.last_sequence_number
            self.deliver(message, seq, now, size)
            out.append(seq)
        return out

    def schedule(self, messages: list[Message], enqueue_time: int, now: int) -> list[int]:
        """SETTLE-SCHED-001: hold messages until ``enqueue_time``; returns their numbers."""
        self.tick(now)
        sizes = self.check(messages, now)
        out = []
        for message, size in zip(messages, sizes):
            if self.duplicates is not None:
                if self.duplicates.is_duplicate(message.message_id, now):
                    # SETTLE-DUP-002: dropped, but answered like any other (SETTLE-SCHED-001, audit row OP-052): ScheduleMessageAsync
                    # "Returns: The sequence number of the message that was scheduled", one per message.
                    self.last_sequence_number += 1
                    out.append(self.last_sequence_number)
                    continue
                self.duplicates.record(message.message_id, now)
            if enqueue_time <= now:
                self.last_sequence_number += 1
                self.deliver(message, self.last_sequence_number, now, size)
                out.append(self.last_sequence_number)
            else:
                out.append(self._hold_scheduled(message, size, enqueue_time))
        return out

    def _hold_scheduled(self, message: Message, size: int, enqueue_time: int) -> int:
        self.last_sequence_number += 1
        seq = self.last_sequence_number
        held = StoredMessage(message.with_changes(scheduled_enqueue_time=enqueue_time), seq, enqueue_time, NEVER, size, State.SCHEDULED)
        self.scheduled[seq] = held
        heapq.heappush(self.schedule_order, (enqueue_time, seq))
        self.bytes += size
        return seq

    def cancel_scheduled(self, sequence_numbers: Iterable[int], now: int) -> None:
        """SETTLE-SCHED-003: cancelling deletes a scheduled message before its time."""
        self.tick(now)
        seqs = list(sequence_numbers)
        for seq in seqs:
            if seq not in self.scheduled:
                raise ServiceBusError(
                    ErrorCode.MESSAGE_NOT_FOUND,
                    f"No scheduled message with sequence number {seq} in '{self.path}'.",
                )
        for seq in seqs:
            held = self.scheduled.pop(seq)
            held.state = State.CANCELLED
            self.bytes -= held.size

    def tick(self, now: int) -> None:
        """SETTLE-SCHED-002: scheduled messages materialise at their time, with a new
        sequence number, as if sent at that instant."""
        order = self.schedule_order
        while order and order[0][0] <= now:
            when, seq = heapq.heappop(order)
            held = self.scheduled.pop(seq, None)
            if held is None:
                continue  # cancelled
            self.bytes -= held.size
            self.accessed_at = max(self.accessed_at, when)  # its enqueue is a send (SETTLE-IDLE-002)
            self.last_sequence_number += 1
            self.deliver(held.message, self.last_sequence_number, when, held.size)

    def next_due(self) -> int | None:
        """The next instant at which time alone changes this entity, if any."""
        order = self.schedule_order
        while order and order[0][1] not in self.scheduled:
            heapq.heappop(order)  # cancelled
        times = [order[0][0]] if order else []
        for s in (*(s for store in self.stores for s in (store, store.dead_letter_queue)), *transfer_dead_letter_stores(self)):
            t = s.next_due()
            if t is not None:
                times.append(t)
        return min(times) if times else None

    def deliver(self, message: Message, seq: int, now: int, size: int) -> None:
        raise NotImplementedError

    def scheduled_deliveries(self, from_sequence_number: int) -> list[Delivery]:
        return [Delivery(m) for seq, m in sorted(self.scheduled.items()) if seq >= from_sequence_number]

    def _released(self, msg: StoredMessage) -> None:
        size = msg.size
        self.bytes -= size if size <= LARGE_MESSAGE else counted(size, self.large_times)

    def _new_store(self, path: str, d: EntityDescription, next_lock_token: Callable[[], int] | None = None) -> MessageStore:
        tokens = next_lock_token or self.next_lock_token
        dead_letter = MessageStore(
            path + "/$DeadLetterQueue",
            d.lock_duration,
            d.max_delivery_count,
            on_remove=self._released,
            is_dead_letter=True,
            next_lock_token=tokens,
        )
        store = MessageStore(
            path,
            d.lock_duration,
            d.max_delivery_count,
            d.dead_lettering_on_message_expiration,
            d.requires_session,
            dead_letter=dead_letter,
            on_remove=self._released,
            next_lock_token=tokens,
        )
        self.stores.append(store)
        return store


class FanOut:
    """What every topic does with an accepted message: one copy per subscription
    (SETTLE-TOPIC-001), counted toward the topic's size until the last copy leaves."""

    subscriptions: dict
    copies: dict[int, int]
    bytes: int
    large_times = 1  # SETTLE-TIER-008: at the door, a topic counts a large message once; its copies add the rest

    def fan_out(
        self,
        message: Message,
        seq: int,
        now: int,
        size: int,
        store_of: Callable[[Any], MessageStore],
        stored_of: Callable[[Any, Message, int], StoredMessage],
    ) -> None:
        if message.content_type is not None and message.content_type == PING_CONTENT_TYPE:
            return  # PAIR-PING-002: the broker never hands a ping to a receiver
        subs = list(self.subscriptions.values())
        if not subs:
            return
        held = 0
        for sub in subs:
            # RULES-*: each subscription's rules decide its copies (none: not stored there).
            routed = route(sub.rules, message, sub.description.dead_lettering_on_filter_evaluation_exceptions, seq, now, size)
            store = store_of(sub)
            if routed.dead_letter is not None:
                # RULES-DLQ-001: a rule failed to evaluate: the message goes to this subscription's DLQ.
                dead = stored_of(sub, message, seq)
                dead.dead_letter_reason, dead.dead_letter_description = routed.dead_letter
                store.tick(now)
                store.dead_letter_queue.enqueue(dead)
                held += 1
                continue
            for number, copy in enumerate(routed.copies):
                copy_seq = seq if number == 0 else self._extra_sequence(seq)
                if copy_seq != seq:
                    self.bytes += size
                    self.copies[copy_seq] = 1
                else:
                    held += 1
                if sub.description.forward_to is not None and self.forward(copy, copy_seq, now, store, sub.description):
                    if copy_seq == seq:
                        held -= 1
                    else:
                        self._released_size(copy_seq, size)
                    continue
                stored = stored_of(sub, copy, copy_seq)
                store.tick(now)
                if sub.description.requires_session and copy.session_id is None:
                    # The copy cannot live in a session subscription: dead-lettered at once.
                    stored.dead_letter_reason, stored.dead_letter_description = SESSION_ID_IS_NULL
                    store.dead_letter_queue.enqueue(stored)
                    continue
                store.enqueue(stored)
        if held:
            self.bytes += size + (counted(size, held + 1) - size if size > LARGE_MESSAGE else 0)  # SETTLE-TIER-008: X + 1 times
            self.copies[seq] = held
            if size > LARGE_MESSAGE:
                self.large[seq] = size * held

    def _extra_sequence(self, seq: int) -> int:
        """A further copy of one message in one subscription (a second matching rule with an
        action, RULES-ACT-001) gets a sequence number of its own (RULES-D-002)."""
        next_sequence = getattr(self, "_next_sequence", None)
        if next_sequence is not None:  # partitioned: the next number of the same partition
            from .partitioning import partition_of

            return next_sequence(partition_of(seq))
        self.last_sequence_number += 1
        return self.last_sequence_number

    def _released(self, msg: StoredMessage) -> None:
        self._released_size(msg.sequence_number, msg.size)

    def _released_size(self, seq: int, size: int) -> None:
        left = self.copies.get(seq, 0) - 1
        if left <= 0:
            self.copies.pop(seq, None)
            self.bytes -= size + self.large.pop(seq, 0)
        else:
            self.copies[seq] = left


class Queue(Entity):
    kind = "queue"

    def __init__(self, path: str, description: EntityDescription, next_lock_token: Callable[[], int]) -> None:
        super().__init__(path, description, next_lock_token)
        self.store = self._new_store(path, description)

    def deliver(self, message: Message, seq: int, now: int, size: int) -> None:
        if message.content_type is not None and message.content_type == PING_CONTENT_TYPE:
            return  # PAIR-PING-002: the broker never hands a ping to a receiver
        if self.description.forward_to is not None and self.forward(message, seq, now, self.store):
            return
        default_ttl = self.description.default_message_time_to_live
        ttl = message.time_to_live
        ttl = default_ttl if ttl is None or ttl > default_ttl else ttl  # SETTLE-TTL-001
        self.bytes += size if size <= LARGE_MESSAGE else counted(size)  # SETTLE-TIER-008
        store = self.store
        if now >= store._due:
            store.tick(now)
        store.enqueue(StoredMessage(message, seq, now, NEVER if ttl >= TIMESPAN_MAX else now + ttl, size))


class Subscription:
    """A topic's subscription: its own store, with its own description."""

    kind = "subscription"

    def __init__(self, topic: "Topic", name: str, description: EntityDescription) -> None:
        self.topic = topic
        self.name = name
        self.path = f"{topic.path}/Subscriptions/{name}"
        self.description = description
        self.store = topic._new_store(self.path, description)
        self.rules = RuleSet()  # RULES-RULE-001: $Default, the true filter


class Topic(FanOut, Entity):
    kind = "topic"

    def __init__(self, path: str, description: EntityDescription, next_lock_token: Callable[[], int]) -> None:
        super().__init__(path, description, next_lock_token)
        self.subscriptions: dict[str, Subscription] = {}
        self.copies: dict[int, int] = {}  # seq -> copies still held by subscriptions
        self.large: dict[int, int] = {}  # seq -> the extra bytes a large message's copies take (SETTLE-TIER-008)

    def add_subscription(self, name: str, description: EntityDescription) -> Subscription:
        key = name.lower()
        if key in self.subscriptions:
            raise ServiceBusError(
                ErrorCode.ENTITY_ALREADY_EXISTS, f"The subscription '{name}' already exists in topic '{self.path}'."
            )
        sub = self.subscriptions[key] = Subscription(self, name, description)
        return sub

    def remove_subscription(self, name: str) -> None:
        sub = self.subscriptions.pop(name.lower(), None)
        if sub is None:
            raise ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, f"No subscription '{name}' in topic '{self.path}'.")
        self.stores.remove(sub.store)
        self.bytes -= sub.store.state_bytes()  # SETTLE-SESS-010: its session states go with it
        for store in (sub.store, sub.store.dead_letter_queue):
            for msg in list(store.messages.values()):
                self._released(msg)

    def deliver(self, message: Message, seq: int, now: int, size: int) -> None:
        """SETTLE-TOPIC-001: every subscription gets its own copy, with the same number."""
        topic_ttl = self.description.default_message_time_to_live
        self.fan_out(
            message, seq, now, size,
            store_of=lambda sub: sub.store,
            stored_of=lambda sub, m, s: StoredMessage(
                m, s, now,
                expiry(now, effective_time_to_live(m.time_to_live, topic_ttl, sub.description.default_message_time_to_live)),
                size,
            ),
        )
