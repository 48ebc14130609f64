"""Stateful properties of paired namespaces, on two targets of the kind under test.

A sending process (factory "sender", no syphon) and a receiving process (factory
"syphon", running the syphon; it sends too) share a primary and a secondary namespace.
Hypothesis drives any sequence of sends (with sessions, times to live, scheduled times and
properties), outages and recoveries of primary entities (errors that count for failover
and errors that do not) and of backlog queues, time passing, syphon steps and receives.
A ledger keeps every message a paired sender accepted. Then:

- every message received from a primary entity is one the pairing accepted, received
  once, with its original properties restored; no ping is ever delivered to a receiver;
- whenever nothing is unavailable, every accepted message is in exactly one place: its
  destination (received, waiting there, or expired into its dead-letter queue) or a
  backlog queue; in the end, once everything is back and the syphon has run, every one of
  them has reached its destination exactly once;
- after a primary entity recovers, a factory that had failed it over sends to it again no
  later than one ping interval after the later of the recovery and the failover.
"""

from __future__ import annotations

import itertools
import random
from typing import Callable

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from realtime import run_machine_on
from sbreference import MINUTE, SECOND, Message, ServiceBusError
from sbreference.paired import PairedNamespaceOptions, is_ping
from sbconform.paired import PairedFactory, message_of, run_together
from sbconform.targets import RECEIVE_AND_DELETE, Target

ENTITIES = ("a", "b")
DEAD_LETTER_KEYS = ("DeadLetterReason", "DeadLetterErrorDescription")
#: errors a primary entity may answer with: (code, transient); only some count for failover
OUTAGES = [("entity-unavailable", False)] * 3 + [("timeout", True), ("server-busy", True), ("quota-exceeded", False)]
USER_FIELDS = ("body", "message_id", "session_id", "time_to_live", "scheduled_enqueue_time", "content_type", "correlation_id", "subject")


def comparable(message: Message) -> dict:
    out = {name: getattr(message, name) for name in USER_FIELDS}
    out["application_properties"] = {k: v for k, v in message.application_properties.items() if k not in DEAD_LETTER_KEYS}
    return out


