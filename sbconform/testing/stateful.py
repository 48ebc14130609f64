"""A differential state machine: any Target, in lockstep with the reference model.

``DifferentialMachine(make_target)`` is a Hypothesis ``RuleBasedStateMachine`` (a plain
class taking its target factory, as zarr-python's stateful tests take their store). Each step performs one operation on the target under test and the same
operation on a shadow ``sbreference.Namespace``, and accepts the target's outcome only if
the model allows it:

- a receive may return fewer messages than asked (SDKs do), but what it returns must be
  exactly the model's next messages, in order, with the model's delivery counts;
- a settlement, renewal or deferred receive must succeed where the model succeeds and
  fail with the same error code where the model fails;
- peeks must show the same messages, in the same order, in the same states.

On a partitioned queue (targets with ``partitions``) the model's choices follow the
target's: the partition a message landed in (read from its sequence number, as any
client can) must be one the model allows for it, and each message a receive returns
must be the head of one of the model's available partitions.

Time passes through the target. Targets on real time declare ``clock_tolerance``
(ms); the machine then never lets time stop within that distance of an instant where
the model's answer would change (a lock expiring), so outcomes stay decidable.

Rules are gated by the target's capabilities (dropping connections needs
``drop-connection``). Ship it to an outside implementation with::

    run_state_machine_as_test(lambda: DifferentialMachine(lambda: MyTarget(...)))

or, for a ``unittest`` class, ``TestMyTarget = differential_machine(lambda: MyTarget(...)).TestCase``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sbreference import PEEK_LOCK, RECEIVE_AND_DELETE, SECOND, ErrorCode, Message, Namespace, ServiceBusError, partition_of
from sbreference.operations import SETTLEMENTS
from sbreference.operations import settle as settle_op

from ..targets import Handle, Received, Target

_names = itertools.count(1)


@dataclass
class Pair:
    """One delivery, as the target and the model each know it."""

    message_id: str
    target_message: Received
    model_token: int
    receiver: int
    dead_letter: bool


class Divergence(AssertionError):
    """The target did something the model does not allow."""


def _outcome(operation: Callable[[], object]) -> tuple[object, ErrorCode | None]:
    try:
        return operation(), None
    except ServiceBusError as error:
        return None, error.code


class DifferentialMachine(RuleBasedStateMachine):
    """The target made by ``make_target`` in lockstep with a ``sbreference.Namespace``."""

    def __init__(self, make_target: Callable[[], Target], receivers: int = 3) -> None:
        super().__init__()
        self.receiver_count = receivers
        self.path: str | None = None  # the queue, once created
        self.target = make_target()
        self.target.open()
        self.capabilities = self.target.capabilities
        self.tolerance = getattr(self.target, "clock_tolerance", 0)
        #: how long one step may take on a real-time target (a receive may wait ``empty_wait``)
        self.step_allowance = getattr(self.target, "empty_wait", 0) + 1000 if self.tolerance > 0 else 0
        self.model = Namespace()
        self.t0 = self.target.now()
        self.pairs: list[Pair] = []
        self.counter = 0

    def teardown(self) -> None:
        try:
            if self.path is not None:
                for handle in [self.sender, *self.receivers, self.dead_letter_receiver]:
                    self.target.close_handle(handle)
                self.target.delete_entity(self.path)
        except ServiceBusError:
            pass
        finally:
            self.target.close()

    # --------------------------------------------------------------- set-up
    @initialize(lock_seconds=st.integers(2, 6), max_delivery_count=st.integers(1, 4), partitioned=st.booleans())
    def create_queue(self, lock_seconds: int, max_delivery_count: int, partitioned: bool) -> None:
        self.partitioned = partitioned and "partitions" in self.capabilities
        props = dict(lock_duration=lock_seconds * SECOND, max_delivery_count=max_delivery_count)
        if self.partitioned:
            props["enable_partitioning"] = True
        self.path = self.target.create_queue(f"diff{next(_names)}", **props)
        self.model.create_queue("q", **props)
        self.lock_duration = lock_seconds * SECOND
        self.sender = self.target.sender(self.path)
        self.model_sender = self.model.connect()
        self.receivers: list[Handle] = [self.target.receiver(self.path) for _ in range(self.receiver_count)]
        self.model_receivers = [self.model.connect() for _ in range(self.receiver_count)]
        self.dead_letter_receiver = self.target.receiver(self.path + "/$DeadLetterQueue")
        self.model_dead_letter_receiver = self.model.connect()
        self.rad = self.target.receiver(self.path, RECEIVE_AND_DELETE)
        self.model_rad = self.model.connect()

    # ---------------------------------------------------------------- time
    def _sync(self) -> None:
        """Bring the model's clock to the target's."""
        self.model.clock.advance_to(self.target.now() - self.t0)

    def _safe_delay(self, wanted: int) -> int:
        """A delay near ``wanted`` that does not end within the tolerance of a deadline."""
        if self.tolerance <= 0:
            return wanted
        now = self.model.clock.now
        deadlines = self.model.lock_deadlines()
        end = now + wanted
        for deadline in deadlines:
            if abs(deadline - end) <= 2 * self.tolerance:
                end = deadline + 2 * self.tolerance + 1
        return end - now

    def _clear_of_deadlines(self) -> None:
        """On a real-time target (``clock_tolerance`` > 0): if a lock deadline is within
        twice the tolerance of now, or falls inside the coming step (``step_allowance``),
        wait until it is past by twice the tolerance, so model and target agree whether
        the lock expired. Called at the start of every rule and invariant."""
        if self.tolerance <= 0:
            return
        self._sync()
        now = self.model.clock.now
        margin = 2 * self.tolerance
        horizon = now + margin + self.step_allowance
        end = now
        for deadline in self.model.lock_deadlines():
            if now - margin <= deadline <= max(horizon, end + margin + self.step_allowance):
                end = max(end, deadline + margin + 1)
        if end > now:
            self.target.wait(end - now)
            self._sync()

    # --------------------------------------------------------------- rules
    # ------------------------------------------------------------- peeking
    def _target_all(self, handle: Handle) -> list[Received]:
        """Every message, peeking on from the last number seen (one partition at a time)."""
        out: list[Received] = []
        start = 1
        while True:
            batch = self.target.peek(handle, 250, start)
            if not batch:
                return out
            out.extend(batch)
            start = max(m.sequence_number for m in batch) + 1

    def _model_all(self, path: str) -> list:
        out: list = []
        start = 1
        while True:
            batch = self.model.peek(path, start, 250)
            if not batch:
                return out
            out.extend(batch)
            start = max(d.sequence_number for d in batch) + 1

    def _follow(self, partition: int, what: str) -> Callable[[list[int]], int]:
        """A ``choose`` for the model that takes the target's partition, if allowed."""

        def choose(allowed: list[int]) -> int:
            if partition not in allowed:
                raise Divergence(f"{what}: the target used partition {partition}; the model allows only {allowed}")
            return partition

        return choose

    @rule(count=st.integers(1, 3), batch=st.booleans(), key=st.sampled_from([None, None, "a", "b"]))
    def send(self, count: int, batch: bool, key: str | None) -> None:
        self._clear_of_deadlines()
        messages = []
        for _ in range(count):
            self.counter += 1
            messages.append(Message(f"body {self.counter}".encode(), message_id=f"m{self.counter}", partition_key=key))
        self._sync()
        _, error = _outcome(lambda: self.target.send(self.sender, messages, batch=batch))
        landed: dict[str, int] = {}
        if self.partitioned and error is None:
            landed = {m.message_id: partition_of(m.sequence_number) for m in self._target_all(self.receivers[0])}

        def model_send() -> None:
            for part in [messages] if batch else [[m] for m in messages]:
                if self.partitioned:
                    where = {landed.get(m.message_id) for m in part}
                    if len(where) != 1 or None in where:
                        raise Divergence(f"send: the target put {[m.message_id for m in part]} in partitions {sorted(where, key=str)}")
                    self.model.send(self.model_sender, "q", part, choose=self._follow(where.pop(), "send"))
                else:
                    self.model.send(self.model_sender, "q", part)

        _, expected = _outcome(model_send)
        if error != expected:
            raise Divergence(f"send: target answered {error}, the model {expected}")

    @rule(index=st.integers(0, 2), count=st.integers(1, 3), dead_letter=st.booleans())
    def receive(self, index: int, count: int, dead_letter: bool) -> None:
        self._clear_of_deadlines()
        index %= len(self.receivers)
        handle = self.dead_letter_receiver if dead_letter else self.receivers[index]
        conn = self.model_dead_letter_receiver if dead_letter else self.model_receivers[index]
        path = "q/$DeadLetterQueue" if dead_letter else "q"
        got = self.target.receive(handle, count, max_wait=self.target.empty_wait)
        self._sync()
        available = [d for d in self._model_all(path) if str(d.state) == "active"]
        if not got and available:
            raise Divergence(f"receive returned nothing; the model has {[d.message_id for d in available[:count]]}")
        expected = self._model_receive(conn, path, got, PEEK_LOCK)
        if [m.message_id for m in got] != [d.message_id for d in expected]:
            raise Divergence(
                f"receive returned {[m.message_id for m in got]}, the model allows {[d.message_id for d in expected]}"
            )
        for t, m in zip(got, expected):
            if t.delivery_count != m.delivery_count:
                raise Divergence(f"{t.message_id}: delivery count {t.delivery_count}, the model says {m.delivery_count}")
            self.pairs.append(Pair(t.message_id, t, m.lock_token, -1 if dead_letter else index, dead_letter))

    @rule(count=st.integers(1, 3))
    def receive_and_delete(self, count: int) -> None:
        self._clear_of_deadlines()
        got = self.target.receive(self.rad, count, max_wait=self.target.empty_wait)
        self._sync()
        if not got and any(str(d.state) == "active" for d in self._model_all("q")):
            raise Divergence("receive-and-delete returned nothing while messages were available")
        expected = self._model_receive(self.model_rad, "q", got, RECEIVE_AND_DELETE)
        if [m.message_id for m in got] != [d.message_id for d in expected]:
            raise Divergence(f"receive-and-delete returned {[m.message_id for m in got]}, the model allows {[d.message_id for d in expected]}")

    def _model_receive(self, conn: int, path: str, got: list[Received], mode: str) -> list:
        """The model receives what the target returned: the same number of messages,
        and on a partitioned queue each from the partition the target's came from."""
        if not got:
            return []
        if not self.partitioned:
            return self.model.receive(conn, path, len(got), mode)
        out = []
        for m in got:
            out.extend(self.model.receive(conn, path, 1, mode, choose=self._follow(partition_of(m.sequence_number), f"receive of {m.message_id}")))
        return out

    @precondition(lambda self: self.pairs)
    @rule(data=st.data(), op=st.sampled_from(list(SETTLEMENTS)), other=st.booleans())
    def settle(self, data: st.DataObject, op: str, other: bool) -> None:
        self._clear_of_deadlines()
        pair = data.draw(st.sampled_from(self.pairs))
        if pair.dead_letter:
            handle, conn, path = self.dead_letter_receiver, self.model_dead_letter_receiver, "q/$DeadLetterQueue"
        else:
            index = (pair.receiver + (1 if other else 0)) % len(self.receivers)
            handle, conn, path = self.receivers[index], self.model_receivers[index], "q"
        why = dict(reason="diff", description="differential")  # read by dead-letter only

        def on_target() -> object:
            return settle_op(self.target, op, handle, pair.target_message, **why)

        def on_model() -> object:
            return settle_op(self.model, op, conn, path, pair.model_token, **why)

        got, error = _outcome(on_target)
        self._sync()
        want, expected = _outcome(on_model)
        if error != expected:
            raise Divergence(f"{op} of {pair.message_id}: target answered {error or 'ok'}, the model {expected or 'ok'}")
        if op == "renew-lock" and error is None and abs((got - self.t0) - want) > self.tolerance:
            raise Divergence(f"renew of {pair.message_id}: locked until {got - self.t0}, the model says {want}")

    @rule(data=st.data(), index=st.integers(0, 2))
    def receive_deferred(self, data: st.DataObject, index: int) -> None:
        self._clear_of_deadlines()
        deferred = [d for d in self._model_all("q") if str(d.state) == "deferred"]
        known = {p.message_id: p.target_message.sequence_number for p in self.pairs if not p.dead_letter}
        candidates = [d.message_id for d in deferred if d.message_id in known] + ["not-deferred"]
        choice = data.draw(st.sampled_from(candidates))
        index %= len(self.receivers)
        if choice == "not-deferred":
            target_seq = model_seq = None
            live = [p for p in self.pairs if not p.dead_letter]
            if not live:
                return
            target_seq = live[-1].target_message.sequence_number
            model_seq = next((d.sequence_number for d in self._model_all("q") if d.message_id == live[-1].message_id), -1)
            if any(d.message_id == live[-1].message_id for d in deferred):
                return
        else:
            target_seq = known[choice]
            model_seq = next(d.sequence_number for d in deferred if d.message_id == choice)
        got, error = _outcome(lambda: self.target.receive_deferred(self.receivers[index], [target_seq]))
        self._sync()
        want, expected = _outcome(lambda: self.model.receive_deferred(self.model_receivers[index], "q", [model_seq]))
        if error != expected:
            raise Divergence(f"receive deferred {choice}: target answered {error or 'ok'}, the model {expected or 'ok'}")
        if error is None:
            for t, m in zip(got, want):
                if t.message_id != m.message_id or t.delivery_count != m.delivery_count:
                    raise Divergence(f"receive deferred returned {t.message_id}/{t.delivery_count}, the model {m.message_id}/{m.delivery_count}")
                self.pairs.append(Pair(t.message_id, t, m.lock_token, index, False))

    @rule(seconds=st.integers(0, 8))
    def time_passes(self, seconds: int) -> None:
        self._clear_of_deadlines()
        self._sync()
        delay = self._safe_delay(seconds * SECOND)
        self.target.wait(delay)
        self.model.clock.advance(delay)
        self._sync()

    @precondition(lambda self: "drop-connection" in self.capabilities)
    @rule(index=st.integers(0, 2))
    def drop_connection(self, index: int) -> None:
        self._clear_of_deadlines()
        index %= len(self.receivers)
        self.target.drop_connection(self.receivers[index])
        self._sync()
        self.model.drop_connection(self.model_receivers[index])
        self.model_receivers[index] = self.model.connect()

    # ------------------------------------------------------------ invariant
    @invariant()
    def same_messages_in_the_same_states(self) -> None:
        self._clear_of_deadlines()
        for path, handle in (("q", self.receivers[0]), ("q/$DeadLetterQueue", self.dead_letter_receiver)):
            seen = [(m.message_id, m.state, m.delivery_count) for m in self._target_all(handle)]
            self._sync()
            want = [
                (d.message_id, "deferred" if str(d.state) == "deferred" else "active", d.delivery_count)
                for d in self._model_all(path)
            ]
            if seen != want:
                raise Divergence(f"peek {path}: target shows {seen}, the model {want}")


def differential_machine(make_target: Callable[[], Target], receivers: int = 3) -> type[RuleBasedStateMachine]:
    """``DifferentialMachine`` bound to ``make_target``, as a class (for ``.TestCase``)."""

    class Differential(DifferentialMachine):
        def __init__(self) -> None:
            super().__init__(make_target, receivers)

    return Differential
