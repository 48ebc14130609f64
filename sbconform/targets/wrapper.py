"""``TargetWrapper``: a target that is another target, observed or altered. Every call goes
to ``inner`` unchanged unless a subclass overrides it, so recording
(``trace.recorder.RecordingTarget``), metering (``paired.MeteredTarget``) and the mutants
(``tests/mutants.py``) write only what they observe or break; ``unwrap`` finds the target
under a stack of them."""

from __future__ import annotations

from typing import Any, Sequence

from sbreference import Message

from .base import PEEK_LOCK, Handle, Received, Target, TransactionalClient


class TargetWrapper(Target):
    """A target that is another target, observed or altered: every call goes to ``inner``
    unchanged unless a subclass overrides it. Recording (``trace.recorder.RecordingTarget``),
    metering (``paired.MeteredTarget``) and the mutants (``tests/mutants.py``) override only
    what they observe or break.

    ``name``, ``capabilities``, ``lacking``, ``empty_wait`` and ``operation_timeout`` are the
    inner target's unless the subclass sets its own; any other attribute a target has of its
    own (``clock_tolerance``, ``namespace``...) is read through. ``unwrap()`` is the target
    at the bottom of a stack of wrappers.
    """

    _FORWARDED = ("name", "capabilities", "lacking", "empty_wait", "operation_timeout")

    def __init__(self, inner: Target) -> None:
        self.inner = inner
        own = {a for cls in type(self).__mro__[: type(self).__mro__.index(TargetWrapper)] for a in vars(cls)}
        for attr in self._FORWARDED:
            if attr not in own:
                setattr(self, attr, getattr(inner, attr))

    def __getattr__(self, name: str) -> Any:  # only called for what the wrapper does not have
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def unwrap(self) -> Target:
        """The wrapped target itself, through any number of wrappers."""
        return unwrap(self.inner)

    # -------------------------------------------------------------- lifecycle
    def open(self) -> None:
        self.inner.open()

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> dict[str, Any]:  # named as certified: a mutant is not 'reference'
        return {**self.inner.describe(), "name": self.name}

    # ------------------------------------------------------------- management
    def create_queue(self, name: str, **properties: Any) -> str:
        return self.inner.create_queue(name, **properties)

    def create_topic(self, name: str, **properties: Any) -> str:
        return self.inner.create_topic(name, **properties)

    def create_subscription(self, topic_path: str, name: str, **properties: Any) -> str:
        return self.inner.create_subscription(topic_path, name, **properties)

    def delete_entity(self, path: str) -> None:
        self.inner.delete_entity(path)

    def entity_counts(self, path: str) -> dict[str, Any]:
        return self.inner.entity_counts(path)

    def update_entity(self, path: str, **properties: Any) -> None:
        self.inner.update_entity(path, **properties)

    def premium_namespace(self, partition_count: int) -> Target:
        return self.inner.premium_namespace(partition_count)

    def basic_namespace(self) -> Target:
        return self.inner.basic_namespace()

    def describe_entity(self, path: str) -> dict[str, Any]:
        return self.inner.describe_entity(path)

    def namespace_name(self) -> str:
        return self.inner.namespace_name()

    def share_clock(self, other: Target) -> None:
        self.inner.share_clock(unwrap(other))

    # ---------------------------------------------------------------- clients
    def sender(self, path: str) -> Handle:
        return self.inner.sender(path)

    def receiver(self, path: str, mode: str = PEEK_LOCK) -> Handle:
        return self.inner.receiver(path, mode)

    def accept_session(self, path: str, session_id: str | None = None, mode: str = PEEK_LOCK, max_wait: int | None = None) -> Handle:
        return self.inner.accept_session(path, session_id, mode, max_wait)

    def close_handle(self, handle: Handle) -> None:
        self.inner.close_handle(handle)

    def drop_connection(self, handle: Handle) -> None:
        self.inner.drop_connection(handle)

    # ---------------------------------------------------------- fault injection
    def make_unavailable(self, path: str, code: str = "entity-unavailable", transient: bool | None = None) -> None:
        self.inner.make_unavailable(path, code, transient)

    def make_available(self, path: str) -> None:
        self.inner.make_available(path)

    def make_partition_unavailable(self, path: str, partition: int) -> None:
        self.inner.make_partition_unavailable(path, partition)

    def make_partition_available(self, path: str, partition: int) -> None:
        self.inner.make_partition_available(path, partition)

    # -------------------------------------------------------------- messaging
    def send(self, sender: Handle, messages: Sequence[Message], batch: bool = False) -> list[int | None]:
        return self.inner.send(sender, messages, batch)

    def send_concurrently(self, sender: Handle, messages: Sequence[Message]) -> list[int | None] | None:
        return self.inner.send_concurrently(sender, messages)

    def send_transaction(self, sends: Sequence[tuple[Handle, Sequence[Message]]]) -> list[list[int | None]] | None:
        return self.inner.send_transaction(sends)

    def transaction_client(self) -> TransactionalClient:
        return self.inner.transaction_client()

    def paired_namespace(self) -> Target:
        return self.inner.paired_namespace()

    def create_queue_at(self, path: str, **properties: Any) -> str:
        return self.inner.create_queue_at(path, **properties)

    def add_rule(self, subscription_path: str, rule: Any) -> None:
        self.inner.add_rule(subscription_path, rule)

    def remove_rule(self, subscription_path: str, name: str) -> None:
        self.inner.remove_rule(subscription_path, name)

    def list_rules(self, subscription_path: str) -> list[Any]:
        return self.inner.list_rules(subscription_path)

    def send_presettled(self, sender: Handle, messages: Sequence[Message]) -> None:
        self.inner.send_presettled(sender, messages)

    def schedule(self, sender: Handle, messages: Sequence[Message], enqueue_time: int) -> list[int]:
        return self.inner.schedule(sender, messages, enqueue_time)

    def cancel_scheduled(self, sender: Handle, sequence_numbers: Sequence[int]) -> None:
        self.inner.cancel_scheduled(sender, sequence_numbers)

    def receive(self, receiver: Handle, max_count: int = 1, max_wait: int | None = None) -> list[Received]:
        return self.inner.receive(receiver, max_count, max_wait)

    def receive_deferred(self, receiver: Handle, sequence_numbers: Sequence[int]) -> list[Received]:
        return self.inner.receive_deferred(receiver, sequence_numbers)

    def peek(self, receiver: Handle, max_count: int = 1, from_sequence_number: int = 1) -> list[Received]:
        return self.inner.peek(receiver, max_count, from_sequence_number)

    def complete(self, receiver: Handle, message: Received) -> None:
        self.inner.complete(receiver, message)

    def abandon(self, receiver: Handle, message: Received, properties: dict | None = None) -> None:
        self.inner.abandon(receiver, message, **_props(properties))

    def defer(self, receiver: Handle, message: Received, properties: dict | None = None) -> None:
        self.inner.defer(receiver, message, **_props(properties))

    def dead_letter(self, receiver: Handle, message: Received, reason: str | None = None, description: str | None = None,
                    properties: dict | None = None) -> None:
        self.inner.dead_letter(receiver, message, reason, description, **_props(properties))

    def renew_lock(self, receiver: Handle, message: Received) -> int:
        return self.inner.renew_lock(receiver, message)

    # --------------------------------------------------------------- sessions
    def renew_session_lock(self, receiver: Handle) -> int:
        return self.inner.renew_session_lock(receiver)

    def get_session_state(self, receiver: Handle) -> bytes | None:
        return self.inner.get_session_state(receiver)

    def set_session_state(self, receiver: Handle, state: bytes | None) -> None:
        self.inner.set_session_state(receiver, state)

    # ------------------------------------------------------------------- time
    def now(self) -> int:
        return self.inner.now()

    def wait(self, duration: int) -> None:
        self.inner.wait(duration)


def unwrap(target: Any, kind: type = TargetWrapper) -> Any:
    """The target under any wrappers of ``kind`` (default: every ``TargetWrapper``);
    anything else as it is."""
    while isinstance(target, kind):
        target = target.inner
    return target


def _props(properties: dict | None) -> dict:
    """``properties=`` passed on only when given: a wrapped target written before SETTLE-MOD-001
    (an outside implementation) keeps working for every other settlement."""
    return {"properties": properties} if properties else {}