def paired_machine(new_target: Callable[[], Target]) -> type[RuleBasedStateMachine]:
    class PairedMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.primary: Target | None = None  # set up by the initialize rule (teardown runs even without it)

        @initialize(
            failover=st.sampled_from([0, 0, 10 * SECOND, 1 * MINUTE]),
            ping=st.sampled_from([5 * SECOND, 1 * MINUTE]),
            count=st.integers(1, 3),
            seed=st.integers(0, 2**16),
        )
        def setup(self, failover: int, ping: int, count: int, seed: int) -> None:
            self.primary, self.secondary = new_target(), new_target()
            self.paths = {e: self.primary.create_queue(e, dead_lettering_on_message_expiration=True) for e in ENTITIES}
            self.ping = ping
            pick = random.Random(seed).choice
            self.factories = {
                "sender": PairedFactory(self.primary, self.secondary, PairedNamespaceOptions(count, failover, ping, False), pick),
                # small receive batches, so that emptying a queue takes several receives
                "syphon": PairedFactory(self.primary, self.secondary, PairedNamespaceOptions(count, failover, ping, True), pick, 3),
            }
            for factory in self.factories.values():
                factory.pair_namespace()
            self.clients = {(f, e): self.factories[f].client(p) for f in self.factories for e, p in self.paths.items()}
            self.receivers = {e: self.primary.receiver(p, RECEIVE_AND_DELETE) for e, p in self.paths.items()}
            self.dead_letters = {e: self.primary.receiver(p + "/$DeadLetterQueue", RECEIVE_AND_DELETE) for e, p in self.paths.items()}
            self.accepted: dict[str, tuple[str, Message]] = {}  # id -> (entity, original)
            self.delivered: dict[str, int] = {}
            self.down: set[str] = set()
            self.backlog_down: set[int] = set()
            self.available_since = {e: 0 for e in ENTITIES}
            self.ids = itertools.count(1)
            self.peekers: dict[tuple[int, str], object] = {}

        def teardown(self) -> None:
            if self.primary is None:
                return
            try:
                self.settle_everything()
            finally:
                self.primary.close()
                self.secondary.close()

        # --------------------------------------------------------- sending
        @rule(
            who=st.sampled_from(["sender", "syphon"]),
            entity=st.sampled_from(ENTITIES),
            session=st.none() | st.sampled_from(["s1", "s2"]),
            ttl=st.none() | st.sampled_from([30 * SECOND, 10 * MINUTE, 2 * 24 * 60 * MINUTE]),
            delay=st.none() | st.sampled_from([0, 20 * SECOND, 5 * MINUTE]),
            props=st.dictionaries(st.sampled_from(["k", "color"]), st.integers(0, 9) | st.text("xyz", max_size=3), max_size=2),
            n=st.integers(1, 4),
        )
        def send_messages(self, who: str, entity: str, session, ttl, delay, props, n: int) -> None:
            factory = self.factories[who]
            for _ in range(n):
                now = self.primary.now()
                mid = f"m{next(self.ids)}"
                message = Message(
                    body=mid.encode(), message_id=mid, session_id=session, time_to_live=ttl,
                    scheduled_enqueue_time=None if delay is None else now + delay, subject="s", application_properties=props,
                )
                try:
                    path = factory.send(self.clients[(who, entity)], message)
                except ServiceBusError:
                    continue  # not accepted: nothing is owed
                self.accepted[mid] = (entity, message)
                if path != self.paths[entity]:
                    self.check_return_to_primary(factory, entity)

        def check_return_to_primary(self, factory: PairedFactory, entity: str) -> None:
            """A send went to the backlog: the entity must not have been available for a
            ping interval since both its recovery and its failover."""
            if entity in self.down:
                return
            health = factory.failover.entities[self.paths[entity].lower()]
            deadline = max(self.available_since[entity], health.failed_over_at) + self.ping
            assert self.primary.now() < deadline, (
                f"{entity!r} has been available since {self.available_since[entity]} and failed over since "
                f"{health.failed_over_at}, yet at {self.primary.now()} sends still go to a backlog queue"
            )

        @invariant()
        def failed_over_entities_return_in_time(self) -> None:
            """Time only passes through the factories, which act at every instant due: an
            entity still failed over now would send the next message to a backlog queue."""
            for factory in self.factories.values():
                for entity in ENTITIES:
                    if factory.failover.failed_over(self.paths[entity]):
                        self.check_return_to_primary(factory, entity)

        # --------------------------------------------------------- outages
        @rule(entity=st.sampled_from(ENTITIES), outage=st.sampled_from(OUTAGES))
        def entity_outage(self, entity: str, outage: tuple[str, bool]) -> None:
            self.primary.make_unavailable(self.paths[entity], *outage)
            self.down.add(entity)

        @rule(entity=st.sampled_from(ENTITIES))
        def entity_recovers(self, entity: str) -> None:
            if entity in self.down:
                self.primary.make_available(self.paths[entity])
                self.down.discard(entity)
                self.available_since[entity] = self.primary.now()

        @rule(index=st.integers(0, 2))
        def backlog_outage(self, index: int) -> None:
            factory = self.factories["sender"]
            if index < factory.options.backlog_queue_count:
                self.secondary.make_unavailable(factory.backlog_paths[index], "entity-unavailable", False)
                self.backlog_down.add(index)

        @rule(index=st.integers(0, 2))
        def backlog_recovers(self, index: int) -> None:
            if index in self.backlog_down:
                self.secondary.make_available(self.factories["sender"].backlog_paths[index])
                self.backlog_down.discard(index)

        # ------------------------------------------------------------ time
        @rule(seconds=st.sampled_from([1, 5, 30, 60, 300, 900]))
        def time_passes(self, seconds: int) -> None:
            run_together(list(self.factories.values()), seconds * SECOND)

        @rule()
        def one_ping_interval_passes(self) -> None:
            run_together(list(self.factories.values()), self.ping)

        @rule()
        def syphon_step(self) -> None:
            self.factories["syphon"].work()

        # ------------------------------------------------------- receiving
        @rule(entity=st.sampled_from(ENTITIES), dead_letters=st.booleans())
        def receive(self, entity: str, dead_letters: bool) -> None:
            receiver = (self.dead_letters if dead_letters else self.receivers)[entity]
            try:
                found = self.primary.receive(receiver, 10, 0)
            except ServiceBusError:
                assert entity in self.down, f"receiving from the available {entity!r} failed"
                return
            for received in found:
                self.record_delivery(entity, received)

        def record_delivery(self, entity: str, received) -> None:
            assert not is_ping(received.content_type), f"a ping was delivered to a receiver of {entity!r}"
            mid = received.message_id
            assert mid in self.accepted, f"{entity!r} delivered {mid!r}, which no paired sender accepted"
            destination, original = self.accepted[mid]
            assert destination == entity, f"{mid!r} for {destination!r} was delivered by {entity!r}"
            assert self.delivered.get(mid, 0) == 0, f"{mid!r} was delivered twice"
            self.delivered[mid] = 1
            assert comparable(message_of(received)) == comparable(original), (
                f"{mid!r} arrived as {comparable(message_of(received))}, was sent as {comparable(original)}"
            )

        # ------------------------------------------------------- the ledger
        def where(self) -> dict[str, list[str]]:
            """Every message id in a primary entity (or its dead-letter queue) or a backlog queue."""
            places: dict[str, list[str]] = {}
            for entity, path in self.paths.items():
                for p in (path, path + "/$DeadLetterQueue"):
                    for m in self.peek(self.primary, p):
                        places.setdefault(m.message_id, []).append(entity)
            for index, path in enumerate(self.factories["sender"].backlog_paths):
                for m in self.peek(self.secondary, path):
                    places.setdefault(m.message_id, []).append(f"backlog {index}")
            return places

        def peek(self, target: Target, path: str) -> list:
            """Peek through a receiver kept for the path (through an SDK, opening one takes half a second)."""
            key = (id(target), path)
            if key not in self.peekers:
                self.peekers[key] = target.receiver(path)
            return target.peek(self.peekers[key], 1000, 1)

        @invariant()
        def every_accepted_message_is_in_exactly_one_place(self) -> None:
            if self.down or self.backlog_down:
                return  # unavailable entities cannot be looked at
            places = self.where()
            for mid, (entity, _) in self.accepted.items():
                seen = places.pop(mid, [])
                count = len(seen) + self.delivered.get(mid, 0)
                assert count == 1, f"{mid!r} for {entity!r} is in {seen} and was delivered {self.delivered.get(mid, 0)} times"
                assert all(place == entity or place.startswith("backlog") for place in seen), f"{mid!r} is in {seen}"
            assert not places, f"messages nobody accepted: {places}"

        def settle_everything(self) -> None:
            """Everything comes back; the syphon runs; every accepted message reaches its destination once."""
            for entity in list(self.down):
                self.primary.make_available(self.paths[entity])
            for index in list(self.backlog_down):
                self.secondary.make_available(self.factories["sender"].backlog_paths[index])
            self.down.clear()
            self.backlog_down.clear()
            run_together(list(self.factories.values()), 2 * self.ping + 11 * MINUTE)
            for entity in ENTITIES:
                for receiver in (self.receivers[entity], self.dead_letters[entity]):
                    while found := self.primary.receive(receiver, 100, 0):
                        for received in found:
                            self.record_delivery(entity, received)
            missing = sorted(set(self.accepted) - set(self.delivered))
            assert not missing, f"accepted but never delivered: {missing} (still at {[self.where().get(m) for m in missing]})"

    return PairedMachine


