"""Steps of the paired-namespace features (features/paired/).

The target under test is the primary namespace; a second target of the same kind
(``sb_session.new()``) is the secondary. Factories are ``sbconform.paired.PairedFactory``
objects: the reference client logic, driving the two targets. Every send and receive
goes through a ``MeteredTarget`` tagged with who issued it (a factory's name, or
``application`` for the scenario's own receivers and senders), so scenarios can check what
the client sent and what it was billed.

Times in these steps ("pinged at 5, 10 seconds") count from the moment the scenario first
touched the pairing.
"""

from __future__ import annotations

import random
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from typing import Any

import pytest

from sbreference import DAY, HOUR, MINUTE, SECOND, EntityDescription, Message, ServiceBusError, message_size
from sbreference.entity import KB
from sbreference.paired import (
    PRIMARY,
    SECONDARY,
    PairedNamespaceOptions,
    backlog_path,
    is_ping,
    to_backlog,
)
from sbconform.paired import Meter, MeteredTarget, PairedClient, PairedFactory, run_together, unwrap
from sbconform.targets import Received

from .common import IDS, step
from .world import World, entity_properties, message_attributes, parse_phrases, quoted

UNITS = {"millisecond": 1, "second": SECOND, "minute": MINUTE, "hour": HOUR, "day": DAY}
DURATION = r"(?P<n>\d+) (?P<unit>milliseconds?|seconds?|minutes?|hours?|days?)"
#: how long one operation the broker refuses may take through a real-time target (Pairing.slack)
REFUSED_OPERATION_MS = 1200
#: Seed of the random backlog picks (the model's choice is a parameter; the steps make it reproducible).
PICK_SEED = 20170525


def unwrap_recording(target: Any) -> Any:
    from sbconform.trace.recorder import RecordingTarget

    while isinstance(target, RecordingTarget):
        target = target.target
    return target


def duration(n: str, unit: str) -> int:
    return int(n) * UNITS[unit.rstrip("s")]


class Pairing:
    """The paired-namespace part of one scenario's world."""

    def __init__(self, world: World, secondary: Any) -> None:
        self.world = world
        self.meter = Meter()
        self.raw_primary = world.target
        self.raw_secondary = secondary
        secondary.share_clock(world.target)
        world.target = MeteredTarget(world.target, PRIMARY, self.meter, "application")
        self.secondary = MeteredTarget(secondary, SECONDARY, self.meter, "application")
        self.factories: dict[str, PairedFactory] = {}
        self.clients: dict[tuple[str, str, str], PairedClient] = {}
        self.t0 = world.target.now()
        self.waited = 0  # ms the scenario let pass ("the pairing runs for ..."): the rest of the time since t0 went in steps
        self.sent_at: dict[str, int] = {}
        self.went: dict[str, tuple[str, str, PairedClient]] = {}  # message id -> (namespace, path, client)
        self.client_groups: list[list[str]] = []  # message ids sent by each of a group of new clients
        self.peekers: dict[str, Any] = {}  # backlog path -> a receiver kept for peeking (opening one takes ~0.5 s through the SDK)

    # ------------------------------------------------------------ names
    def factory(self, name: str) -> PairedFactory:
        if name not in self.factories:
            raise AssertionError(f"the scenario never paired a factory {name!r}")
        return self.factories[name]

    def backlog_path(self, index: int | str) -> str:
        return backlog_path(unwrap(self.raw_primary).namespace_name(), int(index))

    def backlog_indexes(self) -> range:
        count = max([f.options.backlog_queue_count for f in self.factories.values()] or [0])
        return range(count)

    def client(self, factory: str, entity: str, name: str | None = None) -> PairedClient:
        key = (factory, entity, name or "")
        if key not in self.clients:
            self.clients[key] = self.factory(factory).client(self.world.path(entity))
        return self.clients[key]

    def operations(self, who: str):
        return self.meter.by(who)

    # ------------------------------------------------------------ backlog
    def backlog_messages(self, index: int) -> list[Received]:
        path = self.backlog_path(index)
        if path in self.peekers:
            try:
                return self.secondary.peek(self.peekers[path], 250, 1)
            except ServiceBusError:  # its link went with an outage or a deletion: a new receiver
                del self.peekers[path]
        self.peekers[path] = self.secondary.receiver(path)
        return self.secondary.peek(self.peekers[path], 250, 1)

    def backlog_by_index(self) -> list[list[Received]]:
        """What each backlog queue holds; the receivers not opened yet are opened side by side
        (each takes about half a second through the SDK, whose open waits 50 ms a frame)."""
        missing = [p for p in map(self.backlog_path, self.backlog_indexes()) if p not in self.peekers]
        if len(missing) > 1:
            with ThreadPoolExecutor(len(missing)) as pool:
                self.peekers.update(zip(missing, pool.map(self.secondary.receiver, missing)))
        return [self.backlog_messages(i) for i in self.backlog_indexes()]

    def all_backlog_messages(self) -> list[Received]:
        return [m for held in self.backlog_by_index() for m in held]

    def backlog_copy(self, message_id: str) -> Received:
        for m in self.all_backlog_messages():
            if m.message_id == message_id:
                return m
        raise AssertionError(f"no backlog queue holds {message_id!r}")

    def close(self) -> None:
        for factory in self.factories.values():
            try:
                factory.dispose()
            except ServiceBusError:
                pass
        self.raw_secondary.close()

    def slack(self) -> int:
        """How late an action may be observed against the instant it was due. Exact on a
        purely virtual clock (the model's); on a target whose clock also runs in real time (a
        real-time target, or an endpoint whose clock is moved on as well: the SDK target with
        time=virtual), the clock tolerance plus the time one refused operation takes through
        the SDK (a failed attach or send: up to about a second), since actions due at one
        instant are carried out one after the other, each taking real time."""
        target = unwrap_recording(unwrap(self.raw_primary))
        if "virtual-time" in target.capabilities and not getattr(target, "clock_runs_in_real_time", False):
            return 0
        return int(getattr(target, "clock_tolerance", 0)) + REFUSED_OPERATION_MS


