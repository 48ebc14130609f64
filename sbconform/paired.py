"""Paired namespaces, driven against two targets: the imperative shell of ``reference.paired``.

``PairedFactory`` is one MessagingFactory paired with a secondary namespace
(``PairNamespaceAsync``). It holds the pure machines of ``reference.paired`` and carries
out what they decide against two ``Target``s, a primary and a secondary namespace. It has
no logic of its own beyond that loop, so the same client logic drives the reference model
here and can drive two real namespaces.

Time: the factory acts when it is given control (``send``, ``work``, ``run``). ``run``
lets time pass on the targets and wakes up at every instant the machines name (a failover
timer, a ping, the end of a syphon poll, a lock coming back, the 5-second close/fault
rule). On virtual-time targets that is exact. A long poll is observed with receives that do
not wait (a sequential driver cannot hold ten 15-minute receives open at once); the receive
calls the syphon is billed for are the ones its machine counts (``Syphon.receive_calls``).

``MeteredTarget`` wraps a target and records every send and receive through it, for the
cost clauses (PAIR-COST-001, PAIR-PING-006) and for what a scenario wants to see of what the
client sent (PAIR-PING-001).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import random
import threading
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterable, Iterator, Sequence

from reference import ErrorCode, Message, ServiceBusError
from reference.paired import (
    PRIMARY,
    SECONDARY,
    DeadLetter,
    FactoryPair,
    Fail,
    FailoverSender,
    Forward,
    PairedNamespaceOptions,
    Send,
    Syphon,
    plan_backlog_queues,
)
from reference.paired.failover import Choose

from .targets import PEEK_LOCK, Handle, Received, Target, TargetWrapper
from .targets.base import unwrap as _unwrap

#: Messages the syphon takes from a backlog queue in one receive.
SYPHON_BATCH = 32
#: On real-time targets, how often (ms) the syphon looks at its backlog queues between the
#: machines' own instants (see PairedFactory).
SYPHON_POLL = 1000


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
        self._target = target
        self.role = role
        self.meter = meter
        self.who = who

    def _record(self, kind: str, path: str, messages: Sequence[Any], ok: bool, started: int | None = None) -> None:
        self.meter.operations.append(Operation(self._target.now(), self.role, kind, path, tuple(messages), ok, self.who, started))

    # ---------------------------------------------------------- senders
    def sender(self, path: str) -> Handle:
        handle = Handle("sender", path)
        try:
            with sdk_retries_off(self._target):
                handle.private = without_sdk_retries(self._target.sender(path))
        except ServiceBusError:
            handle.private = None  # attached at the first send
        return handle

    def _attached(self, sender: Handle) -> Handle:
        if sender.private is None:
            with sdk_retries_off(self._target):
                sender.private = self._target.sender(sender.path)
            without_sdk_retries(sender)
        return sender.private

    def send(self, sender: Handle, messages: Sequence[Message], batch: bool = False) -> list[int | None]:
        out: list[int | None] = []
        self._metered_send(sender, messages, lambda inner: out.extend(self._target.send(inner, messages, batch) or [None] * len(messages)))
        return out

    def send_concurrently(self, sender: Handle, messages: Sequence[Message]) -> None:
        self._metered_send(sender, messages, lambda inner: self._target.send_concurrently(inner, messages))

    def send_presettled(self, sender: Handle, messages: Sequence[Message]) -> None:
        self._metered_send(sender, messages, lambda inner: self._target.send_presettled(inner, messages))

    def schedule(self, sender: Handle, messages: Sequence[Message], enqueue_time: int) -> list[int]:
        out: list[int] = []
        self._metered_send(sender, messages, lambda inner: out.extend(self._target.schedule(inner, messages, enqueue_time)))
        return out

    def cancel_scheduled(self, sender: Handle, sequence_numbers: Sequence[int]) -> None:
        self._target.cancel_scheduled(self._attached(sender), sequence_numbers)

    def _metered_send(self, sender: Handle, messages: Sequence[Message], operation: Callable[[Handle], Any]) -> None:
        started = self._target.now()
        try:
            operation(self._attached(sender))
        except ServiceBusError:
            self._record("send", sender.path, messages, False, started)
            raise
        self._record("send", sender.path, messages, True, started)

    def close_handle(self, handle: Handle) -> None:
        if handle.kind == "sender":
            if handle.private is not None:
                self._target.close_handle(handle.private)
            return
        self._target.close_handle(handle)

    # -------------------------------------------------------- receivers
    def receive(self, receiver: Handle, max_count: int = 1, max_wait: int | None = None) -> list[Received]:
        try:
            found = self._target.receive(receiver, max_count, max_wait)
        except ServiceBusError:
            self._record("receive", receiver.path, (), False)
            raise
        self._record("receive", receiver.path, found, True)
        return found


def without_sdk_retries(handle: Any) -> Any:
    """The paired client decides itself what a failed send means (reference/paired/transience.py)
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
        inner = getattr(inner, "_target", None) or getattr(inner, "target", None)
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


