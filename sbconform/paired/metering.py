"""Metering: ``MeteredTarget`` records every send and receive through a target in a ``Meter``,
for the cost clauses (PAIR-COST-001, PAIR-PING-006) and for what a scenario wants to see of
what the client sent (PAIR-PING-001); and the SDK's own retries, switched off under the paired
client (which decides itself what a failed send means)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from sbreference import Message, ServiceBusError

from ..targets import Handle, Received, Target, TargetWrapper
from ..targets.base import unwrap as _unwrap


# ----------------------------------------------------------------- metering


@dataclass(frozen=True)
class Operation:
    """One billed operation the client issued (attempted) through a metered target."""

    time: int
    role: str  # "primary" or "secondary"
    kind: str  # "send" or "receive"
    path: str
    messages: tuple[Message | Received, ...]
    ok: bool
    who: str = ""  # who issued it (a factory's name, "application"...), if the meter was told
    started: int | None = None  # when the call began (``time`` is when its outcome was known)

    @property
    def message_ids(self) -> list[str | None]:
        return [m.message_id for m in self.messages]


@dataclass
class Meter:
    operations: list[Operation] = field(default_factory=list)

    def for_message(self, message_id: str) -> list[Operation]:
        return [op for op in self.operations if op.ok and message_id in op.message_ids]

    def by(self, who: str) -> list[Operation]:
        return [op for op in self.operations if op.who == who]


class MeteredTarget(TargetWrapper):
    """A target whose sends and receives are recorded in a ``Meter``; everything else
    passes through unchanged.

    Its senders attach their link at the first send, as the SDKs do: a sender made for an
    entity that is unavailable at that moment fails on send, and that failed send is
    recorded like any other.
    """

    def __init__(self, target: Target, role: str, meter: Meter, who: str = "") -> None:
        super().__init__(target)
        self.role = role
        self.meter = meter
        self.who = who

    def _record(self, kind: str, path: str, messages: Sequence[Any], ok: bool, started: int | None = None) -> None:
        self.meter.operations.append(Operation(self.inner.now(), self.role, kind, path, tuple(messages), ok, self.who, started))

    # ---------------------------------------------------------- senders
    def sender(self, path: str) -> Handle:
        handle = Handle("sender", path)
        try:
            with sdk_retries_off(self.inner):
                handle.private = without_sdk_retries(self.inner.sender(path))
        except ServiceBusError:
            handle.private = None  # attached at the first send
        return handle

    def _attached(self, sender: Handle) -> Handle:
        if sender.private is None:
            with sdk_retries_off(self.inner):
                sender.private = self.inner.sender(sender.path)
            without_sdk_retries(sender)
        return sender.private

    def send(self, sender: Handle, messages: Sequence[Message], batch: bool = False) -> list[int | None]:
        out: list[int | None] = []
        self._metered_send(sender, messages, lambda inner: out.extend(self.inner.send(inner, messages, batch) or [None] * len(messages)))
        return out

    def send_concurrently(self, sender: Handle, messages: Sequence[Message]) -> None:
        self._metered_send(sender, messages, lambda inner: self.inner.send_concurrently(inner, messages))

    def send_presettled(self, sender: Handle, messages: Sequence[Message]) -> None:
        self._metered_send(sender, messages, lambda inner: self.inner.send_presettled(inner, messages))

    def schedule(self, sender: Handle, messages: Sequence[Message], enqueue_time: int) -> list[int]:
        out: list[int] = []
        self._metered_send(sender, messages, lambda inner: out.extend(self.inner.schedule(inner, messages, enqueue_time)))
        return out

    def cancel_scheduled(self, sender: Handle, sequence_numbers: Sequence[int]) -> None:
        self.inner.cancel_scheduled(self._attached(sender), sequence_numbers)

    def _metered_send(self, sender: Handle, messages: Sequence[Message], operation: Callable[[Handle], Any]) -> None:
        started = self.inner.now()
        try:
            operation(self._attached(sender))
        except ServiceBusError:
            self._record("send", sender.path, messages, False, started)
            raise
        self._record("send", sender.path, messages, True, started)

    def close_handle(self, handle: Handle) -> None:
        if handle.kind == "sender":
            if handle.private is not None:
                self.inner.close_handle(handle.private)
            return
        self.inner.close_handle(handle)

    # -------------------------------------------------------- receivers
    def receive(self, receiver: Handle, max_count: int = 1, max_wait: int | None = None) -> list[Received]:
        try:
            found = self.inner.receive(receiver, max_count, max_wait)
        except ServiceBusError:
            self._record("receive", receiver.path, (), False)
            raise
        self._record("receive", receiver.path, found, True)
        return found


def without_sdk_retries(handle: Any) -> Any:
    """The paired client decides itself what a failed send means (sbreference/paired/transience.py)
    and never retries a send: an SDK sender under ``handle`` (azure-servicebus: ``_config.retry_total``)
    is told not to retry either. Otherwise the Python SDK, which calls entity-disabled retryable,
    would retry it with back-off before the failover sender sees the failure, and the failover
    timer would start late. Anything else is left as it is."""
    inner, seen = handle, 0
    while inner is not None and seen < 8:
        config = getattr(inner, "_config", None)
        if config is not None and hasattr(config, "retry_total"):
            config.retry_total = 0
            break
        inner, seen = getattr(inner, "private", None), seen + 1
    return handle


@contextlib.contextmanager
def sdk_retries_off(target: Any) -> Iterator[None]:
    """While a sender is made (its link attached), the SDK client under ``target`` does not
    retry either: attaching to an unavailable entity fails once, at once."""
    inner, config = target, None
    for _ in range(8):
        client_config = getattr(getattr(inner, "client", None), "_config", None)
        if client_config is not None and hasattr(client_config, "retry_total"):
            config = client_config
            break
        inner = getattr(inner, "inner", None) or getattr(inner, "_target", None) or getattr(inner, "target", None)
        if inner is None:
            break
    if config is None:
        yield
        return
    saved, config.retry_total = config.retry_total, 0
    try:
        yield
    finally:
        config.retry_total = saved


def unwrap(target: Any) -> Target:
    """Through metering wrappers only (a recording wrapper stays: what it records is the test's trace)."""
    return _unwrap(target, MeteredTarget)