@pytest.fixture
def pairing(world: World, sb_session) -> Any:
    """The secondary is another namespace of the target's kind (``Target.paired_namespace``:
    another model namespace, or a second ``sbconform serve`` behind the SDK), recorded in the
    test's trace like the primary."""
    secondary = unwrap_recording(world.target).paired_namespace()
    if sb_session.trace is not None:
        secondary = sb_session.trace.wrap(secondary)
    p = Pairing(world, secondary)
    yield p
    p.close()


# ----------------------------------------------------------------- phrases

_OPTION_PHRASES = [
    (re.compile(r"(\d+) backlog queues?"), lambda m: {"backlog_queue_count": int(m[1])}),
    (re.compile(r"failover interval " + DURATION), lambda m: {"failover_interval": duration(m["n"], m["unit"])}),
    (re.compile(r"ping interval " + DURATION), lambda m: {"ping_primary_interval": duration(m["n"], m["unit"])}),
    (re.compile(r"running the syphon"), lambda m: {"enable_syphon": True}),
    (re.compile(r"random backlog picks"), lambda m: {"random": True}),
]


#: bytes left below 256 KB by "a body that fills the 256 KB limit": what an SDK adds on the wire
#: beyond the model's size metric fits in it; the backlog rewrite of a message for an entity with a
#: long name (x-ms-path) does not
FILL_MARGIN = 48


def _fill_limit(message_id: str) -> bytes:
    """A body that makes the message 256 KB less ``FILL_MARGIN`` bytes by the model's size metric."""
    bare = message_size(Message(b"", message_id=message_id))
    return b"x" * (256 * KB - bare - FILL_MARGIN)


def _send_attributes(text: str | None, pairing: Pairing) -> tuple[dict[str, Any], list]:
    """Message attributes of the common vocabulary, plus a few of the pairing's."""
    out: dict[str, Any] = {}
    late: list = []  # attributes that depend on the message or the send time
    rest = []
    for part in re.split(r",\s*|\s+and\s+(?=[a-z])", (text or "").strip()):
        part = part.strip()
        if not part:
            continue
        if m := re.fullmatch(r'property "([^"]+)" = "([^"]*)"', part):
            out.setdefault("application_properties", {})[m[1]] = m[2]
        elif m := re.fullmatch(r"scheduled enqueue time in " + DURATION, part):
            late.append(("scheduled_enqueue_time", duration(m["n"], m["unit"])))
        elif part == "a body that fills the 256 KB limit":
            late.append(("body", None))
        else:
            rest.append(part)
    out.update(message_attributes(", ".join(rest)) if rest else {})
    return out, late


# ------------------------------------------------------------------ pairing


def kit_client(primary: Any, secondary: Any, options: dict[str, Any], choose: Any) -> PairedFactory:
    """The paired client the scenarios drive a target with: the kit's (the reference's logic)."""
    return PairedFactory(primary, secondary, PairedNamespaceOptions(**options), choose=choose)


def paired_client(target: Any) -> Any:
    """``kit_client``, unless the target names a paired client of its own (``paired_factory``, with
    ``kit_client``'s signature): the mutants of tests/mutants_paired.py name a broken one, so that
    the clauses about the client are shown to catch a client that gets them wrong."""
    return getattr(unwrap_recording(unwrap(target)), "paired_factory", None) or kit_client


