"""Transactions: one state machine per transaction, and the coordinator that holds them.

Sources (cited by the TXN-* clauses in sbspec/clauses/transactions.toml):

- Microsoft, "Overview of Service Bus transaction processing"
  (learn.microsoft.com/azure/service-bus-messaging/service-bus-transactions): the operations a
  transaction may hold (send, complete, abandon, dead-letter, defer, renew lock; receives are not
  part of it), the single-entity scope and the transfer ("send via") entity, the 2-minute timeout
  whose timer starts with the first operation, and no transactions on the Basic tier.
- Microsoft, "AMQP 1.0 in Azure Service Bus and Event Hubs protocol guide", section Transactions:
  declare / discharge on the coordinator link (fail=true is a rollback), transactional sends and
  dispositions carrying ``transactional-state``.
- OASIS AMQP 1.0 part 4 (transactions): the ``transaction-error`` conditions (unknown-id, rollback,
  timeout); work on a transaction that does not exist is an error; discharging ends it.
- The partitioning seed (PART-TXN-001..004): on partitioned entities every transactional message
  needs a partition key, and all share one.
- Microsoft, "Service Bus quotas": at most 100 messages in one transaction.

A transaction buffers its work. Nothing it holds is visible to anyone (a message sent in it is not
in the entity; a message completed in it is still locked by its receiver) until it is committed;
the commit checks every buffered operation again and then applies all of them, or none
(TXN-ATOM-001). A rollback, a timeout or the loss of the connection discards the work: the entity
is as if the transaction had never run (TXN-ROLLBACK-001). At commit the model applies the
settlements in the order they were enlisted, then the sends, each as it was sent, in order.

Renewing a lock inside a transaction is allowed (TXN-OPS-001) and takes effect at once: a renewal
has nothing to undo, and a lock that lapsed before the commit would make the commit fail.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from .entity import counted
from .errors import ErrorCode, ServiceBusError
from .message import Message, message_size
from .status import refuse_send, sends_disabled
from .transfer import transfer_dead_letter_queue

if TYPE_CHECKING:  # pragma: no cover
    from .namespace import Namespace

#: TXN-TIMEOUT-001: "A transaction times out after 2 minutes. The transaction timer starts when the
#: first operation in the transaction starts."
TRANSACTION_TIMEOUT = 2 * 60 * 1000
#: Messages per transaction (Service Bus quotas).
MAX_TRANSACTION_MESSAGES = 100
#: Undischarged transactions one connection may hold, and the bytes their sends may buffer: bounds of
#: ours (Service Bus documents none), so one client cannot make the broker hold unbounded work.
MAX_ACTIVE_PER_CONNECTION = 100
MAX_BUFFERED_BYTES_PER_CONNECTION = 64 * 1024 * 1024

ACTIVE = "active"
COMMITTED = "committed"
ROLLED_BACK = "rolled-back"
TIMED_OUT = "timed-out"

#: The settlements a transaction may hold (TXN-OPS-001), by the name the Namespace gives them.
SETTLEMENTS = ("complete", "abandon", "dead_letter", "defer")


@dataclass
class Operation:
    """One piece of buffered work: a send, or a settlement of a locked message."""

    kind: str  # "send" or one of SETTLEMENTS
    path: str  # the entity path as the client named it (for a send: the destination)
    messages: tuple[Message, ...] = ()
    lock_token: int | None = None
    reason: str | None = None
    description: str | None = None


@dataclass
class Transaction:
    """TXN-*: a transaction's life: declared (active), then committed, rolled back or timed out."""

    txn_id: int
    conn: int
    state: str = ACTIVE
    started_at: int | None = None  # the instant of the first operation (TXN-TIMEOUT-001)
    scope: str | None = None  # the one top-level entity the transaction works against (TXN-SCOPE-001)
    scope_entity: Any = None  # that entity when the first operation named it: deleted since, no commit (TXN-VIA-004)
    operations: list[Operation] = field(default_factory=list)

    def timed_out(self, now: int) -> bool:
        return self.started_at is not None and now - self.started_at >= TRANSACTION_TIMEOUT

    def message_count(self) -> int:
        return sum(len(op.messages) for op in self.operations)

    def buffered_bytes(self) -> int:
        return sum(message_size(m) for op in self.operations for m in op.messages)

    def holds_lock(self, path_key: str, lock_token: int) -> bool:
        return any(op.lock_token == lock_token and scope_key(op.path) == path_key for op in self.operations if op.kind != "send")