# ----------------------------------------------------------------- messages


#: What a sender sets on a message, all of which a ``Received`` reports back.
SENDER_FIELDS = tuple(f.name for f in fields(Message) if f.init and f.name != "application_properties")


def message_of(received: Received) -> Message:
    """What a sender would have to send to reproduce ``received`` (its user properties)."""
    values = {name: getattr(received, name) for name in SENDER_FIELDS}
    return Message(**values, application_properties=dict(received.application_properties))


# ------------------------------------------------------------------ factory


@dataclass(frozen=True)
class PingRecord:
    time: int
    entity: str
    ok: bool
    message: Message


@dataclass(frozen=True)
class SendRecord:
    """Where one application message went: ``namespace`` and ``path``, or the error."""

    time: int
    client: int
    entity: str
    message: Message
    namespace: str | None
    path: str | None
    error: ServiceBusError | None = None


@dataclass(eq=False)
class PairedClient:
    """A QueueClient or TopicClient created from a paired factory."""

    factory: "PairedFactory"
    path: str
    id: int = field(default_factory=itertools.count(1).__next__)

    def send(self, messages: Iterable[Message] | Message) -> list[str]:
        batch = [messages] if isinstance(messages, Message) else list(messages)
        return [self.factory.send(self, message) for message in batch]