@step(r'factory "(?P<name>[^"]+)" (?:is )?paired(?:,? (?:with )?(?P<opts>.+))?')
def pair_factory(world: World, pairing: Pairing, name: str, opts: str | None) -> None:
    options = parse_phrases(opts, _OPTION_PHRASES, "pairing option") if opts else {}
    choose = random.Random(PICK_SEED).choice if options.pop("random", False) else None

    def pair() -> PairedFactory:
        primary = MeteredTarget(unwrap(pairing.raw_primary), PRIMARY, pairing.meter, name)
        secondary = MeteredTarget(unwrap(pairing.raw_secondary), SECONDARY, pairing.meter, name)
        return paired_client(pairing.raw_primary)(primary, secondary, dict(options), choose).pair_namespace()

    factory = world.attempt(pair)
    if factory is not None:
        pairing.factories[name] = factory


@step(r"the pairing runs for " + DURATION)
def pairing_runs(world: World, pairing: Pairing, n: str, unit: str) -> None:
    world.require_no_pending_error()
    pairing.waited += duration(n, unit)
    if pairing.factories:
        run_together(list(pairing.factories.values()), duration(n, unit))
    else:
        world.target.wait(duration(n, unit))


# ---------------------------------------------------------------- sending


@step(
    r'factory "(?P<f>[^"]+)" sends (?P<ids>' + IDS + r')(?: with (?P<attrs>.+?))? to "(?P<entity>[^"]+)"'
    r'(?: through client "(?P<client>[^"]+)")?'
)
def factory_sends(world: World, pairing: Pairing, f: str, ids: str, attrs: str | None, entity: str, client: str | None) -> None:
    attributes, late = _send_attributes(attrs, pairing)
    handle = pairing.client(f, entity, client)
    for mid in quoted(ids):
        now = world.target.now()
        message = world.build(mid, attributes)
        for name, value in late:
            if name == "scheduled_enqueue_time":
                message = message.with_changes(scheduled_enqueue_time=now + value)
            elif name == "body":
                message = message.with_changes(body=_fill_limit(mid))
        pairing.sent_at[mid] = now
        path = world.attempt(handle.factory.send, handle, message)
        if path is None:
            return
        pairing.went[mid] = ("primary" if path == handle.path else "backlog", path, handle)


@step(r'each of (?P<n>\d+) new clients of factory "(?P<f>[^"]+)" sends (?P<k>\d+) messages? to "(?P<entity>[^"]+)"')
def many_clients_send(world: World, pairing: Pairing, n: str, f: str, k: str, entity: str) -> None:
    for c in range(int(n)):
        ids = [f"c{c}-m{i}" for i in range(int(k))]
        factory_sends(world, pairing, f, ", ".join(f'"{i}"' for i in ids), None, entity, f"new-{c}")
        world.require_no_pending_error()
        pairing.client_groups.append(ids)


# ----------------------------------------------------------------- outages


@step(r'the primary "(?P<entity>[^"]+)" becomes unavailable')
def primary_unavailable(world: World, pairing: Pairing, entity: str) -> None:
    world.target.make_unavailable(world.path(entity), "entity-unavailable", False)


@step(r'the primary "(?P<entity>[^"]+)" fails with "(?P<code>[^"]+)"')
def primary_fails_with(world: World, pairing: Pairing, entity: str, code: str) -> None:
    """Every operation on the entity fails with ``code``: on the wire, its AMQP condition. Whether
    that starts the failover timer is the paired client's decision (sbreference/paired/transience.py)."""
    world.target.make_unavailable(world.path(entity), code, None)


@step(r'the primary "(?P<entity>[^"]+)" recovers')
def primary_recovers(world: World, pairing: Pairing, entity: str) -> None:
    world.target.make_available(world.path(entity))


@step(r"backlog queue (?P<i>\d+) becomes unavailable")
def backlog_unavailable(pairing: Pairing, i: str) -> None:
    pairing.secondary.make_unavailable(pairing.backlog_path(i), "entity-unavailable", False)


@step(r"backlog queue (?P<i>\d+) recovers")
def backlog_recovers(pairing: Pairing, i: str) -> None:
    pairing.secondary.make_available(pairing.backlog_path(i))


# ------------------------------------------------------- the secondary namespace


@step(r"the secondary namespace has a queue at backlog path (?P<i>\d+)(?: with (?P<props>.+))?")
def existing_backlog_queue(pairing: Pairing, i: str, props: str | None) -> None:
    pairing.secondary.create_queue_at(pairing.backlog_path(i), **(entity_properties(props) if props else {}))


@step(r'message "(?P<mid>[^"]+)" for "(?P<entity>[^"]+)" is waiting at backlog path (?P<i>\d+)')
def waiting_in_backlog(world: World, pairing: Pairing, mid: str, entity: str, i: str) -> None:
    sender = pairing.secondary.sender(pairing.backlog_path(i))
    pairing.secondary.send(sender, [to_backlog(world.build(mid, {}), world.path(entity))])
    pairing.secondary.close_handle(sender)