def scope_key(path: str) -> str:
    """The top-level entity a path belongs to: ``q`` for ``q`` and ``q/$DeadLetterQueue``, ``t`` for
    ``t/Subscriptions/s`` (a transaction receiving from a subscription is scoped to its topic, which
    is why "the transfer entity must be a topic" there)."""
    return path.strip("/").lower().split("/", 1)[0]


def unknown(txn_id: Any) -> ServiceBusError:
    return ServiceBusError(ErrorCode.TRANSACTION_UNKNOWN, f"Transaction {txn_id!r} is unknown or already discharged.", transient=False)


class Transactions:
    """The coordinator of one namespace: declares transactions and discharges them.

    Every method takes the connection it is called on; a transaction belongs to the connection
    that declared it (AMQP: a transaction id is valid on its own connection only).
    """

    def __init__(self, namespace: "Namespace") -> None:
        self.namespace = namespace
        self._ids = itertools.count(1).__next__
        self.active: dict[int, Transaction] = {}
        self.by_connection: dict[int, set[int]] = {}

    # -------------------------------------------------------------- declare and discharge

    def declare(self, conn: int) -> int:
        """TXN-DECL-001: a new transaction id; Basic namespaces have no transactions (TXN-TIER-001)."""
        if self.namespace.sku == "basic":
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION, "The Basic tier of Service Bus doesn't support transactions.", transient=False
            )
        self._sweep(conn)
        if len(self.by_connection.get(conn, ())) >= MAX_ACTIVE_PER_CONNECTION:
            raise ServiceBusError(
                ErrorCode.QUOTA_EXCEEDED,
                f"This connection already holds {MAX_ACTIVE_PER_CONNECTION} undischarged transactions; discharge one first.",
                transient=False,
            )
        txn = Transaction(self._ids(), conn)
        self.active[txn.txn_id] = txn
        self.by_connection.setdefault(conn, set()).add(txn.txn_id)
        return txn.txn_id

    def discharge(self, conn: int, txn_id: int, fail: bool) -> dict[str, list[int | None]]:
        """fail=True rolls back (TXN-ROLLBACK-001); fail=False commits all or nothing (TXN-ATOM-001).

        Either way the transaction ends: discharging it again is an unknown id (TXN-ERR-001).
        A transaction past its timeout cannot commit (TXN-TIMEOUT-001). A commit returns the sequence
        numbers its sends were given, per destination path, in the order they were sent.
        """
        txn = self._get(conn, txn_id)
        self._forget(txn)
        now = self.namespace.clock.now
        if fail:
            txn.state = ROLLED_BACK
            return {}
        if txn.timed_out(now):
            txn.state = TIMED_OUT
            raise ServiceBusError(
                ErrorCode.TRANSACTION_TIMEOUT,
                f"Transaction {txn_id} timed out: more than {TRANSACTION_TIMEOUT // 1000} s since its first operation; it was rolled back.",
                transient=False,
            )
        try:
            self._check_all(txn)
        except ServiceBusError as cause:
            txn.state = ROLLED_BACK
            raise ServiceBusError(
                ErrorCode.TRANSACTION_ROLLBACK, f"Transaction {txn_id} was rolled back: {cause.text}", transient=False
            ) from cause
        committed = self._apply_all(txn)
        txn.state = COMMITTED
        return committed

    def drop_connection(self, conn: int) -> None:
        """A connection's transactions end with it, rolled back (nothing of them is applied)."""
        for txn_id in self.by_connection.pop(conn, set()):
            self.active.pop(txn_id).state = ROLLED_BACK

    def _forget(self, txn: Transaction) -> None:
        self.active.pop(txn.txn_id, None)
        ids = self.by_connection.get(txn.conn)
        if ids is not None:
            ids.discard(txn.txn_id)
            if not ids:
                del self.by_connection[txn.conn]

    def _sweep(self, conn: int) -> None:
        """A connection's transactions past their timeout are rolled back (TXN-TIMEOUT-001)."""
        now = self.namespace.clock.now
        for txn_id in list(self.by_connection.get(conn, ())):
            txn = self.active[txn_id]
            if txn.timed_out(now):
                self._forget(txn)
                txn.state = TIMED_OUT

    # ------------------------------------------------------------------ transactional work

    def send(self, conn: int, txn_id: int, path: str, messages: Sequence[Message] | Message, via: str | None = None) -> None:
        """TXN-VIS-001: buffered until commit. ``via`` is the transfer entity (TXN-VIA-001): the send is
        scoped to it and the message goes on to ``path`` when the transaction commits."""
        batch = (messages,) if isinstance(messages, Message) else tuple(messages)
        if via is not None:  # the transfer entity exists and takes sends (TXN-VIA-005: a send via it is a send to it)
            transfer = self.namespace.sending_entity(via)
            refuse_send(transfer.kind, transfer.path, transfer.description.status)
        txn = self._enlist(conn, txn_id, via if via is not None else path)
        if txn.message_count() + len(batch) > MAX_TRANSACTION_MESSAGES:
            raise ServiceBusError(
                ErrorCode.QUOTA_EXCEEDED,
                # the text service-bus-quotas gives ("the calling code receives an exception with the message: ...")
                f"Can't send more than {MAX_TRANSACTION_MESSAGES} messages in a single transaction.",
                transient=False,
            )
        buffered = sum(self.active[t].buffered_bytes() for t in self.by_connection.get(conn, ()))
        adding = sum(message_size(m) for m in batch)
        if buffered + adding > MAX_BUFFERED_BYTES_PER_CONNECTION:
            raise ServiceBusError(
                ErrorCode.QUOTA_EXCEEDED,
                f"This connection's undischarged transactions would buffer more than {MAX_BUFFERED_BYTES_PER_CONNECTION} bytes.",
                transient=False,
            )
        candidate = txn.operations + [Operation("send", path, batch)]
        self._check_sends(candidate, txn.scope)
        txn.operations.append(candidate[-1])

    def settle(
        self,
        conn: int,
        txn_id: int,
        kind: str,
        path: str,
        lock_token: int,
        reason: str | None = None,
        description: str | None = None,
    ) -> None:
        """TXN-VIS-002: a settlement takes effect at commit; until then the message stays locked
        by its receiver. The lock must be held now, and settled once per transaction."""
        if kind not in SETTLEMENTS:
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"{kind!r} cannot be part of a transaction (one of {SETTLEMENTS})")
        txn = self._enlist(conn, txn_id, path)
        store = self.namespace.receiving_store(path)
        store.locked_message(self.namespace.clock.now, conn, lock_token)
        if txn.holds_lock(scope_key(path), lock_token):
            raise ServiceBusError(
                ErrorCode.MESSAGE_LOCK_LOST, f"The message with lock token {lock_token} was already settled in transaction {txn_id}."
            )
        txn.operations.append(Operation(kind, path, lock_token=lock_token, reason=reason, description=description))

    def settle_all(
        self, conn: int, txn_id: int, kind: str, path: str, lock_tokens: Sequence[int],
        reason: str | None = None, description: str | None = None,
    ) -> None:
        """Several settlements in one request (a management ``update-disposition``): all enlisted or none."""
        txn = self._get(conn, txn_id)
        before = len(txn.operations)
        try:
            for token in lock_tokens:
                self.settle(conn, txn_id, kind, path, token, reason, description)
        except ServiceBusError:
            del txn.operations[before:]
            raise

    def renew_lock(self, conn: int, txn_id: int, path: str, lock_token: int) -> int:
        """TXN-OPS-001: renewing a lock is allowed in a transaction; it takes effect at once."""
        self._enlist(conn, txn_id, path)
        return self.namespace.renew_lock(conn, path, lock_token)

    # ----------------------------------------------------------------------------- helpers

    def _get(self, conn: int, txn_id: int) -> Transaction:
        txn = self.active.get(txn_id)
        if txn is None or txn.conn != conn:  # another connection's transaction is unknown here
            raise unknown(txn_id)
        return txn

    def _enlist(self, conn: int, txn_id: int, scope_path: str) -> Transaction:
        """The checks every operation passes: the transaction exists on this connection, has not
        timed out (the timer starts with its first operation), and stays on one entity."""
        txn = self._get(conn, txn_id)
        now = self.namespace.clock.now
        if txn.timed_out(now):
            self._forget(txn)
            txn.state = TIMED_OUT
            raise ServiceBusError(
                ErrorCode.TRANSACTION_TIMEOUT, f"Transaction {txn_id} timed out and was rolled back.", transient=False
            )
        key = scope_key(scope_path)
        if txn.scope is None:
            txn.scope = key
            txn.scope_entity = self.namespace.entities.get(key)
        elif txn.scope != key:
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION,
                f"Transaction {txn_id} works against '{txn.scope}'; operations on '{key}' in the same transaction must be "
                f"sent via '{txn.scope}' (a transfer), as a transaction is scoped to one entity.",
                transient=False,
            )
        if txn.started_at is None:
            txn.started_at = now
        return txn

    def _check_sends(self, operations: Sequence[Operation], scope: str | None) -> None:
        """Every buffered send would be accepted as it was sent (sizes, sessions: each send is its
        own message or batch; a send straight to the transaction's entity, not via it, only while that
        entity takes sends: SETTLE-STATUS-001), their sum fits in the entity (large messages counted as
        SETTLE-TIER-008 says), and on partitioned entities all transactional messages carry one
        partition key (PART-TXN-001/002/003). A send via the entity to a destination whose sends are disabled
        is not checked against it, nor against a destination's size: it will go to the transfer dead-letter
        queue (TXN-VIA-002)."""
        now = self.namespace.clock.now
        by_path: dict[str, list[Message]] = {}
        via_paths: set[str] = set()
        for op in operations:
            if op.kind == "send":
                entity = self.namespace.sending_entity(op.path)
                if scope_key(op.path) == scope:
                    refuse_send(entity.kind, entity.path, entity.description.status)
                elif sends_disabled(entity.description.status):
                    continue
                else:
                    via_paths.add(op.path)
                try:
                    entity.check(list(op.messages), now)
                except ServiceBusError as error:
                    if error.code is not ErrorCode.QUOTA_EXCEEDED or op.path not in via_paths:
                        raise
                by_path.setdefault(op.path, []).extend(op.messages)
        keys: set[str] = set()
        for path, messages in by_path.items():
            entity = self.namespace.sending_entity(path)
            if entity.partitioned:
                keys |= transactional_partition_keys(entity, messages)
                one_partition_key(keys)
            total = sum(counted(message_size(m), entity.large_times) for m in messages)
            if entity.bytes + total > entity.max_bytes and path not in via_paths:
                raise ServiceBusError(
                    ErrorCode.QUOTA_EXCEEDED,
                    f"The maximum entity size has been reached or exceeded for {entity.kind} '{entity.path}'.",
                    transient=False,
                )

    def _check_all(self, txn: Transaction) -> None:
        """Before anything is applied: the transaction's entity still the one it worked against (TXN-VIA-004),
        every lock still held, every send still acceptable."""
        now = self.namespace.clock.now
        if txn.scope_entity is not None and self.namespace.entities.get(str(txn.scope)) is not txn.scope_entity:
            raise ServiceBusError(
                ErrorCode.ENTITY_NOT_FOUND, f"The transaction's entity '{txn.scope_entity.path}' was deleted.", transient=False
            )
        sends_via = any(op.kind == "send" and scope_key(op.path) != txn.scope for op in txn.operations)
        if txn.scope_entity is not None and sends_via:  # TXN-VIA-005: its transfer entity still takes sends
            refuse_send(txn.scope_entity.kind, txn.scope_entity.path, txn.scope_entity.description.status)
        for op in txn.operations:
            if op.kind != "send":
                self.namespace.receiving_store(op.path).locked_message(now, txn.conn, op.lock_token)
        self._check_sends(txn.operations, txn.scope)

    def _apply_all(self, txn: Transaction) -> dict[str, list[int | None]]:
        ns = self.namespace
        for op in txn.operations:
            if op.kind == "dead_letter":
                ns.dead_letter(txn.conn, op.path, op.lock_token, op.reason, op.description)
            elif op.kind != "send":
                getattr(ns, op.kind)(txn.conn, op.path, op.lock_token)
        committed: dict[str, list[int | None]] = {}
        for op in txn.operations:  # each send as it was sent (a message or a batch), in order
            if op.kind == "send":
                entity = ns.sending_entity(op.path)
                if scope_key(op.path) != txn.scope and self._stranded(txn, entity, op):
                    continue
                entity.accessed_at = ns.clock.now  # a send (SETTLE-ENT-004, SETTLE-IDLE-002)
                committed.setdefault(op.path, []).extend(entity.accept(list(op.messages), ns.clock.now))
        return committed

    def _stranded(self, txn: Transaction, destination: Any, op: Operation) -> bool:
        """TXN-VIA-002: "If the destination queue or topic is disabled, the message is sent to the transfer dead-letter
        queue (TDLQ) of the source queue. If the destination queue or entity exceeds the entity size, the message is
        sent to a TDLQ of the source queue" (service-bus-dead-letter-queues): there the send via ends, with the
        destination's error as its dead-letter reason and description (reading), receivable (TXN-VIA-003)."""
        now = self.namespace.clock.now
        try:
            refuse_send(destination.kind, destination.path, destination.description.status)
            destination.check(list(op.messages), now)
        except ServiceBusError as error:
            if error.code not in (ErrorCode.ENTITY_UNAVAILABLE, ErrorCode.QUOTA_EXCEEDED):
                raise
            via = txn.scope_entity if txn.scope_entity is not None else self.namespace.sending_entity(str(txn.scope))
            tdlq = transfer_dead_letter_queue(via, via.path, via.next_lock_token)
            for message in op.messages:
                tdlq.strand(message, now, str(error.code), error.text)
            return True
        return False


def transactional_partition_keys(entity: Any, messages: Sequence[Message]) -> set[str]:
    """PART-TXN-001/002: the partition keys of messages sent to a partitioned entity in a
    transaction; each needs one, and they must all be the same (so one transaction cannot reach
    several sessions there, PART-TXN-003; non-partitioned entities have no such rule, PART-TXN-004)."""
    from .partitioning import partition_key

    keys = set()
    for message in messages:
        key = partition_key(message, entity.description.requires_duplicate_detection)
        if key is None:
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION,
                f"A message sent to partitioned entity '{entity.path}' within a transaction must have a partition key "
                "(SessionId, PartitionKey, or MessageId with duplicate detection).",
            )
        keys.add(key)
        entity.allowed_partitions(key)
    return one_partition_key(keys)


def one_partition_key(keys: set[str]) -> set[str]:
    if len(keys) > 1:
        raise ServiceBusError(
            ErrorCode.INVALID_OPERATION,
            "All messages sent to partitioned entities within one transaction must share one partition key "
            f"(found {sorted(keys)}); one transaction cannot reach several sessions of a partitioned entity.",
        )
    return keys
