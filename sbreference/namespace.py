"""The namespace: entities by path, connections, and the operations clients call.

This is the reference broker's front door. Every operation takes the connection it
arrives on and reads the namespace's virtual clock. A message lock is held by the
connection that received the message and is lost with it (SETTLE-LOCK-009), but it
belongs to the entity: any connection may settle or renew it there by its token
(SETTLE-LOCK-011); a session's messages are settled by the session's holder only. Failures raise ``ServiceBusError``, each with its own tracking id
(SETTLE-SEND-002).

Where Service Bus may legitimately answer in more than one way, the choice is a
parameter and the allowed set is a function (``next_available_sessions``); nothing
here draws a random number.
"""

from __future__ import annotations

import itertools
from typing import Callable, Iterable, Sequence

from .clock import Clock, VirtualClock
from .entity import Entity
from .errors import ErrorCode, ServiceBusError
from .message import Delivery, Message
from .partitioning import PREMIUM_PARTITION_COUNTS, TOKEN_STRIDE, Chooser, partition_key
from .status import refuse_send
from .store import PEEK_LOCK, RECEIVE_AND_DELETE, MessageStore
from .provisioning import IMMUTABLE, MAX_ENTITIES, Provisioning  # noqa: F401 (re-exported)
from .routing import Routing
from .idle import Idleness
from .tiers import messaging_units as messaging_units_of
from .transfer import transfer_dead_letter_stores
from .transactions import Transactions

RECEIVE_MODES = (PEEK_LOCK, RECEIVE_AND_DELETE)

#: Messages per transaction.
MAX_TRANSACTION_MESSAGES = 100
#: SETTLE-PEEK-006: "Maximum number of messages returned in PeekMessagesAsync call: 250"
#: (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-quotas).
MAX_PEEK_MESSAGES = 250