@step(r"the secondary namespace has backlog queues (?P<have>\d+(?:, \d+)*)(?: and no backlog queue (?P<none>\d+))?")
def has_backlog_queues(pairing: Pairing, have: str, none: str | None) -> None:
    for index in have.split(", "):
        assert _exists(pairing, index), f"the secondary namespace has no queue {pairing.backlog_path(index)!r}"
    if none is not None:
        assert not _exists(pairing, none), f"the secondary namespace has a queue {pairing.backlog_path(none)!r}"


@step(r"the secondary namespace has no backlog queue (?P<i>\d+)")
def has_no_backlog_queue(world: World, pairing: Pairing, i: str) -> None:
    assert not _exists(pairing, i), f"the secondary namespace has a queue {pairing.backlog_path(i)!r}"


def _exists(pairing: Pairing, index: str | int) -> bool:
    try:
        pairing.secondary.entity_counts(pairing.backlog_path(index))
    except ServiceBusError as error:
        if str(error.code) == "entity-not-found":
            return False
        raise
    return True


@step(r'backlog queue (?P<i>\d+) is at "<primary namespace>/(?P<rest>[^"]+)"')
def backlog_queue_is_at(pairing: Pairing, i: str, rest: str) -> None:
    path = f"{unwrap(pairing.raw_primary).namespace_name()}/{rest}"
    assert path == pairing.backlog_path(i), f"backlog queue {i} is at {pairing.backlog_path(i)!r}, not {path!r}"
    pairing.secondary.entity_counts(path)  # exists, at exactly that path


#: .NET QueueDescription property -> EntityDescription field
DOTNET_PROPERTIES = {
    "MaxSizeInMegabytes": "max_size_in_megabytes",
    "MaxDeliveryCount": "max_delivery_count",
    "DefaultMessageTimeToLive": "default_message_time_to_live",
    "AutoDeleteOnIdle": "auto_delete_on_idle",
    "LockDuration": "lock_duration",
    "EnableDeadLetteringOnMessageExpiration": "dead_lettering_on_message_expiration",
    "EnableBatchedOperations": "enable_batched_operations",
}


def dotnet_value(text: str) -> Any:
    from sbreference import INT_MAX, TIMESPAN_MAX

    special = {"int.MaxValue": INT_MAX, "TimeSpan.MaxValue": TIMESPAN_MAX, "true": True, "false": False}
    if text in special:
        return special[text]
    if m := re.fullmatch(DURATION, text):
        return duration(m["n"], m["unit"])
    return int(text)


@step(r"backlog queue (?P<i>\d+) has these properties, and the QueueDescription defaults for all others")
def backlog_description_table(pairing: Pairing, i: str, datatable: list[list[str]]) -> None:
    described = pairing.secondary.describe_entity(pairing.backlog_path(i))
    header, *rows = datatable
    assert header == ["property", "value"], f"the table's header is {header}"
    expected = {f.name: getattr(EntityDescription(), f.name) for f in fields(EntityDescription)}
    for prop, value in rows:
        if prop not in DOTNET_PROPERTIES:
            raise ValueError(f"unknown QueueDescription property {prop!r} (known: {sorted(DOTNET_PROPERTIES)})")
        expected[DOTNET_PROPERTIES[prop]] = dotnet_value(value)
    wrong = {k: (described.get(k), v) for k, v in expected.items() if described.get(k) != v}
    assert not wrong, f"backlog queue {i}: (described, expected) differ for {wrong}"


@step(r"backlog queue (?P<i>\d+) has (?P<props>(?:lock duration|max delivery count|max size).+)")
def backlog_described_with(pairing: Pairing, i: str, props: str) -> None:
    described = pairing.secondary.describe_entity(pairing.backlog_path(i))
    for key, value in _entity_phrases(props).items():
        assert described[key] == value, f"backlog queue {i} has {key} = {described[key]!r}, expected {value!r}"


def _entity_phrases(text: str) -> dict[str, Any]:
    out = {}
    for part in re.split(r",\s*|\s+and\s+(?=[a-z])", text):
        if m := re.fullmatch(r"max delivery count (\d+)", part.strip()):
            out["max_delivery_count"] = int(m[1])  # beyond the common phrases' range too
        else:
            out.update(entity_properties(part))
    return out


# ------------------------------------------------------------- where it went


@step(r"(?P<ids>" + IDS + r") went to (?P<where>the primary|a backlog queue|one backlog queue|backlog queue (?P<i>\d+))")
def went_to(world: World, pairing: Pairing, ids: str, where: str, i: str | None) -> None:
    world.require_no_pending_error()
    paths = []
    for mid in quoted(ids):
        if mid not in pairing.went:
            raise AssertionError(f"{mid!r} was never accepted by a paired factory")
        kind, path, client = pairing.went[mid]
        paths.append(path)
        if where == "the primary":
            assert kind == "primary" and path == client.path, f"{mid!r} went to {path!r}"
        else:
            assert kind == "backlog", f"{mid!r} went to the primary {path!r}"
            if i is not None:
                assert path == pairing.backlog_path(i), f"{mid!r} went to {path!r}, not backlog queue {i}"
    if where == "one backlog queue":
        assert len(set(paths)) == 1, f"the messages went to several backlog queues: {paths}"