class PairedFactory:
    """A MessagingFactory on ``primary`` paired with ``secondary`` for send availability."""

    def __init__(
        self,
        primary: Target,
        secondary: Target,
        options: PairedNamespaceOptions | None = None,
        choose: Choose | None = None,
        syphon_batch: int = SYPHON_BATCH,
        syphon_poll: int | None = None,
    ) -> None:
        self.options = options if options is not None else PairedNamespaceOptions()
        self.syphon_batch = syphon_batch
        # A long poll is observed with receives that do not wait: on a virtual clock at the
        # instants the machines name; in real time also every ``syphon_poll`` ms, so that a
        # message arriving in a backlog queue (or a lock expiring early) is seen about when a
        # held 15-minute receive would have returned it.
        real_time = "virtual-time" not in getattr(primary, "capabilities", ())
        self.syphon_poll = syphon_poll if syphon_poll is not None else (SYPHON_POLL if real_time else None)
        secondary.share_clock(primary)
        self.targets = {PRIMARY: primary, SECONDARY: secondary}
        self.choose = choose
        self.primary_namespace = primary.namespace_name()
        self.failover = FailoverSender(self.options, self.primary_namespace)
        self.pair = FactoryPair(hosts_syphon=self.options.enable_syphon)
        self.syphon: Syphon | None = None
        self.pings: list[PingRecord] = []
        self.sends: list[SendRecord] = []
        self._senders: dict[tuple[str, str], Handle] = {}
        self._receivers: dict[int, Handle] = {}
        self._retired: list[tuple[str, Handle]] = []  # handles of an ended factory, closed by dispose()
        self.failovers: list[tuple[int, str]] = []  # (when, entity): each failover, as the machine timed it
        self.paired = False

    @property
    def backlog_paths(self) -> list[str]:
        return self.failover.backlog_paths

    def now(self) -> int:
        return self.targets[PRIMARY].now()

    # ------------------------------------------------------------ pairing

    def pair_namespace(self) -> "PairedFactory":
        """PairNamespaceAsync: create the missing backlog queues (PAIR-BACKLOG-001..005),
        then start the syphon if this process runs it (PAIR-OPT-003)."""
        secondary = self.targets[SECONDARY]
        existing = [path for path in self.backlog_paths if self._exists(secondary, path)]
        for create in plan_backlog_queues(self.backlog_paths, existing):
            secondary.create_queue_at(create.path, **create.properties)  # fixed paths, no suffix
        if self.options.enable_syphon:
            self.syphon = Syphon(self.options.backlog_queue_count, self.now())
        self.paired = True
        self.work()
        return self

    def start_syphon(self) -> None:
        """Run the syphon in this process from now on (EnableSyphon, PAIR-OPT-003)."""
        if self.syphon is None:
            self.syphon = Syphon(self.options.backlog_queue_count, self.now())
        self.pair.hosts_syphon = True
        self.work()

    def stop_syphon(self) -> None:
        """Stop the syphon: nothing more is received from the backlog queues here."""
        self.syphon = None
        self.pair.hosts_syphon = False
        self.pair.deadline = None
        for index in list(self._receivers):
            self._retired.append((SECONDARY, self._receivers.pop(index)))

    def backlog_counts(self) -> dict[str, int]:
        """Messages waiting in each backlog queue (active ones), as the secondary reports them."""
        secondary = self.targets[SECONDARY]
        return {path: int(secondary.entity_counts(path).get("active", 0)) for path in self.backlog_paths}

    @staticmethod
    def _exists(target: Target, path: str) -> bool:
        try:
            target.entity_counts(path)
        except ServiceBusError as error:
            if error.code is ErrorCode.ENTITY_NOT_FOUND:
                return False
            raise
        return True

    def client(self, path: str) -> PairedClient:
        return PairedClient(self, path)

    # ------------------------------------------------------------ sending

    def send(self, client: PairedClient, message: Message) -> str:
        """Send one message through the failover sender; returns the path it went to
        (the entity's, or a backlog queue's). Raises what the caller must see."""
        if not self.paired:
            raise ServiceBusError(ErrorCode.INVALID_OPERATION, "The factory is not paired yet: call pair_namespace() first.")
        self.work()
        failover, entity = self.failover, client.path
        decision: Send | Fail = failover.start(client.id, entity, message, self.now(), self.choose)
        attempts = 0
        while isinstance(decision, Send):
            attempts += 1  # the primary, then each backlog queue at most once
            if attempts > self.options.backlog_queue_count + 1:
                raise AssertionError(f"the failover sender keeps answering {decision} for {message.message_id!r}")
            self.pair.require_open(decision.namespace)  # a closed factory is not an outage
            try:
                self._send(decision)
            except ServiceBusError as error:
                decision = failover.failed(client.id, entity, message, decision, error, self.now(), self.choose)
                self._log_failovers()
            else:
                failover.succeeded(entity, decision, self.now())
                self.sends.append(SendRecord(self.now(), client.id, entity, message, decision.namespace, decision.path))
                return decision.path
        self.sends.append(SendRecord(self.now(), client.id, entity, message, None, None, decision.error))
        raise decision.error

    def _send(self, send: Send) -> None:
        self.targets[send.namespace].send(self._sender(send.namespace, send.path), [send.message])

    def _sender(self, role: str, path: str) -> Handle:
        key = (role, path.lower())
        if key not in self._senders:
            with sdk_retries_off(self.targets[role]):
                self._senders[key] = without_sdk_retries(self.targets[role].sender(path))
        return self._senders[key]

    # --------------------------------------------------------------- time

    def next_due(self) -> int | None:
        times = [self.pair.next_due()]
        if self.pair.is_open(PRIMARY):
            times.append(self.failover.next_due())
        if self._syphon_running():
            times.append(self.syphon.next_due())
            if self.syphon_poll:
                times.append(self.now() + self.syphon_poll)
        times = [t for t in times if t is not None]
        return min(times) if times else None

    def work(self) -> None:
        """Do everything due now: the close/fault rule, failovers and pings, the syphon."""
        if not self.paired:
            return
        now = self.now()
        for fault in self.pair.tick(now):  # PAIR-CLOSE-002
            self._closed(fault.which)
        if self.pair.is_open(PRIMARY):
            pings = self.failover.tick(now)
            self._log_failovers()
            for ping in pings:
                self._ping(ping)
        if self._syphon_running():
            self._run_syphon()

    def _log_failovers(self) -> None:
        logged = {(t, e.lower()) for t, e in self.failovers}
        for health in self.failover.entities.values():
            at = health.failed_over_at
            if at is not None and (at, health.path.lower()) not in logged:
                self.failovers.append((at, health.path))

    def _ping(self, ping: Send) -> None:
        try:
            self._send(ping)
        except ServiceBusError:
            self.failover.ping_failed(ping.path, self.now())
            ok = False
        else:
            self.failover.ping_succeeded(ping.path, self.now())
            ok = True
        self.pings.append(PingRecord(self.now(), ping.path, ok, ping.message))

    def run(self, duration: int) -> None:
        run_together([self], duration)

    # ------------------------------------------------------------- syphon

    def _syphon_running(self) -> bool:
        return self.syphon is not None and self.pair.is_open(PRIMARY) and self.pair.is_open(SECONDARY)

    def _run_syphon(self) -> None:
        syphon = self.syphon
        syphon.tick(self.now())
        secondary = self.targets[SECONDARY]
        for index, path in enumerate(self.backlog_paths):
            while True:  # a poll that returns messages is followed at once by the next one
                try:
                    receiver = self._receivers.get(index) or self._receivers.setdefault(index, secondary.receiver(path, PEEK_LOCK))
                    found = secondary.receive(receiver, self.syphon_batch, 0)
                except ServiceBusError:
                    break  # the backlog queue is unavailable: its poll goes on
                if not found:
                    break  # the poll waits
                for decision in syphon.received(index, [(message_of(r), r) for r in found], self.now()):
                    self._move(receiver, decision)

    def _move(self, receiver: Handle, decision: Forward | DeadLetter) -> None:
        secondary = self.targets[SECONDARY]
        if isinstance(decision, DeadLetter):
            _quietly(secondary.dead_letter, receiver, decision.handle, decision.reason, decision.description)
            return
        try:
            self._send(Send(PRIMARY, decision.destination, decision.message))
        except ServiceBusError:
            self.syphon.forward_failed(decision.backlog_index, decision.handle.locked_until)
            return
        # If the lock was lost meanwhile (a slow broker), the message comes back and is moved
        # again: at least once, and duplicate detection on the destination drops the copy.
        _quietly(secondary.complete, receiver, decision.handle)

    # -------------------------------------------------------- close/fault

    def close(self, which: str | None = None) -> None:
        """Close the primary or the secondary factory, or both (``None``)."""
        self.work()
        for role in (PRIMARY, SECONDARY) if which is None else (which,):
            self.pair.closed(role, self.now())
            self._closed(role)

    def fault(self, which: str) -> None:
        """The factory ``which`` faults (its connection is gone)."""
        self.work()
        self.pair.faulted(which, self.now())
        self._closed(which)

    def state(self, which: str) -> str:
        return self.pair.state[which]

    def _closed(self, role: str) -> None:
        """The factory ``role`` ended: its senders (and the syphon's receivers) are no longer
        used. Closing links takes real time on a real broker (about half a second each through the
        SDK), which must not eat into the 5 seconds of PAIR-CLOSE-002: they are closed by
        ``dispose``."""
        for key in [k for k in self._senders if k[0] == role]:
            self._retired.append((role, self._senders.pop(key)))
        if role == SECONDARY:
            for index in list(self._receivers):
                self._retired.append((role, self._receivers.pop(index)))

    def dispose(self) -> None:
        """Close every link the factory opened (ended factories' included)."""
        for role in (PRIMARY, SECONDARY):
            if self.pair.is_open(role):
                self.pair.closed(role, self.now())
                self._closed(role)
        while self._retired:
            role, handle = self._retired.pop()
            _quietly(self.targets[role].close_handle, handle)