@pytest.mark.clauses("PAIR-ROUTE-001", "PAIR-SYPH-002", "PAIR-SYPH-003", "PAIR-PING-002", "PAIR-PING-004", "PAIR-RENAME-004")
@pytest.mark.needs("paired-namespaces", "entity-outage", "virtual-time", "time-to-live", "scheduling", "dead-letter")
def test_paired_namespaces_lose_nothing_and_return_to_the_primary(sb_session, sb_target) -> None:
    """On a target whose operations take real time, a small profile (realtime.run_machine_on)."""
    run_machine_on(sb_target, paired_machine(sb_session.new))


# --------------------------------------------------------- the kit catches bugs
# These test the kit, not a target: they name no clause. Each plants one bug in the
# paired client (or uses a broker that delivers pings) and requires the properties above
# to fail.

def _drop_session(monkeypatch) -> None:
    from sbreference.paired import syphon

    restore = syphon.from_backlog
    monkeypatch.setattr(syphon, "from_backlog", lambda m: (restore(m)[0], restore(m)[1].with_changes(session_id=None)))


def _complete_before_forwarding(monkeypatch) -> None:
    from sbreference.paired import PRIMARY, Send

    def move(self, receiver, decision):
        self.targets["secondary"].complete(receiver, decision.handle)
        try:
            self._send(Send(PRIMARY, decision.destination, decision.message))
        except ServiceBusError:
            pass

    monkeypatch.setattr(PairedFactory, "_move", move)