@step(r"each client's messages went to one backlog queue")
def each_client_one_queue(pairing: Pairing) -> None:
    """As the client reported each send (the path it went to), and as the backlog queues hold them."""
    assert pairing.client_groups, "no group of clients sent anything"
    held = {m.message_id: i for i, messages in enumerate(pairing.backlog_by_index()) for m in messages}
    for ids in pairing.client_groups:
        paths = {pairing.went[mid][1] for mid in ids}
        assert len(paths) == 1 and pairing.went[ids[0]][0] == "backlog", f"{ids} went to {paths}"
        queues = {held.get(mid) for mid in ids}
        assert len(queues) == 1 and None not in queues, f"{ids} are held by backlog queues {sorted(queues, key=str)}"


@step(r"every backlog queue holds at least one message")
def every_backlog_queue_used(pairing: Pairing) -> None:
    empty = [i for i, held in enumerate(pairing.backlog_by_index()) if not held]
    assert not empty, f"backlog queues {empty} hold nothing"


@step(r"the backlog queues hold (?:(?P<ids>" + IDS + r")|(?P<nothing>nothing))")
def backlog_queues_hold(world: World, pairing: Pairing, ids: str | None, nothing: str | None) -> None:
    world.require_no_pending_error()
    found = sorted(m.message_id for m in pairing.all_backlog_messages())
    expected = sorted(quoted(ids)) if ids else []
    assert found == expected, f"the backlog queues hold {found}, expected {expected}"


@step(r"backlog queue (?P<i>\d+) holds (?:(?P<ids>" + IDS + r")|(?P<nothing>nothing))")
def backlog_queue_holds(world: World, pairing: Pairing, i: str, ids: str | None, nothing: str | None) -> None:
    world.require_no_pending_error()
    found = [m.message_id for m in pairing.backlog_messages(int(i))]
    expected = quoted(ids) if ids else []
    assert found == expected, f"backlog queue {i} holds {found}, expected {expected}"


@step(r'peeking "(?P<entity>[^"]+)" shows exactly the messages factory "(?P<f>[^"]+)" accepted for it')
def peek_shows_accepted(world: World, pairing: Pairing, entity: str, f: str) -> None:
    path = world.path(entity)
    accepted = sorted(r.message.message_id for r in pairing.factory(f).sends if r.entity == path and r.error is None)
    found = sorted(m.message_id for m in world.peek_all(entity))
    assert accepted, f"factory {f!r} accepted nothing for {entity!r}"
    assert found == accepted, f"peeking {entity!r} shows {found}, factory {f!r} accepted {accepted}"


# ----------------------------------------------------------- message properties


def _check_properties(world: World, pairing: Pairing, m: Received, phrases: str) -> None:
    props = dict(m.application_properties)
    sent_at = pairing.sent_at.get(m.message_id)
    for part in re.split(r",\s*|\s+and\s+(?=[a-z])", phrases.strip()):
        part = part.strip()
        if part == "no session id":
            assert m.session_id is None, f"{m.message_id!r} has session id {m.session_id!r}"
        elif part == "no time to live":
            assert m.time_to_live is None, f"{m.message_id!r} has time to live {m.time_to_live!r}"
        elif part == "no scheduled enqueue time":
            assert m.scheduled_enqueue_time is None, f"{m.message_id!r} is scheduled at {m.scheduled_enqueue_time}"
        elif mm := re.fullmatch(r'session "([^"]+)"', part):
            assert m.session_id == mm[1], f"{m.message_id!r} has session id {m.session_id!r}"
        elif mm := re.fullmatch(r"time to live " + DURATION, part):
            assert m.time_to_live == duration(mm["n"], mm["unit"]), f"{m.message_id!r} has time to live {m.time_to_live}"
        elif mm := re.fullmatch(r"scheduled enqueue time at its send time plus " + DURATION, part):
            expected = sent_at + duration(mm["n"], mm["unit"])
            assert m.scheduled_enqueue_time == expected, f"{m.message_id!r} is scheduled at {m.scheduled_enqueue_time}, expected {expected}"
        elif mm := re.fullmatch(r'state "([^"]+)"', part):
            assert m.state == mm[1], f"{m.message_id!r} is in state {m.state!r}"
        elif mm := re.fullmatch(r'no property "([^"]+)"', part):
            assert mm[1] not in props, f"{m.message_id!r} has property {mm[1]!r} = {props[mm[1]]!r}"
        elif mm := re.fullmatch(r'no property starting with "([^"]+)"', part):
            found = [k for k in props if k.startswith(mm[1])]
            assert not found, f"{m.message_id!r} has properties {found}"
        elif mm := re.fullmatch(r'property "([^"]+)" (?:= (?P<value>.+)|naming "(?P<entity>[^"]+)")', part):
            name = mm[1]
            assert name in props, f"{m.message_id!r} has no property {name!r} (it has {sorted(props)})"
            if mm["entity"]:
                expected: Any = world.path(mm["entity"])
            elif q := re.fullmatch(r'"([^"]*)"', mm["value"]):
                expected = q[1]
            elif d := re.fullmatch(r"its send time plus " + DURATION, mm["value"]):
                expected = sent_at + duration(d["n"], d["unit"])
            elif d := re.fullmatch(DURATION, mm["value"]):
                expected = duration(d["n"], d["unit"])
            else:
                expected = int(mm["value"])
            assert props[name] == expected, f"{m.message_id!r} has {name} = {props[name]!r}, expected {expected!r}"
        elif part == "never expires":
            assert m.expires_at is None, f"{m.message_id!r} expires at {m.expires_at}"
        else:
            raise ValueError(f"unknown message property phrase {part!r} in {phrases!r}")