def _quietly(operation: Callable[..., Any], *args: Any) -> None:
    try:
        operation(*args)
    except ServiceBusError:
        pass


def run_together(factories: Sequence[PairedFactory], duration: int) -> None:
    """Let ``duration`` pass for several factories sharing one clock, each acting at every
    instant one of them names."""
    if duration < 0:
        raise ValueError(f"time cannot go backwards (run for {duration} ms)")
    if not factories:
        raise ValueError("run_together needs at least one factory")
    clock = factories[0].targets[PRIMARY]
    end = clock.now() + duration
    while True:
        for factory in factories:
            factory.work()
        now = clock.now()
        if now >= end:
            return
        dues = [d for d in (f.next_due() for f in factories) if d is not None and d > now]
        clock.wait(min([end, *dues]) - now)


def operations_per_moved_message(primary: Target, secondary: Target) -> list[Operation]:
    """PAIR-COST-001, found by running the model: the billed operations one message
    incurs on its way through a backlog queue to a receiver of its destination."""
    meter = Meter()
    primary, secondary = MeteredTarget(primary, PRIMARY, meter), MeteredTarget(secondary, SECONDARY, meter)
    factory = PairedFactory(primary, secondary, PairedNamespaceOptions(backlog_queue_count=1, failover_interval=0, enable_syphon=True))
    factory.pair_namespace()
    queue = primary.create_queue("cost")
    primary.make_unavailable(queue, "entity-unavailable", False)
    factory.client(queue).send(Message(b"cost", message_id="moved"))
    primary.make_available(queue)
    factory.run(factory.options.ping_primary_interval)
    receiver = primary.receiver(queue, PEEK_LOCK)
    received = primary.receive(receiver, 1)
    if [m.message_id for m in received] != ["moved"]:
        raise AssertionError(f"the moved message did not arrive: {received}")
    primary.complete(receiver, received[0])
    return meter.for_message("moved")


