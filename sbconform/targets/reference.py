"""The reference target: the model itself, in process, on its virtual clock.

Waiting is free: ``wait`` advances the virtual clock, and a receive that finds nothing
jumps the clock to the next instant anything could become available (a lock expiry, a
scheduled message), or to the end of its wait, just as a real broker would answer after
that much real time.

Where Service Bus may answer in several ways (which session is "next available"), the
target asks a ``choose`` policy; by default the first allowed outcome the model lists.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable, Sequence

from sbreference import (
    PEEK_LOCK,
    Delivery,
    ErrorCode,
    Message,
    Namespace,
    NEVER,
    Rule,
    ServiceBusError,
    VirtualClock,
)

from .base import Handle, Received, Target, TransactionalClient

CAPABILITIES = frozenset(
    {
        "topics",
        "sessions",
        "duplicate-detection",
        "scheduling",
        "deferral",
        "dead-letter",
        "time-to-live",
        "drop-connection",
        "presettled-send",
        "small-quota",
        "rejection-details",
        "virtual-time",
        "instant-time",
        "entity-management",
        "model-internals",
        "entity-outage",
        "partitions",
        "partition-outage",
        "premium-namespace",
        "basic-namespace",
        "transactions",
        "auto-forward",
        "paired-namespaces",
        "rules",
        "settle-with-properties",
        "standard-namespace",
        "broker-clock",
    }
)


def received_from(delivery: Delivery, raw: Any = None) -> Received:
    message = delivery.message
    state = str(delivery.state)
    return Received(
        message_id=message.message_id,
        body=message.body,
        sequence_number=delivery.sequence_number,
        enqueued_time=delivery.enqueued_time,
        delivery_count=delivery.delivery_count,
        lock_token=delivery.lock_token,
        locked_until=delivery.locked_until,
        expires_at=None if delivery.expires_at >= NEVER else delivery.expires_at,
        session_id=message.session_id,
        partition_key=message.partition_key,
        state=state if state in ("deferred", "scheduled") else "active",
        dead_letter_reason=delivery.dead_letter_reason,
        dead_letter_description=delivery.dead_letter_description,
        dead_letter_source=delivery.dead_letter_source,
        content_type=message.content_type,
        time_to_live=message.time_to_live,
        scheduled_enqueue_time=message.scheduled_enqueue_time,
        application_properties=delivery.application_properties,
        partition=delivery.partition,
        correlation_id=message.correlation_id,
        subject=message.subject,
        to=message.to,
        reply_to=message.reply_to,
        reply_to_session_id=message.reply_to_session_id,
        raw=raw,
    )


class ReferenceTarget(Target):
    name = "reference"
    capabilities = CAPABILITIES

    def __init__(
        self,
        namespace: Namespace | None = None,
        choose: Callable[[list[str]], str] | None = None,
    ) -> None:
        self.namespace = namespace if namespace is not None else Namespace(clock=VirtualClock())
        self.choose = choose

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": "reference (in process, virtual clock)"}

    # ------------------------------------------------------------- management
    def create_queue(self, name: str, **properties: Any) -> str:
        return self.namespace.create_queue(name, **properties).path

    def create_topic(self, name: str, **properties: Any) -> str:
        return self.namespace.create_topic(name, **properties).path

    def create_subscription(self, topic_path: str, name: str, **properties: Any) -> str:
        return self.namespace.create_subscription(topic_path, name, **properties).path

    def delete_entity(self, path: str) -> None:
        self.namespace.delete(path)

    def entity_counts(self, path: str) -> dict[str, Any]:
        return self.namespace.runtime_info(path)

    def update_entity(self, path: str, **properties: Any) -> None:
        self.namespace.update(path, **properties)

    def premium_namespace(self, partition_count: int) -> "ReferenceTarget":
        target = ReferenceTarget(Namespace(sku="premium", partition_count=partition_count), self.choose)
        target.capabilities = self.capabilities
        return target

    def basic_namespace(self) -> "ReferenceTarget":
        target = ReferenceTarget(Namespace(sku="basic"), self.choose)
        target.capabilities = self.capabilities
        return target

    def make_partition_unavailable(self, path: str, partition: int) -> None:
        self.namespace.make_partition_unavailable(path, partition)

    def make_partition_available(self, path: str, partition: int) -> None:
        self.namespace.make_partition_available(path, partition)
    def describe_entity(self, path: str) -> dict[str, Any]:
        return asdict(self.namespace.describe(path))

    def add_rule(self, subscription_path: str, rule: Rule) -> None:
        self.namespace.add_rule(subscription_path, rule)

    def remove_rule(self, subscription_path: str, name: str) -> None:
        self.namespace.remove_rule(subscription_path, name)

    def list_rules(self, subscription_path: str) -> list[Rule]:
        return self.namespace.list_rules(subscription_path)

    # ------------------------------------------------------- paired namespaces
    def namespace_name(self) -> str:
        return self.namespace.name

    def paired_namespace(self) -> "ReferenceTarget":
        # a namespace of its own name: a backlog path named after the wrong one is then told apart (PAIR-BACKLOG-001)
        target = ReferenceTarget(Namespace(f"{self.namespace.name}-secondary", clock=VirtualClock()), self.choose)
        target.capabilities = self.capabilities
        return target

    def share_clock(self, other: Target) -> None:
        """Both namespaces run on one virtual clock (the later of the two)."""
        if not isinstance(other, ReferenceTarget) or other.namespace.clock is self.namespace.clock:
            return
        shared = other.namespace.clock
        shared.advance_to(self.namespace.clock.now)
        self.namespace.clock = shared

    # ---------------------------------------------------------------- clients
    def sender(self, path: str) -> Handle:
        self.namespace.resolve(path)  # unknown entity: fail now, as attaching a link does
        return Handle("sender", path, private=self.namespace.connect())

    def receiver(self, path: str, mode: str = PEEK_LOCK) -> Handle:
        self.namespace.resolve(path)
        return Handle("receiver", path, mode=mode, private=self.namespace.connect())

    def accept_session(self, path: str, session_id: str | None = None, mode: str = PEEK_LOCK, max_wait: int | None = None) -> Handle:
        ns = self.namespace
        conn = ns.connect()
        deadline = ns.clock.now + (self.empty_wait if max_wait is None else max_wait)
        while True:
            try:
                sid, _ = ns.accept_session(conn, path, session_id, choose=self.choose)
                return Handle("receiver", path, mode=mode, session_id=sid, private=conn)
            except ServiceBusError as error:
                if error.code is not ErrorCode.TIMEOUT or not self._wait_for_change(deadline):
                    raise

    def close_handle(self, handle: Handle) -> None:
        if handle.session_id is not None:
            try:
                self.namespace.release_session(handle.private, handle.path, handle.session_id)
            except ServiceBusError:
                pass  # the session lock was already gone
        self.namespace.close_connection(handle.private)

    def drop_connection(self, handle: Handle) -> None:
        self.namespace.drop_connection(handle.private)
        handle.private = self.namespace.connect()  # the client reconnects on its next use

    # ---------------------------------------------------------- fault injection
    def make_unavailable(self, path: str, code: str = "entity-unavailable", transient: bool | None = None) -> None:
        self.namespace.make_unavailable(path, ErrorCode(code), transient)

    def make_available(self, path: str) -> None:
        self.namespace.make_available(path)

    # -------------------------------------------------------------- messaging
    def send(self, sender: Handle, messages: Sequence[Message], batch: bool = False) -> list[int | None]:
        if batch:
            return self.namespace.send(sender.private, sender.path, list(messages))
        out: list[int | None] = []
        for message in messages:
            out.extend(self.namespace.send(sender.private, sender.path, message))
        return out

    def send_transaction(self, sends: Sequence[tuple[Handle, Sequence[Message]]]) -> list[list[int | None]]:
        if not sends:
            return []
        conn = sends[0][0].private
        return self.namespace.send_transaction(conn, [(handle.path, list(messages)) for handle, messages in sends])

    def transaction_client(self) -> "ReferenceTransactionalClient":
        return ReferenceTransactionalClient(self)

    def send_presettled(self, sender: Handle, messages: Sequence[Message]) -> None:
        for message in messages:
            self.namespace.send_presettled(sender.private, sender.path, message)

    def schedule(self, sender: Handle, messages: Sequence[Message], enqueue_time: int) -> list[int]:
        return self.namespace.schedule(sender.private, sender.path, list(messages), enqueue_time)

    def cancel_scheduled(self, sender: Handle, sequence_numbers: Sequence[int]) -> None:
        self.namespace.cancel_scheduled(sender.private, sender.path, sequence_numbers)

    def receive(self, receiver: Handle, max_count: int = 1, max_wait: int | None = None) -> list[Received]:
        ns = self.namespace
        deadline = ns.clock.now + (self.empty_wait if max_wait is None else max_wait)
        while True:
            found = ns.receive(receiver.private, receiver.path, max_count, receiver.mode, receiver.session_id)
            if found:
                return [received_from(d) for d in found]
            if not self._wait_for_change(deadline):
                return []

    def _wait_for_change(self, deadline: int) -> bool:
        """Jump to the next instant something may change, if before ``deadline``."""
        clock = self.namespace.clock
        due = self.namespace.next_due()
        if due is not None and clock.now < due <= deadline:
            clock.advance_to(due)
            return True
        clock.advance_to(deadline)
        return False

    def receive_deferred(self, receiver: Handle, sequence_numbers: Sequence[int]) -> list[Received]:
        found = self.namespace.receive_deferred(
            receiver.private, receiver.path, sequence_numbers, receiver.mode, receiver.session_id
        )
        return [received_from(d) for d in found]

    def peek(self, receiver: Handle, max_count: int = 1, from_sequence_number: int = 1) -> list[Received]:
        found = self.namespace.peek(receiver.path, from_sequence_number, max_count, receiver.session_id)
        return [received_from(d) for d in found]

    def _token(self, message: Received) -> int:
        if message.lock_token is None:
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION,
                "The message was received in receive-and-delete mode (or peeked) and carries no lock to settle.",
            )
        return message.lock_token

    def complete(self, receiver: Handle, message: Received) -> None:
        self.namespace.complete(receiver.private, receiver.path, self._token(message))

    def abandon(self, receiver: Handle, message: Received, properties: dict | None = None) -> None:
        self.namespace.abandon(receiver.private, receiver.path, self._token(message), properties)

    def defer(self, receiver: Handle, message: Received, properties: dict | None = None) -> None:
        self.namespace.defer(receiver.private, receiver.path, self._token(message), properties)

    def dead_letter(self, receiver: Handle, message: Received, reason: str | None = None, description: str | None = None,
                    properties: dict | None = None) -> None:
        self.namespace.dead_letter(receiver.private, receiver.path, self._token(message), reason, description, properties)

    def renew_lock(self, receiver: Handle, message: Received) -> int:
        return self.namespace.renew_lock(receiver.private, receiver.path, self._token(message))

    # --------------------------------------------------------------- sessions
    def _session(self, receiver: Handle) -> str:
        if receiver.session_id is None:
            raise ServiceBusError(ErrorCode.INVALID_OPERATION, "not a session receiver")
        return receiver.session_id

    def renew_session_lock(self, receiver: Handle) -> int:
        return self.namespace.renew_session_lock(receiver.private, receiver.path, self._session(receiver))

    def get_session_state(self, receiver: Handle) -> bytes | None:
        return self.namespace.get_session_state(receiver.private, receiver.path, self._session(receiver))

    def set_session_state(self, receiver: Handle, state: bytes | None) -> None:
        self.namespace.set_session_state(receiver.private, receiver.path, self._session(receiver), state)

    # ------------------------------------------------------------------- time
    def now(self) -> int:
        return self.namespace.clock.now

    def wait(self, duration: int) -> None:
        self.namespace.clock.advance(duration)


class ReferenceTransactionalClient(TransactionalClient):
    """A model connection driving the namespace's transaction coordinator (sbreference/transactions.py)."""

    def __init__(self, target: ReferenceTarget) -> None:
        self.target = target
        self.namespace = target.namespace
        self.conn = self.namespace.connect()

    def receive(self, path: str, max_count: int = 1, max_wait: int | None = None) -> list[Received]:
        handle = Handle("receiver", path, mode=PEEK_LOCK, private=self.conn)
        return self.target.receive(handle, max_count, max_wait)

    def declare(self) -> int:
        return self.namespace.transactions.declare(self.conn)

    def send(self, txn: Any, path: str, messages: Sequence[Message], via: str | None = None) -> None:
        self.namespace.transactions.send(self.conn, txn, path, list(messages), via=via)

    def settle(self, txn: Any, path: str, message: Received, outcome: str, reason: str | None = None, description: str | None = None) -> None:
        self.namespace.transactions.settle(self.conn, txn, outcome, path, message.lock_token, reason, description)

    def discharge(self, txn: Any, commit: bool) -> None:
        self.namespace.transactions.discharge(self.conn, txn, fail=not commit)

    def drop(self) -> None:
        self.namespace.drop_connection(self.conn)

    def close(self) -> None:
        self.namespace.drop_connection(self.conn)