def _forward_twice(monkeypatch) -> None:
    from sbreference.paired import PRIMARY, Send

    def move(self, receiver, decision):
        try:
            for _ in range(2):
                self._send(Send(PRIMARY, decision.destination, decision.message))
        except ServiceBusError:
            self.syphon.forward_failed(decision.backlog_index, decision.handle.locked_until)
            return
        self.targets["secondary"].complete(receiver, decision.handle)

    monkeypatch.setattr(PairedFactory, "_move", move)


def _never_back_to_primary(monkeypatch) -> None:
    from sbreference.paired.failover import FailoverSender

    monkeypatch.setattr(FailoverSender, "ping_succeeded", lambda self, entity, now: None)


def _first_ping_late(monkeypatch) -> None:
    from sbreference.paired.ping import PingTask

    monkeypatch.setattr(PingTask, "start", classmethod(lambda cls, now, interval: cls(interval, now + 2 * interval)))


def _one_batch_per_wake_up(monkeypatch) -> None:
    from sbreference.paired import SECONDARY

    def run_syphon(self):
        self.syphon.tick(self.now())
        secondary = self.targets[SECONDARY]
        for index, path in enumerate(self.backlog_paths):
            try:
                receiver = self._receivers.get(index) or self._receivers.setdefault(index, secondary.receiver(path))
                found = secondary.receive(receiver, self.syphon_batch, 0)
            except ServiceBusError:
                continue
            for decision in self.syphon.received(index, [(message_of(r), r) for r in found], self.now()):
                self._move(receiver, decision)

    monkeypatch.setattr(PairedFactory, "_run_syphon", run_syphon)


PLANTED = {
    "syphon-takes-one-batch-per-wake-up": _one_batch_per_wake_up,
    "syphon-forgets-the-session": _drop_session,
    "syphon-completes-before-forwarding": _complete_before_forwarding,
    "syphon-forwards-twice": _forward_twice,
    "never-back-to-the-primary": _never_back_to_primary,
    "first-ping-one-interval-late": _first_ping_late,
}


@pytest.mark.needs("model-internals")
@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_the_properties_catch_a_planted_bug(bug: str, monkeypatch) -> None:
    from hypothesis import Phase, settings

    from sbconform.targets import make_target

    PLANTED[bug](monkeypatch)
    quick = settings(database=None, derandomize=True, report_multiple_bugs=False, phases=[Phase.generate], max_examples=1000, stateful_step_count=50, deadline=None)
    with pytest.raises(AssertionError):
        run_state_machine_as_test(paired_machine(lambda: make_target("reference")), settings=quick)


@pytest.mark.needs("model-internals")
def test_the_properties_catch_a_broker_that_delivers_pings() -> None:
    from hypothesis import Phase, settings

    from sbconform.targets import make_target

    quick = settings(database=None, derandomize=True, report_multiple_bugs=False, phases=[Phase.generate], max_examples=1000, stateful_step_count=50, deadline=None)
    with pytest.raises(AssertionError, match="ping was delivered"):
        run_state_machine_as_test(paired_machine(lambda: make_target("mutant-pings-delivered")), settings=quick)