# ------------------------------------------------------------ for applications


@dataclass(frozen=True)
class SendAvailabilityPairedNamespaceOptions:
    """The pairing's options, by the seed's names (SendAvailabilityPairedNamespaceOptions), with
    its defaults: BacklogQueueCount 10, FailoverInterval 1 minute, PingPrimaryInterval once a
    minute, EnableSyphon false (an application that only sends leaves it off; one that receives
    runs the syphon)."""

    backlog_queue_count: int = 10
    failover_interval: dt.timedelta = dt.timedelta(minutes=1)
    ping_primary_interval: dt.timedelta = dt.timedelta(minutes=1)
    enable_syphon: bool = False

    def model(self) -> PairedNamespaceOptions:
        return PairedNamespaceOptions(
            backlog_queue_count=self.backlog_queue_count,
            failover_interval=_ms(self.failover_interval),
            ping_primary_interval=_ms(self.ping_primary_interval),
            enable_syphon=self.enable_syphon,
        )


def _ms(value: dt.timedelta | float | int) -> int:
    if isinstance(value, dt.timedelta):
        return round(value.total_seconds() * 1000)
    return round(float(value) * 1000)  # seconds


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def from_sdk_message(message: Any) -> Message:
    """An azure-servicebus ``ServiceBusMessage`` (or a ``reference.Message``) as the paired
    client's message. Times become Unix milliseconds: the application API's clock."""
    if isinstance(message, Message):
        return message
    body = message.body
    if isinstance(body, (bytes, bytearray)):
        data = bytes(body)
    elif isinstance(body, str):
        data = body.encode()
    else:
        data = b"".join(bytes(part) if not isinstance(part, str) else part.encode() for part in body)
    ttl = message.time_to_live
    scheduled = message.scheduled_enqueue_time_utc
    if scheduled is not None and scheduled.tzinfo is None:
        scheduled = scheduled.replace(tzinfo=dt.timezone.utc)
    props = {(k.decode() if isinstance(k, bytes) else str(k)): (v.decode() if isinstance(v, bytes) else v)
             for k, v in (message.application_properties or {}).items()}
    return Message(
        data,
        message_id=message.message_id,
        session_id=message.session_id,
        partition_key=message.partition_key,
        time_to_live=None if ttl is None else round(ttl.total_seconds() * 1000),
        scheduled_enqueue_time=None if scheduled is None else round((scheduled - _EPOCH).total_seconds() * 1000),
        content_type=message.content_type,
        correlation_id=message.correlation_id,
        subject=message.subject,
        to=message.to,
        reply_to=message.reply_to,
        application_properties=props,
    )