@step(r'the backlog copy of "(?P<mid>[^"]+)" (?:has|is in) (?P<phrases>.+)')
def backlog_copy_has(world: World, pairing: Pairing, mid: str, phrases: str) -> None:
    world.require_no_pending_error()
    _check_properties(world, pairing, pairing.backlog_copy(mid), phrases)


@step(r'the backlog copy of "(?P<mid>[^"]+)" never expires')
def backlog_copy_never_expires(world: World, pairing: Pairing, mid: str) -> None:
    _check_properties(world, pairing, pairing.backlog_copy(mid), "never expires")


@step(r'the message "(?P<mid>[^"]+)" in "(?P<entity>[^"]+)" has (?P<phrases>.+)')
def message_in_entity_has(world: World, pairing: Pairing, mid: str, entity: str, phrases: str) -> None:
    found = [m for m in world.peek_all(entity) if m.message_id == mid]
    assert len(found) == 1, f"peeking {entity!r} shows {len(found)} copies of {mid!r}"
    _check_properties(world, pairing, found[0], phrases)


# -------------------------------------------------------------------- pings


def _ping_ops(pairing: Pairing, f: str, entity: str, world: World) -> list:
    """The pings factory ``f`` sent to the primary ``entity``, as the primary target saw them
    (metered sends of ping messages, accepted or refused), not the factory's own log."""
    path = world.path(entity).lower()
    return [
        op for op in pairing.operations(f)
        if op.role == PRIMARY and op.kind == "send" and op.path.lower() == path
        and op.messages and all(is_ping(m.content_type) for m in op.messages)
    ]


def _failover_anchor(pairing: Pairing, f: str, entity: str, world: World) -> int:
    path = world.path(entity).lower()
    times = [t for t, e in pairing.factory(f).failovers if e.lower() == path]
    if not times:
        raise AssertionError(f"factory {f!r} never failed {entity!r} over")
    # The factory's own record, checked against what the primary saw (PAIR-FAIL-004): an entity
    # fails over FailoverInterval after a send to it failed (the failing send that engages it
    # returns at that instant when the interval is zero), up to ``slack`` later in real time.
    interval, slack = pairing.factory(f).options.failover_interval, pairing.slack()
    failed = [op.time for op in pairing.operations(f) if op.role == PRIMARY and op.kind == "send" and not op.ok
              and op.path.lower() == path and not any(is_ping(m.content_type) for m in op.messages)]
    assert any(t + interval <= times[0] <= t + interval + slack for t in failed), (
        f"factory {f!r} says {entity!r} failed over at {times[0]} ms, but no send to it failed {interval} ms "
        f"(+{slack}) before then: its sends failed at {failed} ms")
    return times[0]


def _close_to(actual: list[int], expected: list[int], slack: int) -> bool:
    return len(actual) == len(expected) and all(e <= a <= e + slack for a, e in zip(actual, expected))


@step(r'factory "(?P<f>[^"]+)" pinged "(?P<entity>[^"]+)" (?P<n>\d+) times?')
def pinged_times(world: World, pairing: Pairing, f: str, entity: str, n: str) -> None:
    pings = [op.started for op in _ping_ops(pairing, f, entity, world)]
    assert len(pings) == int(n), f"factory {f!r} pinged {entity!r} {len(pings)} times, at {pings} ms"


