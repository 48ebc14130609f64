"""``PairedFactory``: one MessagingFactory paired with a secondary namespace, carrying out
what the machines of ``sbreference.paired`` decide against two ``Target``s (see the package's
docstring for time and the syphon)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterable, Sequence

from sbreference import ErrorCode, Message, ServiceBusError
from sbreference.paired import (
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
from sbreference.paired.failover import Choose

from ..targets import PEEK_LOCK, Handle, Received, Target

from .metering import Meter, MeteredTarget, Operation, sdk_retries_off, without_sdk_retries

#: Messages the syphon takes from a backlog queue in one receive.
SYPHON_BATCH = 32
#: On real-time targets, how often (ms) the syphon looks at its backlog queues between the
#: machines' own instants (see PairedFactory).
SYPHON_POLL = 1000


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
    """A MessagingFactory on ``primary`` paired with ``secondary`` for send availability.

    The machines it carries out are class attributes, so that another client's logic (or a
    deliberately broken one: tests/mutants_paired.py) can swap one and keep the loop."""

    failover_class: type[FailoverSender] = FailoverSender
    syphon_class: type[Syphon] = Syphon
    pair_class: type[FactoryPair] = FactoryPair

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
        self.failover = self.failover_class(self.options, self.primary_namespace)
        self.pair = self.pair_class(hosts_syphon=self.options.enable_syphon)
        self.syphon: Syphon | None = None
        self.pings: list[PingRecord] = []
        self.sends: list[SendRecord] = []
        self._senders: dict[tuple[str, str], Handle] = {}
        self._receivers: dict[int, Handle] = {}
        # destination (lower case) -> (until when the syphon sends it nothing, the sequence number
        # of the backlog message it refused)
        self._refused: dict[str, tuple[int, int | None]] = {}
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
        self.provision_backlog_queues()
        if self.options.enable_syphon:
            self.syphon = self.syphon_class(self.options.backlog_queue_count, self.now())
        self.paired = True
        self.work()
        return self

    def provision_backlog_queues(self) -> None:
        """Create the backlog queues missing in the secondary namespace, as described
        (PAIR-BACKLOG-002); leave the others as they are (PAIR-BACKLOG-003..005)."""
        secondary = self.targets[SECONDARY]
        existing = [path for path in self.backlog_paths if self._exists(secondary, path)]
        for create in plan_backlog_queues(self.backlog_paths, existing):
            secondary.create_queue_at(create.path, **create.properties)  # fixed paths, no suffix

    def start_syphon(self) -> None:
        """Run the syphon in this process from now on (EnableSyphon, PAIR-OPT-003)."""
        if self.syphon is None:
            self.syphon = self.syphon_class(self.options.backlog_queue_count, self.now())
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
        until = decision.handle.locked_until
        # the lock as this client reads it may end up to the clock tolerance later at the broker
        # (zero on the model's clock): looking again at the very instant could find it still held
        lag = int(getattr(secondary, "clock_tolerance", 0))
        retry = None if until is None else until + lag
        destination = decision.destination.lower()
        refused_until, refused_message = self._refused.get(destination, (-1, None))
        if refused_message is not None and refused_message == decision.handle.sequence_number:
            refused_until = -1  # the refused message itself is back: its lock has ended
        if self.now() < refused_until:
            # the destination refused a message whose lock has not ended yet: this one is not
            # sent there before then either; it stays locked and comes back as that one does
            # (through an SDK a refused send costs the half second of a refused attach)
            self.syphon.forward_failed(decision.backlog_index, retry)
            return
        try:
            self._send(Send(PRIMARY, decision.destination, decision.message))
        except ServiceBusError:
            self.syphon.forward_failed(decision.backlog_index, retry)
            if retry is not None:
                self._refused[destination] = (retry, decision.handle.sequence_number)
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
    late_round = False
    while True:
        began = clock.now()
        for factory in factories:
            factory.work()
        now = clock.now()
        if now >= end:
            # In real time a round of work can carry the clock past an instant that fell due while
            # it ran, before the end (a ping due while the syphon waited on a receive): one more
            # round does it, as a client on its own timers would have. In virtual time a round
            # takes no time, so nothing falls due inside one.
            if not late_round and any(began < d <= end for d in (f.next_due() for f in factories) if d is not None):
                late_round = True
                continue
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