class PairedNamespaceSender:
    """A paired-namespace sender for ``azure-servicebus`` applications: the .NET SDK's send
    availability (``MessagingFactory.PairNamespaceAsync``), which no Python SDK has.

    Built from two connection strings (the primary and the secondary namespace), it creates the
    missing backlog queues in the secondary (PAIR-BACKLOG-*), sends through the failover sender
    (to the primary while it works; after FailoverInterval of failures, rewritten to a backlog
    queue), pings failed-over entities every PingPrimaryInterval and goes back to the primary
    once a ping is delivered, and, with the syphon on, moves backlog messages to their
    destinations. The decisions are the reference model's (``reference.paired``); whether a
    failure counts is decided from the broker's AMQP condition (``reference.paired.transience``),
    never from the SDK's retry flag. A background thread acts at the instants the machines name
    (pings, failover timers, syphon polls). Thread-safe: every operation holds one lock.

    Times in backlog messages (x-ms-scheduledenqueuetimeutc) are Unix milliseconds, and
    x-ms-timetolive is milliseconds: readable by any syphon using this class, not by .NET's.
    Entities are provisioned through ``$sbconform`` (``sbconform serve``) or, on Azure, the
    administration client (``control``, as for the SDK target).
    """

    def __init__(self, primary: Target, secondary: Target, options: SendAvailabilityPairedNamespaceOptions | None = None) -> None:
        self.options = options or SendAvailabilityPairedNamespaceOptions()
        self._lock = threading.RLock()
        self._targets = (primary, secondary)
        self.factory = PairedFactory(primary, secondary, self.options.model(), choose=random.SystemRandom().choice)
        self.factory.pair_namespace()
        getattr(secondary, "created", []).clear()  # backlog queues outlive this sender: never deleted at close
        self._clients: dict[str, PairedClient] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sbconform-paired", daemon=True)
        self._thread.start()

    @classmethod
    def from_connection_strings(
        cls,
        primary: str,
        secondary: str,
        options: SendAvailabilityPairedNamespaceOptions | None = None,
        control: str = "auto",
    ) -> "PairedNamespaceSender":
        from .targets.sdk import SdkTarget

        targets = []
        try:
            for connection_string in (primary, secondary):
                target = SdkTarget(connection_string=connection_string, control=control)
                target.open()
                # the clock is Unix milliseconds, so times written in a backlog queue mean the
                # same instant to a syphon in another process
                target.t0, target.t0_epoch_ms = time.monotonic() - time.time(), 0
                targets.append(target)
            return cls(targets[0], targets[1], options)
        except BaseException:
            for target in targets:
                target.close()
            raise

    # ------------------------------------------------------------ sending
    def send(self, entity: str, messages: Any) -> list[str]:
        """Send one message or several (``ServiceBusMessage`` or ``reference.Message``) to the
        queue or topic ``entity`` of the primary namespace. Returns where each went: ``entity``,
        or the backlog queue's path. Raises ``reference.ServiceBusError`` as the seed's client
        would (a failure within FailoverInterval, a client error, no backlog queue left)."""
        batch = list(messages) if isinstance(messages, (list, tuple)) else [messages]
        with self._lock:
            client = self._clients.get(entity) or self._clients.setdefault(entity, self.factory.client(entity))
            return [self.factory.send(client, from_sdk_message(m)) for m in batch]

    # ------------------------------------------------------------- syphon
    def start_syphon(self) -> None:
        with self._lock:
            self.factory.start_syphon()

    def stop_syphon(self) -> None:
        with self._lock:
            self.factory.stop_syphon()

    def backlog_counts(self) -> dict[str, int]:
        with self._lock:
            return self.factory.backlog_counts()

    def wait_for_empty_backlog(self, timeout: float) -> bool:
        """With the syphon on: wait until every backlog queue is empty (True) or ``timeout``
        seconds pass (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(self.backlog_counts().values()):
                return True
            time.sleep(0.2)
        return not any(self.backlog_counts().values())

    # -------------------------------------------------------------- close
    def _loop(self) -> None:
        delay = 0.0
        while not self._stop.wait(delay):
            with self._lock:
                try:
                    self.factory.work()
                except ServiceBusError:
                    pass  # the machines keep their state; the next instant tries again
                due = self.factory.next_due()
                now = self.factory.now()
            delay = 1.0 if due is None else min(max((due - now) / 1000, 0.02), 1.0)

    def close(self) -> None:
        """Stop the background work, close both factories (PAIR-CLOSE-*) and every link."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        with self._lock:
            try:
                self.factory.close()
            finally:
                self.factory.dispose()
                for target in self._targets:
                    target.close()

    def __enter__(self) -> "PairedNamespaceSender":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def set_entity_available(connection_string: str, entity: str, available: bool) -> None:
    """For demonstrations and tests against ``sbconform serve``: take an entity down (every
    operation on it fails with com.microsoft:entity-disabled) or bring it back, through the
    server's control node."""
    from .targets.sdk import SdkTarget

    target = SdkTarget(connection_string=connection_string, control="amqp")
    target.open()
    try:
        if available:
            target.make_available(entity)
        else:
            target.make_unavailable(entity, "entity-unavailable", False)
    finally:
        target.close()


__all__ = [
    "PairedNamespaceSender",
    "SendAvailabilityPairedNamespaceOptions",
    "from_sdk_message",
    "set_entity_available",
    "Meter",
    "MeteredTarget",
    "Operation",
    "PairedClient",
    "PairedFactory",
    "PingRecord",
    "SendRecord",
    "message_of",
    "operations_per_moved_message",
    "run_together",
    "unwrap",
]
