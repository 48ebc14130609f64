"""The Target interface: what every broker under test must offer the scenarios.

A target is one broker reached one way: the in-process reference model, the reference
served over AMQP and driven through the azure-servicebus SDK, Microsoft's emulator in a
container, a real Azure namespace. Scenarios, stateful tests and traces only ever talk
to this interface, so the same scenario runs everywhere.

Conventions:
- Times and durations are whole milliseconds. ``now()`` is the target's clock (virtual on
  the reference, wall time since the target opened elsewhere); ``wait(ms)`` lets time pass.
- Outgoing messages are ``sbreference.Message``; what comes back is ``Received``.
- Every failure is a ``sbreference.ServiceBusError`` with a code from ``sbreference.ErrorCode``:
  targets translate what their broker or SDK raised into that vocabulary.
- Each sender and receiver has a connection of its own (as the SDK does), so dropping
  one receiver's connection affects only its locks.
- A target declares ``capabilities`` (names from sbspec/vocabulary.toml). Scenarios that
  need one it lacks are skipped with that reason, never silently.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from sbreference import ErrorCode, Message, Rule, ServiceBusError

PEEK_LOCK = "peek-lock"
RECEIVE_AND_DELETE = "receive-and-delete"


@dataclass(frozen=True)
class Received:
    """A message as a receiver (or a peek) saw it. ``delivery_count`` is the .NET value."""

    message_id: str | None
    body: bytes
    sequence_number: int
    enqueued_time: int | None
    delivery_count: int | None
    lock_token: Any = None
    locked_until: int | None = None
    expires_at: int | None = None
    session_id: str | None = None
    partition_key: str | None = None
    state: str = "active"  # "active", "deferred" or "scheduled" (x-opt-message-state)
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None
    dead_letter_source: str | None = None
    content_type: str | None = None
    time_to_live: int | None = None
    scheduled_enqueue_time: int | None = None
    application_properties: Mapping[str, Any] = field(default_factory=dict)
    partition: int | None = None  # where observed; None if the target cannot tell
    correlation_id: str | None = None
    subject: str | None = None
    to: str | None = None
    reply_to: str | None = None
    reply_to_session_id: str | None = None
    raw: Any = field(default=None, compare=False, repr=False)  # the target's own object


@dataclass(eq=False)
class Handle:
    """A sender or receiver: one link on a connection of its own."""

    kind: str  # "sender" or "receiver"
    path: str
    mode: str = PEEK_LOCK
    session_id: str | None = None
    id: int = field(default_factory=itertools.count(1).__next__)
    private: Any = field(default=None, repr=False)

    def __hash__(self) -> int:
        return self.id


class TransactionalClient(ABC):
    """One client connection that declares transactions and does transactional work on it
    (capability ``transactions``): receives in peek-lock mode, then sends and settles inside a
    transaction, and discharges it. Errors are ``ServiceBusError`` as everywhere (a failed discharge
    is ``transaction-rollback``, ``transaction-timeout`` or ``transaction-unknown``)."""

    @abstractmethod
    def receive(self, path: str, max_count: int = 1, max_wait: int | None = None) -> list[Received]:
        """Peek-lock receive on this connection (receives are not part of a transaction)."""

    @abstractmethod
    def declare(self) -> Any:
        """A new transaction on this connection; returns its id."""

    @abstractmethod
    def send(self, txn: Any, path: str, messages: Sequence[Message], via: str | None = None) -> None:
        """Send in the transaction to ``path``; with ``via``, through that transfer entity (send via)."""

    @abstractmethod
    def settle(self, txn: Any, path: str, message: Received, outcome: str, reason: str | None = None, description: str | None = None) -> None:
        """``outcome`` is complete, abandon, defer or dead_letter, of a message this client received."""

    @abstractmethod
    def discharge(self, txn: Any, commit: bool) -> None:
        """Commit (all or nothing) or roll back."""

    @abstractmethod
    def drop(self) -> None:
        """The connection is lost abruptly (no AMQP close)."""

    @abstractmethod
    def close(self) -> None: ...


class Target(ABC):
    """The operations a scenario may ask of a broker."""

    name = "abstract"
    capabilities: frozenset[str] = frozenset()
    #: capability -> why this target lacks it (appended to the skip reason of scenarios needing it)
    lacking: Mapping[str, str] = {}
    #: how long a receive waits before concluding there is no message
    empty_wait = 1000
    #: the client operation timeout this target uses (PART-TIMEOUT-001: over 15 s; 60 s recommended)
    operation_timeout = 60_000

    # -------------------------------------------------------------- lifecycle
    def open(self) -> None:
        """Get ready (connect, start a server...). Called once before use."""

    def close(self) -> None:
        """Release everything. Safe to call twice."""

    def __enter__(self) -> "Target":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self) -> dict[str, Any]:
        """What the report says about this target."""
        return {"name": self.name, "capabilities": sorted(self.capabilities)}

    def require(self, capability: str) -> None:
        if capability not in self.capabilities:
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION, f"target {self.name!r} lacks the capability {capability!r}"
            )

    # ------------------------------------------------------------- management
    @abstractmethod
    def create_queue(self, name: str, **properties: Any) -> str:
        """Create a queue; returns the path to use (targets may add a unique suffix).
        ``properties`` are ``sbreference.EntityDescription`` field names."""

    @abstractmethod
    def create_topic(self, name: str, **properties: Any) -> str: ...

    @abstractmethod
    def create_subscription(self, topic_path: str, name: str, **properties: Any) -> str:
        """Returns the subscription's path, ``<topic>/Subscriptions/<name>``."""

    @abstractmethod
    def delete_entity(self, path: str) -> None: ...

    @abstractmethod
    def entity_counts(self, path: str) -> dict[str, Any]:
        """Counts of ``active``, ``deferred``, ``scheduled`` and ``dead_letter`` messages,
        and ``availability_status`` (``available``, or ``limited`` while a partition is down)."""

    def update_entity(self, path: str, **properties: Any) -> None:
        """Change an entity's description (capability ``entity-management``)."""
        self.require("entity-management")
        raise NotImplementedError

    def premium_namespace(self, partition_count: int) -> "Target":
        """A fresh, open target for a partitioned Premium namespace with that many
        partitions (capability ``premium-namespace``). The caller closes it."""
        self.require("premium-namespace")
        raise NotImplementedError

    def basic_namespace(self) -> "Target":
        """A fresh, open target for a Basic-tier namespace (capability ``basic-namespace``).
        The caller closes it."""
        self.require("basic-namespace")
        raise NotImplementedError

    def describe_entity(self, path: str) -> dict[str, Any]:
        """The entity's description as ``sbreference.EntityDescription`` field names and
        values (capability ``entity-management``)."""
        self.require("entity-management")
        raise NotImplementedError

    # ------------------------------------------------------------------ rules
    def add_rule(self, subscription_path: str, rule: Rule) -> None:
        """Add a rule (``sbreference.Rule``: a name, a filter, an optional action) to a
        subscription (capability ``rules``). An invalid SQL filter or action, or a name
        already taken, is an error (RULES-SQL-014, RULES-RULE-004)."""
        self.require("rules")
        raise NotImplementedError

    def remove_rule(self, subscription_path: str, name: str) -> None:
        self.require("rules")
        raise NotImplementedError

    def list_rules(self, subscription_path: str) -> list[Rule]:
        """The subscription's rules, in the order they were added."""
        self.require("rules")
        raise NotImplementedError

    # -------------------------------------------------------- paired namespaces
    def namespace_name(self) -> str:
        """The namespace's name (``contoso`` for contoso.servicebus.windows.net): the
        first segment of the backlog queue paths when it is a pairing's primary."""
        return self.name

    def paired_namespace(self) -> "Target":
        """A fresh, open target on another namespace of the same kind, to be a pairing's
        secondary (capability ``paired-namespaces``). The caller closes it."""
        self.require("paired-namespaces")
        raise NotImplementedError

    def create_queue_at(self, path: str, **properties: Any) -> str:
        """Create a queue at exactly ``path``, as given (backlog queues have fixed paths,
        PAIR-BACKLOG-001); targets that suffix the names a test gives must not here."""
        return self.create_queue(path, **properties)

    def share_clock(self, other: "Target") -> None:
        """Make this target's clock ``other``'s, so two namespaces paired in a test see
        the same time. Targets on wall-clock time share it already: nothing to do."""

    # ---------------------------------------------------------------- clients
    @abstractmethod
    def sender(self, path: str) -> Handle: ...

    @abstractmethod
    def receiver(self, path: str, mode: str = PEEK_LOCK) -> Handle: ...

    @abstractmethod
    def accept_session(self, path: str, session_id: str | None = None, mode: str = PEEK_LOCK, max_wait: int | None = None) -> Handle:
        """A receiver holding the lock on ``session_id``, or on the next available
        session when it is ``None``; its ``session_id`` says which."""

    @abstractmethod
    def close_handle(self, handle: Handle) -> None: ...

    def drop_connection(self, handle: Handle) -> None:
        """Sever the handle's connection abruptly (capability ``drop-connection``).
        The handle stays usable: its next operation reconnects."""
        self.require("drop-connection")
        raise NotImplementedError

    # ---------------------------------------------------------- fault injection
    def make_unavailable(self, path: str, code: str = "entity-unavailable", transient: bool | None = None) -> None:
        """Capability ``entity-outage``: every operation on the entity fails with ``code``
        (an ``ErrorCode`` value) until ``make_available``; what it holds is kept."""
        self.require("entity-outage")
        raise NotImplementedError

    def make_available(self, path: str) -> None:
        self.require("entity-outage")
        raise NotImplementedError

    def make_partition_unavailable(self, path: str, partition: int) -> None:
        """Capability ``partition-outage``: one partition's store goes down, keeping its messages."""
        self.require("partition-outage")
        raise NotImplementedError

    def make_partition_available(self, path: str, partition: int) -> None:
        self.require("partition-outage")
        raise NotImplementedError

    # -------------------------------------------------------------- messaging
    @abstractmethod
    def send(self, sender: Handle, messages: Sequence[Message], batch: bool = False) -> list[int | None]:
        """Send messages one by one (each its own settled transfer), or as one batch.
        Returns one entry per message: its sequence number, or ``None`` where the target
        cannot tell (or the broker dropped it as a duplicate). Traces record them."""

    def send_concurrently(self, sender: Handle, messages: Sequence[Message]) -> list[int | None] | None:
        """Start every send before awaiting any (pipelined sends, SETTLE-SEND-003).
        Returns what ``send`` returns, or None."""
        return self.send(sender, messages)

    def send_transaction(self, sends: Sequence[tuple[Handle, Sequence[Message]]]) -> list[list[int | None]] | None:
        """Send everything in one transaction, committed together (capability ``transactions``).
        Returns each send's sequence numbers as ``send`` does, or None if the target cannot tell."""
        self.require("transactions")
        raise NotImplementedError

    def transaction_client(self) -> TransactionalClient:
        """A connection that can declare transactions (capability ``transactions``)."""
        self.require("transactions")
        raise NotImplementedError

    def send_presettled(self, sender: Handle, messages: Sequence[Message]) -> None:
        self.require("presettled-send")
        raise NotImplementedError

    @abstractmethod
    def schedule(self, sender: Handle, messages: Sequence[Message], enqueue_time: int) -> list[int]: ...

    @abstractmethod
    def cancel_scheduled(self, sender: Handle, sequence_numbers: Sequence[int]) -> None: ...

    @abstractmethod
    def receive(self, receiver: Handle, max_count: int = 1, max_wait: int | None = None) -> list[Received]:
        """Up to ``max_count`` messages; waits at most ``max_wait`` ms (default
        ``empty_wait``) for the first one, and may return fewer than are available."""

    @abstractmethod
    def receive_deferred(self, receiver: Handle, sequence_numbers: Sequence[int]) -> list[Received]: ...

    @abstractmethod
    def peek(self, receiver: Handle, max_count: int = 1, from_sequence_number: int = 1) -> list[Received]: ...

    @abstractmethod
    def complete(self, receiver: Handle, message: Received) -> None: ...

    # ``properties``: application properties to modify as the message is settled
    # (SETTLE-MOD-001; capability ``settle-with-properties``)
    @abstractmethod
    def abandon(self, receiver: Handle, message: Received, properties: dict | None = None) -> None: ...

    @abstractmethod
    def defer(self, receiver: Handle, message: Received, properties: dict | None = None) -> None: ...

    @abstractmethod
    def dead_letter(self, receiver: Handle, message: Received, reason: str | None = None, description: str | None = None,
                    properties: dict | None = None) -> None: ...

    @abstractmethod
    def renew_lock(self, receiver: Handle, message: Received) -> int:
        """Returns the new locked-until."""

    # --------------------------------------------------------------- sessions
    @abstractmethod
    def renew_session_lock(self, receiver: Handle) -> int: ...

    @abstractmethod
    def get_session_state(self, receiver: Handle) -> bytes | None: ...

    @abstractmethod
    def set_session_state(self, receiver: Handle, state: bytes | None) -> None: ...

    # ------------------------------------------------------------------- time
    @abstractmethod
    def now(self) -> int: ...

    @abstractmethod
    def wait(self, duration: int) -> None: ...


# A target wrapping another (recording, metering, the mutants) lives in ``wrapper``; importable
# from here as before. Imported last: ``wrapper`` builds on the interface above.
from .wrapper import TargetWrapper, unwrap  # noqa: E402, F401