@step(r'factory "(?P<f>[^"]+)" pinged "(?P<entity>[^"]+)" at (?P<times>\d+(?:, \d+)*) (?P<unit>seconds|minutes) after its failover')
def pinged_at(world: World, pairing: Pairing, f: str, entity: str, times: str, unit: str) -> None:
    """Each ping began at its due instant (PAIR-PING-003: one interval after the failover, then
    every interval), measured from the failover (when the failing send that engaged it returned),
    no earlier and at most ``Pairing.slack`` later."""
    anchor = _failover_anchor(pairing, f, entity, world)
    expected = [anchor + duration(t, unit) for t in times.split(", ")]
    pings = [op.started for op in _ping_ops(pairing, f, entity, world)]
    assert _close_to(pings, expected, pairing.slack()), (
        f"factory {f!r} pinged {entity!r} at {[p - anchor for p in pings]} ms after its failover, "
        f"expected {[e - anchor for e in expected]} (+{pairing.slack()} ms)"
    )


@step(r'factory "(?P<f>[^"]+)" pinged "(?P<entity>[^"]+)" every (?P<n>\d+) seconds since its failover')
def pinged_every(world: World, pairing: Pairing, f: str, entity: str, n: str) -> None:
    """PAIR-PING-003: one ping one interval after the failover, then one every interval, up to now
    (a ping due within ``slack`` of now may not have gone yet)."""
    anchor, interval, now, slack = _failover_anchor(pairing, f, entity, world), int(n) * SECOND, world.target.now(), pairing.slack()
    expected = [anchor + k * interval for k in range(1, (now - anchor) // interval + 1)]
    pings = [op.started for op in _ping_ops(pairing, f, entity, world)]
    if len(pings) == len(expected) - 1 and expected and expected[-1] > now - slack:
        expected = expected[:-1]
    assert expected and _close_to(pings, expected, slack), (
        f"factory {f!r} pinged {entity!r} at {[p - anchor for p in pings]} ms after its failover, "
        f"expected {[e - anchor for e in expected]} (+{slack} ms)"
    )


@step(r'factory "(?P<f>[^"]+)" never pinged "(?P<entity>[^"]+)"')
def never_pinged(world: World, pairing: Pairing, f: str, entity: str) -> None:
    pings = [op.started for op in _ping_ops(pairing, f, entity, world)]
    assert pings == [], f"factory {f!r} pinged {entity!r} at {pings} ms"


@step(
    r'every ping factory "(?P<f>[^"]+)" sent is an empty message with content type "(?P<ct>[^"]+)"'
    r" and time to live " + DURATION
)
def every_ping_is(pairing: Pairing, f: str, ct: str, n: str, unit: str) -> None:
    pings = pairing.factory(f).pings
    assert pings, f"factory {f!r} sent no ping"
    sent = [m for op in pairing.operations(f) if op.role == PRIMARY and op.kind == "send" for m in op.messages]
    for ping in pings:
        m = ping.message
        assert any(s is m for s in sent), f"the ping of {ping.time} ms never reached the primary target"
        assert m.body == b"" and not m.application_properties, f"a ping is not empty: {m}"
        assert m.content_type == ct, f"a ping has content type {m.content_type!r}"
        assert m.time_to_live == duration(n, unit), f"a ping has time to live {m.time_to_live} ms"


@step(r'the primary was billed (?P<n>\d+) sends? of (?:a )?pings? to "(?P<entity>[^"]+)"')
def billed_pings(world: World, pairing: Pairing, n: str, entity: str) -> None:
    path = world.path(entity).lower()
    billed = [
        op for op in pairing.meter.operations
        if op.ok and op.role == PRIMARY and op.kind == "send" and op.path.lower() == path
        and all(is_ping(m.content_type) for m in op.messages)
    ]
    assert len(billed) == int(n), f"{len(billed)} ping sends to {entity!r} were billed"


# ------------------------------------------------------------------ metering


@step(r'factory "(?P<f>[^"]+)" sent application messages to the primary "(?P<entity>[^"]+)" (?P<n>\d+) times?')
def application_sends_to_primary(world: World, pairing: Pairing, f: str, entity: str, n: str) -> None:
    path = world.path(entity).lower()
    sends = [
        op for op in pairing.operations(f)
        if op.role == PRIMARY and op.kind == "send" and op.path.lower() == path
        and not any(is_ping(m.content_type) for m in op.messages)
    ]
    assert len(sends) == int(n), f"factory {f!r} attempted {len(sends)} application sends to the primary {entity!r}"


@step(r'factory "(?P<f>[^"]+)" sent to backlog queue (?P<i>\d+) (?P<n>\d+) times?')
def sends_to_backlog_queue(pairing: Pairing, f: str, i: str, n: str) -> None:
    path = pairing.backlog_path(i).lower()
    sends = [op for op in pairing.operations(f) if op.role == SECONDARY and op.kind == "send" and op.path.lower() == path]
    assert len(sends) == int(n), f"factory {f!r} attempted {len(sends)} sends to backlog queue {i}"


@step(r'factory "(?P<f>[^"]+)" has backlog queues (?P<ids>\d+(?:, \d+)*) in rotation')
def rotation_is(pairing: Pairing, f: str, ids: str) -> None:
    rotation = pairing.factory(f).failover.backlog_choices()
    assert rotation == [int(i) for i in ids.split(", ")], f"factory {f!r} has {rotation} in rotation"


@step(r'factory "(?P<f>[^"]+)" never received from a backlog queue')
def never_received_backlog(pairing: Pairing, f: str) -> None:
    receives = [op for op in pairing.operations(f) if op.role == SECONDARY and op.kind == "receive"]
    assert receives == [], f"factory {f!r} received from backlog queues {len(receives)} times"


@step(r'factory "(?P<f>[^"]+)" never received from backlog queue (?P<i>\d+)')
def never_received_backlog_queue(pairing: Pairing, f: str, i: str) -> None:
    path = pairing.backlog_path(i).lower()
    receives = [op for op in pairing.operations(f) if op.role == SECONDARY and op.kind == "receive" and op.path.lower() == path]
    assert receives == [], f"factory {f!r} received from backlog queue {i} {len(receives)} times"


@step(r'factory "(?P<f>[^"]+)" has failed "(?P<entity>[^"]+)" over')
def has_failed_over(world: World, pairing: Pairing, f: str, entity: str) -> None:
    assert pairing.factory(f).failover.failed_over(world.path(entity)), f"factory {f!r} sends {entity!r} to the primary"


BILLED = {
    (SECONDARY, "send"): "send to the backlog queue",
    (SECONDARY, "receive"): "receive from the backlog queue",
    (PRIMARY, "send"): "send to the primary entity",
    (PRIMARY, "receive"): "receive from the primary entity",
}


@step(r'message "(?P<mid>[^"]+)" was billed these operations')
def billed_operations(pairing: Pairing, mid: str, datatable: list[list[str]]) -> None:
    header, *rows = datatable
    assert header == ["operation"], f"the table's header is {header}"
    billed = [BILLED[(op.role, op.kind)] for op in pairing.meter.for_message(mid)]
    assert billed == [r[0] for r in rows], f"{mid!r} was billed {billed}"


# -------------------------------------------------------------------- syphon


@step(r'the syphon of "(?P<f>[^"]+)" started receives on backlog queue (?P<i>\d+) at (?P<times>\d+(?:, \d+)*) (?P<unit>seconds|minutes)')
def syphon_polls(pairing: Pairing, f: str, i: str, times: str, unit: str) -> None:
    syphon = pairing.factory(f).syphon
    assert syphon is not None, f"factory {f!r} runs no syphon"
    started = [t - pairing.t0 for t, index in syphon.poll_log if index == int(i)]
    expected = [duration(t, unit) for t in times.split(", ")]
    # Exact on the model's clock. On a clock that also runs in real time, the steps between the
    # scenario's waits took some (sends refused by a primary that is down, through the SDK: seconds),
    # which shifts every later instant by up to that much.
    in_steps = max(0, pairing.world.target.now() - pairing.t0 - pairing.waited)
    slack = pairing.slack()
    late = len(started) == len(expected) and all(e - slack <= s <= e + in_steps + slack for s, e in zip(started, expected))
    assert started == expected or late, (
        f"receives on backlog queue {i} started at {started} ms, expected {expected}"
        + (f" (give or take {slack} ms, and up to {in_steps} ms later: the time the steps took)" if slack or in_steps else ""))


@step(r'the syphon of "(?P<f>[^"]+)" started (?P<n>\d+) receive calls in the first ' + r"(?:(?P<k>\d+) )?(?P<unit>hour|day|days)")
def syphon_calls(pairing: Pairing, f: str, n: str, k: str | None, unit: str) -> None:
    syphon = pairing.factory(f).syphon
    assert syphon is not None, f"factory {f!r} runs no syphon"
    window = duration(k or "1", unit)
    calls = sum(1 for t, _ in syphon.poll_log if t - pairing.t0 < window)
    assert calls == int(n), f"the syphon started {calls} receive calls in the first {k or 1} {unit}"


# --------------------------------------------------------------- close/fault


@step(r'the (?P<which>primary|secondary) factory of "(?P<f>[^"]+)" (?P<how>closes|faults)')
def factory_ends(pairing: Pairing, which: str, f: str, how: str) -> None:
    factory = pairing.factory(f)
    (factory.close if how == "closes" else factory.fault)(which)


@step(r'the (?P<which>primary|secondary) factory of "(?P<f>[^"]+)" is (?P<state>open|closed|faulted)')
def factory_state(pairing: Pairing, which: str, f: str, state: str) -> None:
    actual = pairing.factory(f).state(which)
    assert actual == state, f"the {which} factory of {f!r} is {actual}"