class Namespace(Routing, Idleness, Provisioning):
    """A Service Bus namespace, as the reference model of the broker.

    Creating, updating, describing and deleting entities, rules and partition faults
    is ``provisioning.Provisioning``; how a path resolves to an entity, and injected
    faults, ``routing.Routing``; deletion on idle, ``idle.Idleness``; this class holds connections, the operations clients
    call on entities, and time."""

    def __init__(
        self,
        name: str = "sbconform",
        clock: Clock | None = None,
        sku: str = "standard",
        partition_count: int | None = None,
        messaging_units: int | None = None,
    ) -> None:
        """``sku="premium"`` with ``partition_count`` (1, 2 or 4) is a partitioned Premium
        namespace: every queue and topic in it is partitioned that way (PART-STRUCT-003).
        ``messaging_units``: Premium only, 1 unless given (SETTLE-TIER-007)."""
        if sku not in ("basic", "standard", "premium"):
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"unknown SKU {sku!r} (basic, standard or premium)")
        if partition_count is not None and (sku != "premium" or partition_count not in PREMIUM_PARTITION_COUNTS):
            raise ServiceBusError(
                ErrorCode.ARGUMENT_ERROR,
                f"a partition count is set on Premium namespaces only, to one of {PREMIUM_PARTITION_COUNTS}; got {partition_count} on {sku}",
            )
        self.name = name
        self.clock = clock if clock is not None else VirtualClock()
        self.sku = sku
        self.partition_count = partition_count
        self.messaging_units = messaging_units_of(sku, partition_count, messaging_units)
        self.billed_operations = 0  # PART-COST-001: one per send, schedule or receive call (settlements are not counted)
        self._hops = 0  # auto-forwarding depth of the delivery in progress
        self.entities: dict[str, Entity] = {}
        self._lock_tokens = itertools.count(1).__next__
        #: A partition's lock tokens tell its index (``token % TOKEN_STRIDE``): one counter per index, shared by the
        #: namespace's partitioned entities, so that their tokens are unique among them as the others' are.
        self._partition_lock_tokens = [itertools.count(TOKEN_STRIDE + i, TOKEN_STRIDE).__next__ for i in range(TOKEN_STRIDE)]
        self._connections = itertools.count(1)
        self.open_connections: set[int] = set()
        self._routes: dict[str, tuple[Entity, MessageStore | None]] = {}  # path -> resolved, as given
        self._senders: dict[str, Entity] = {}  # path -> the queue or topic itself, among the routes: send's
        self._queues: dict[str, Entity] = {}  # path -> the queue itself, among the routes: receive's and complete's
        self.faults: dict[str, ServiceBusError] = {}  # entity key -> the error it answers with
        self.transactions = Transactions(self)  # TXN-*: the coordinator
        self._temporary: set[str] = set()  # keys of the entities that may be deleted on idle (SETTLE-IDLE-001)

    # ----------------------------------------------------------- connections

    def connect(self) -> int:
        conn = next(self._connections)
        self.open_connections.add(conn)
        return conn

    def close_connection(self, conn: int) -> None:
        """The client closed the connection itself (an AMQP CLOSE); what it settled stays settled,
        and a transaction it never discharged ends with it (TXN-CONN-001)."""
        self.open_connections.discard(conn)
        self.transactions.drop_connection(conn)

    def drop_connection(self, conn: int) -> None:
        """SETTLE-LOCK-009: the connection is gone, and every lock it held with it."""
        self.open_connections.discard(conn)
        self.transactions.drop_connection(conn)
        now = self.clock.now
        for entity in self.entities.values():
            for store in entity.stores:
                store.drop_holder(now, conn)
                store.dead_letter_queue.drop_holder(now, conn)

    # -------------------------------------------------------------- sending

    def send(self, conn: int, path: str, messages: Sequence[Message] | Message, choose: Chooser | None = None) -> list[int | None]:
        """Send one message or a batch (all or nothing). Returns sequence numbers;
        ``None`` for a message dropped as a duplicate. On a partitioned entity ``choose``
        picks among ``allowed_partitions`` (default: round-robin)."""
        self.billed_operations += 1
        # A cached route is an entity that answers now (faulted ones are never cached);
        # one to the queue or topic itself is what a sender may address.
        entity = self._senders.get(path)
        if entity is None:
            entity = self._sending_entity(path)
            refuse_send(entity.kind, entity.path, entity.description.status)  # SETTLE-STATUS-001 (never cached)
        entity.accessed_at = now = self.clock.now  # SETTLE-ENT-004 (AccessedAt), SETTLE-IDLE-002
        if isinstance(messages, Message):
            if choose is not None:
                return [entity.accept_one(messages, now, choose)]
            return [entity.accept_one(messages, now)]
        if choose is not None:
            return entity.accept(list(messages), now, choose)
        return entity.accept(list(messages), now)

    def allowed_partitions(self, path: str, message: Message) -> list[int]:
        """Where a send of ``message`` may land now (an error if nowhere: PART-KEY-008)."""
        entity = self.partitioned(path)
        return entity.allowed_partitions(partition_key(message, entity.description.requires_duplicate_detection))

    def send_transaction(self, conn: int, sends: Sequence[tuple[str, Sequence[Message]]]) -> list[list[int | None]]:
        """Sends committed together: all are accepted or none is (TXN-ATOM-001).

        On partitioned entities every message needs a partition key and all must share
        it (PART-TXN-001/002), so one transaction cannot reach several sessions there
        (PART-TXN-003); non-partitioned entities have no such rule (PART-TXN-004).
        Returns the sequence numbers the commit assigned, per send.
        """
        txn = self.transactions.declare(conn)
        try:
            for path, messages in sends:
                self.transactions.send(conn, txn, path, list(messages))
        except ServiceBusError:
            self.transactions.discharge(conn, txn, fail=True)
            raise
        committed = self.transactions.discharge(conn, txn, fail=False)
        self.billed_operations += 1
        return [[committed[path].pop(0) for _ in messages] for path, messages in sends]

    def send_presettled(self, conn: int, path: str, messages: Sequence[Message] | Message) -> None:
        """SETTLE-SEND-004: a pre-settled transfer; the sender learns nothing, even of a rejection."""
        try:
            self.send(conn, path, messages)
        except ServiceBusError:
            pass

    def schedule(self, conn: int, path: str, messages: Sequence[Message] | Message, enqueue_time: int) -> list[int]:
        self.billed_operations += 1
        batch = [messages] if isinstance(messages, Message) else list(messages)
        entity = self._sending_entity(path)
        refuse_send(entity.kind, entity.path, entity.description.status)  # SETTLE-STATUS-001
        entity.accessed_at = self.clock.now  # a scheduled message is sent (SETTLE-IDLE-002)
        return entity.schedule(batch, enqueue_time, self.clock.now)

    def cancel_scheduled(self, conn: int, path: str, sequence_numbers: Iterable[int]) -> None:
        entity = self._sending_entity(path)
        entity.used_at = self.clock.now  # SETTLE-IDLE-002
        entity.cancel_scheduled(sequence_numbers, self.clock.now)

    def _sending_entity(self, path: str) -> Entity:
        route = self._routes.get(path)
        entity, store = route if route is not None else self._resolve(path)
        if store is not None:
            raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"Cannot send to '{path}': only queues and topics accept sends.")
        if entity.kind in ("queue", "topic"):
            return entity
        raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"Cannot send to '{path}'.")

    # ------------------------------------------------------------ receiving

    def receive(
        self,
        conn: int,
        path: str,
        max_count: int = 1,
        mode: str = PEEK_LOCK,
        session_id: str | None = None,
        choose: Chooser | None = None,
    ) -> list[Delivery]:
        """On a partitioned entity each message is the head of some available partition;
        ``choose`` picks which (default: the one enqueued first)."""
        if mode not in RECEIVE_MODES:
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"unknown receive mode {mode!r}")
        if max_count < 1:
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"max_count must be at least 1, got {max_count}")
        self.billed_operations += 1
        queue = self._queues.get(path)
        if queue is not None and not queue.schedule_order:
            store = queue.store  # a cached queue with nothing scheduled: what _taking_store returns
        else:
            store = self._taking_store(path)
        store.accessed_at = now = self.clock.now  # a receive request: SETTLE-ENT-004 (AccessedAt), SETTLE-IDLE-002/003
        return store.receive(now, conn, max_count, mode, session_id, choose)

    def complete(self, conn: int, path: str, lock_token: int) -> None:
        queue = self._queues.get(path)
        if queue is not None and not queue.schedule_order:
            store = queue.store  # a cached queue with nothing scheduled: what _taking_store returns
        else:
            store = self._taking_store(path)
        store.complete(self.clock.now, conn, lock_token)

    def abandon(self, conn: int, path: str, lock_token: int, properties: dict | None = None) -> None:
        """SETTLE-ABAN-001; ``properties``: application properties to modify (SETTLE-MOD-001)."""
        self._taking_store(path).abandon(self.clock.now, conn, lock_token, properties)

    def release(self, conn: int, path: str, lock_token: int) -> None:
        """The receiver returns a message unprocessed: no delivery is counted."""
        self._receiving_store(path).release(self.clock.now, conn, lock_token)

    def defer(self, conn: int, path: str, lock_token: int, properties: dict | None = None) -> None:
        self._taking_store(path).defer(self.clock.now, conn, lock_token, properties)

    def dead_letter(
        self, conn: int, path: str, lock_token: int, reason: str | None = None, description: str | None = None,
        properties: dict | None = None,
    ) -> None:
        self._taking_store(path).dead_letter(self.clock.now, conn, lock_token, reason, description, properties)

    def renew_lock(self, conn: int, path: str, lock_token: int) -> int:
        return self._receiving_store(path).renew_lock(self.clock.now, conn, lock_token)

    def receive_deferred(
        self,
        conn: int,
        path: str,
        sequence_numbers: Iterable[int],
        mode: str = PEEK_LOCK,
        session_id: str | None = None,
    ) -> list[Delivery]:
        return self._taking_store(path).receive_deferred(self.clock.now, conn, sequence_numbers, mode, session_id)

    def peek(
        self,
        path: str,
        from_sequence_number: int = 1,
        max_count: int = 1,
        session_id: str | None = None,
        choose: Chooser | None = None,
    ) -> list[Delivery]:
        """SETTLE-PEEK-001..003: browse; on a queue this includes scheduled messages.
        On a partitioned entity one partition answers (PART-PEEK-002); ``choose`` says which.
        SETTLE-PEEK-006: at most ``MAX_PEEK_MESSAGES`` whatever ``max_count`` asks for."""
        max_count = min(max_count, MAX_PEEK_MESSAGES)
        entity, store = self._resolve(path)
        if entity.kind == "topic" and store is None:  # SETTLE-PEEK-005: its scheduled messages (azure-service-bus issue 352)
            entity.tick(self.clock.now)
            return [d for d in entity.scheduled_deliveries(from_sequence_number) if session_id in (None, d.session_id)][:max_count]
        store = self._receiving_store(path)
        if entity.partitioned:
            scheduled = entity.scheduled_deliveries(from_sequence_number) if entity.kind == "queue" and not store.is_dead_letter else []
            scheduled = [d for d in scheduled if session_id is None or d.session_id == session_id]
            return store.peek(self.clock.now, from_sequence_number, max_count, session_id, choose, scheduled)
        found = store.peek(self.clock.now, from_sequence_number, max_count, session_id)
        if entity.kind == "queue" and not store.is_dead_letter and entity.scheduled:
            scheduled = [
                d for d in entity.scheduled_deliveries(from_sequence_number)
                if session_id is None or d.session_id == session_id
            ]
            found = sorted(found + scheduled, key=lambda d: d.sequence_number)[:max_count]
        return found

    # ------------------------------------------------------------- sessions

    def next_available_sessions(self, path: str) -> list[str]:
        """The sessions an accept-next-available may lock now (SETTLE-SESS-004)."""
        return self._session_store(path).available_sessions(self.clock.now)

    def accept_session(self, conn: int, path: str, session_id: str | None = None, choose: Callable[[list[str]], str] | None = None) -> tuple[str, int]:
        """Lock a named session, or (``session_id=None``) one of the available ones.

        ``choose`` picks among ``next_available_sessions``; by default, the session
        whose oldest message is oldest. No session available: a timeout, as the SDKs
        report it.
        """
        store = self._session_store(path)
        self._taking_store(path)  # a session receiver takes messages: refused while receives are disabled
        now = self.clock.now
        if session_id is None:
            allowed = store.available_sessions(now)
            if not allowed:
                raise ServiceBusError(ErrorCode.TIMEOUT, f"No unlocked session with messages is available in '{path}'.")
            session_id = choose(allowed) if choose is not None else allowed[0]
            if session_id not in allowed:
                raise ValueError(f"choose() picked {session_id!r}, which is not among the allowed {allowed}")
        session = store.accept_session(now, conn, session_id)
        return session.session_id, session.locked_until

    def renew_session_lock(self, conn: int, path: str, session_id: str) -> int:
        return self._session_store(path).renew_session_lock(self.clock.now, conn, session_id)

    def release_session(self, conn: int, path: str, session_id: str) -> None:
        self._session_store(path).release_session(self.clock.now, conn, session_id)

    def get_session_state(self, conn: int, path: str, session_id: str) -> bytes | None:
        return self._session_store(path).get_session_state(self.clock.now, conn, session_id)

    def set_session_state(self, conn: int, path: str, session_id: str, state: bytes | None) -> None:
        """SETTLE-SESS-008: at most one message's size; SETTLE-SESS-010: within the entity's size (``charge_state``)."""
        store, now = self._session_store(path), self.clock.now
        old = store.get_session_state(now, conn, session_id)
        self.charge_state(path, store, old, state, lambda: store.set_session_state(now, conn, session_id, state, self.session_state_limit(path)))

    def _session_store(self, path: str) -> MessageStore:
        store = self._receiving_store(path)
        if not store.requires_session:
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION,
                "A sessionful message receiver cannot be created on an entity that does not require sessions.",
            )
        return store

    # ----------------------------------------------------------------- time

    def next_due(self) -> int | None:
        """The next instant at which time alone changes anything (lock expiry,
        scheduled message, expiry, deletion on idle), or ``None``. Targets wait on it."""
        times = [t for t in (e.next_due() for e in self.entities.values()) if t is not None]
        if self._temporary and (idle := self.next_idle_deadline()) is not None:  # SETTLE-IDLE-001
            times.append(idle)
        return min(times) if times else None

    def tick_due(self, now: int | None = None, keys: Iterable[str] | None = None) -> list[str]:
        """Let time act on every entity (or those keyed ``keys``, lower-case paths) with
        something due by ``now`` (default: the clock): lock expiries, scheduled messages,
        expiries; and, whatever ``keys``, deletion on idle (SETTLE-IDLE-001). Returns the keys of
        the entities it ticked or deleted (or took a subscription from), once each, so that a
        server serves the receivers waiting on them."""
        now = self.clock.now if now is None else now
        changed = self.reap_idle(now) if self._temporary else []  # SETTLE-IDLE-001: deleted (their receivers find nothing)
        entities = self.entities
        for key in list(entities) if keys is None else keys:
            entity = entities.get(key)
            if entity is None:
                continue
            due = entity.next_due()
            if due is not None and due <= now:
                entity.tick(now)
                for store in entity.stores:
                    store.tick(now)
                    store.dead_letter_queue.tick(now)
                for tdlq in transfer_dead_letter_stores(entity):  # TXN-VIA-003: its locks end too
                    tdlq.tick(now)
                if key not in changed:  # already there if it lost an idle subscription
                    changed.append(key)
        return changed

    def lock_deadlines(self) -> list[int]:
        """When every message lock held now expires (queues, subscriptions and their
        dead-letter queues), soonest first: the instants at which an answer may change."""
        return sorted(
            msg.locked_until
            for entity in self.entities.values()
            for store in [*(s for store in entity.stores for s in (store, store.dead_letter_queue)), *transfer_dead_letter_stores(entity)]
            for msg in store.locks.values()
        )

    # ------------------------------------------------------- public surface

    def receiving_store(self, path: str) -> MessageStore:
        """The store a receiver on ``path`` takes from (a queue, a subscription, or the
        dead-letter queue of either), with what time made due applied: what a server
        checks when a receive link attaches. Unknown or faulted: ``ServiceBusError``."""
        return self._receiving_store(path, use=False)

    def taking_store(self, path: str) -> MessageStore:
        """``receiving_store`` for a receiver that takes messages: also refused while the queue
        or subscription does not give messages out (its status, SETTLE-STATUS-002)."""
        return self._taking_store(path, use=False)

    def sending_entity(self, path: str) -> Entity:
        """The queue or topic a sender on ``path`` sends to; ``ServiceBusError`` if it does
        not exist, is faulted, or does not accept sends (a subscription, a dead-letter queue)."""
        return self._sending_entity(path)

    def resolve(self, path: str) -> None:
        """Check that ``path`` names an entity that answers now (``ServiceBusError`` otherwise)."""
        self._resolve(path)
