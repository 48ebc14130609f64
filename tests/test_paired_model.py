"""The paired-namespace state machines of ``sbreference.paired``, on their own, and ``sbconform cost``.

Model-level: these exercise the reference client logic directly, not a target.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sbreference import DAY, HOUR, MINUTE, SECOND, EntityDescription, ErrorCode, Message, ServiceBusError
from sbreference.paired import (
    BACKLOG_QUEUE_PROPERTIES,
    CLOSE_GRACE,
    CLOSED,
    FAULTED,
    OPEN,
    PRIMARY,
    SECONDARY,
    X_MS_PATH,
    FactoryPair,
    FailoverSender,
    Forward,
    DeadLetter,
    PairedNamespaceOptions,
    Send,
    Syphon,
    backlog_path,
    backlog_queue_description,
    from_backlog,
    idle_receive_calls,
    plan_backlog_queues,
    starts_failover_timer,
    to_backlog,
)

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.needs("model-internals")


# ------------------------------------------------------------------ backlog


@pytest.mark.clauses("PAIR-BACKLOG-001")
def test_backlog_paths_are_named_after_the_primary_namespace() -> None:
    assert backlog_path("contoso", 0) == "contoso/x-servicebus-transfer/0"
    assert backlog_path("contoso", 7) == "contoso/x-servicebus-transfer/7"


@pytest.mark.clauses("PAIR-BACKLOG-002")
def test_the_backlog_queue_description_sets_the_documented_properties_and_defaults_the_rest() -> None:
    d, default = backlog_queue_description(), EntityDescription()
    assert (d.max_size_in_megabytes, d.max_delivery_count, d.lock_duration) == (5120, 2**31 - 1, 1 * MINUTE)
    assert d.dead_lettering_on_message_expiration and d.enable_batched_operations
    for name in EntityDescription.field_names():
        if name not in BACKLOG_QUEUE_PROPERTIES:
            assert getattr(d, name) == getattr(default, name), name


@pytest.mark.clauses("PAIR-BACKLOG-003", "PAIR-BACKLOG-004", "PAIR-BACKLOG-005")
def test_only_missing_backlog_queues_are_created() -> None:
    paths = [backlog_path("contoso", i) for i in range(3)]
    existing = [backlog_path("Contoso", 1), backlog_path("contoso", 7)]
    assert [c.path for c in plan_backlog_queues(paths, existing)] == [paths[0], paths[2]]
    assert plan_backlog_queues(paths, paths) == []


# ------------------------------------------------------------------ options


@pytest.mark.clauses("PAIR-OPT-001", "PAIR-OPT-002", "PAIR-PING-003")
def test_options_defaults_and_refusals() -> None:
    o = PairedNamespaceOptions()
    assert (o.backlog_queue_count, o.failover_interval, o.ping_primary_interval, o.enable_syphon) == (10, MINUTE, MINUTE, False)
    for bad, field in ((dict(backlog_queue_count=0), "backlog_queue_count"), (dict(failover_interval=-1), "failover_interval"),
                       (dict(ping_primary_interval=0), "ping_primary_interval")):
        with pytest.raises(ServiceBusError) as info:
            PairedNamespaceOptions(**bad)
        assert info.value.code is ErrorCode.ARGUMENT_ERROR and field in info.value.text


# ------------------------------------------------------------------ rewrite

messages = st.builds(
    Message,
    body=st.binary(max_size=20),
    message_id=st.text(min_size=1, max_size=8),
    session_id=st.none() | st.text(min_size=1, max_size=8),
    time_to_live=st.none() | st.integers(1, 10**12),
    scheduled_enqueue_time=st.none() | st.integers(0, 10**12),
    content_type=st.none() | st.text(max_size=8),
    subject=st.none() | st.text(max_size=8),
    application_properties=st.dictionaries(st.text("abcdefg-", min_size=1, max_size=6), st.integers() | st.text(max_size=5), max_size=3),
)


@pytest.mark.clauses("PAIR-RENAME-001", "PAIR-RENAME-002", "PAIR-RENAME-003", "PAIR-RENAME-004", "PAIR-SYPH-003")
@given(message=messages, destination=st.sampled_from(["q", "orders/topic", "x"]))
def test_rewriting_for_the_backlog_and_back_restores_the_message(message: Message, destination: str) -> None:
    backlog = to_backlog(message, destination)
    assert (backlog.session_id, backlog.time_to_live, backlog.scheduled_enqueue_time) == (None, None, None)
    props = backlog.application_properties
    assert props[X_MS_PATH] == destination
    assert props.get("x-ms-sessionid") == message.session_id
    assert props.get("x-ms-timetolive") == message.time_to_live
    assert props.get("x-ms-scheduledenqueuetimeutc") == message.scheduled_enqueue_time
    assert from_backlog(backlog) == (destination, message)


@pytest.mark.clauses("PAIR-SIZE-001")
def test_a_message_too_large_once_rewritten_gets_a_clear_size_error_and_the_queue_stays() -> None:
    from sbreference import message_size

    m = Message(b"x" * 100, message_id="big", session_id="s")
    assert message_size(to_backlog(m, "q")) > message_size(m)
    f = FailoverSender(PairedNamespaceOptions(backlog_queue_count=1, failover_interval=0), "ns")
    down = ServiceBusError(ErrorCode.ENTITY_UNAVAILABLE, "down", transient=False)
    to_backlog_send = f.failed("c", "q", m, f.start("c", "q", m, 0), down, 0)
    too_big = ServiceBusError(ErrorCode.MESSAGE_SIZE_EXCEEDED, "The message of 262200 bytes exceeds 262144 bytes.", "t-1")
    error = f.failed("c", "q", m, to_backlog_send, too_big, 0).error
    assert error.code is ErrorCode.MESSAGE_SIZE_EXCEEDED and error.tracking_id == "t-1" and not error.transient
    for part in ("'q'", "'big'", "ns/x-servicebus-transfer/0", "262200 bytes"):
        assert part in error.text, error.text
    assert f.backlog_choices() == [0]


# ------------------------------------------------------------------ failover


@pytest.mark.clauses("PAIR-FAIL-002", "PAIR-FAIL-003")
@pytest.mark.parametrize(
    ("code", "transient", "counts"),
    [
        ("entity-unavailable", False, True), ("quota-exceeded", False, True), ("entity-not-found", False, True),
        ("timeout", True, True), ("timeout", False, True),
        ("server-busy", True, False), ("entity-unavailable", True, True), ("connection-lost", True, False),
        ("unauthorized", False, False), ("argument-error", False, False), ("invalid-operation", False, False),
    ],
)
def test_which_failures_start_the_failover_timer(code: str, transient: bool, counts: bool) -> None:
    """Decided from the error's AMQP condition (sbreference/paired/transience.py), whatever the
    ``transient`` flag a target or SDK put on it: entity-disabled counts even if called retryable."""
    assert starts_failover_timer(ServiceBusError(ErrorCode(code), "x", transient=transient)) is counts


@pytest.mark.clauses("PAIR-ROUTE-005", "PAIR-ROUTE-002")
def test_backlog_picks_are_made_among_the_queues_in_rotation() -> None:
    f = FailoverSender(PairedNamespaceOptions(backlog_queue_count=3, failover_interval=0), "ns")
    down = ServiceBusError(ErrorCode.ENTITY_UNAVAILABLE, "down", transient=False)
    first = f.start("c1", "q", Message(b"m"), 0)
    assert first == Send(PRIMARY, "q", Message(b"m"))
    seen: list[list[int]] = []

    def choose(allowed):
        seen.append(list(allowed))
        return allowed[-1]

    to_backlog_send = f.failed("c1", "q", Message(b"m"), first, down, 0, choose)
    assert (seen, to_backlog_send.backlog_index) == ([[0, 1, 2]], 2)
    again = f.failed("c1", "q", Message(b"m"), to_backlog_send, down, 0, choose)
    assert (seen[-1], again.backlog_index, f.backlog_choices()) == ([0, 1], 1, [0, 1])
    with pytest.raises(ValueError, match="not among the allowed"):
        f.start("c2", "q", Message(b"m"), 0, choose=lambda allowed: 2)


# ------------------------------------------------------------------ syphon


@pytest.mark.clauses("PAIR-SYPH-004", "PAIR-SYPH-005")
def test_an_idle_syphon_polls_every_queue_every_15_minutes() -> None:
    assert [idle_receive_calls(10, d) for d in (HOUR, DAY, 30 * DAY)] == [40, 960, 28800]
    assert idle_receive_calls(1, 15 * MINUTE) == 1 and idle_receive_calls(1, 15 * MINUTE + 1) == 2


def test_a_backlog_message_without_a_destination_is_dead_lettered() -> None:
    s = Syphon(1, 0)
    out = s.received(0, [(Message(b"stray", message_id="stray"), "h1"), (to_backlog(Message(b"m"), "q"), "h2")], 5)
    assert isinstance(out[0], DeadLetter) and out[0].handle == "h1"
    assert isinstance(out[1], Forward) and (out[1].destination, out[1].handle) == ("q", "h2")
    assert s.receive_calls == 2 and s.poll_log == [(0, 0), (5, 0)]


# ------------------------------------------------------------ close / fault

events = st.lists(
    st.tuples(st.sampled_from(["close", "fault", "wait"]), st.sampled_from([PRIMARY, SECONDARY]), st.integers(0, 7 * SECOND)),
    max_size=8,
)


@pytest.mark.clauses("PAIR-CLOSE-001", "PAIR-CLOSE-002")
@given(hosts_syphon=st.booleans(), events=events)
def test_the_still_open_factory_is_faulted_exactly_5_seconds_after_its_partner_ended(hosts_syphon: bool, events) -> None:
    pair, now, ended_at = FactoryPair(hosts_syphon), 0, None
    expected = {PRIMARY: OPEN, SECONDARY: OPEN}
    for kind, which, delay in events:
        if kind == "wait":
            target = now + delay
            while (due := pair.next_due()) is not None and due <= target:
                pair.tick(due)
                assert due == ended_at + CLOSE_GRACE
                for w in expected:
                    if expected[w] == OPEN:
                        expected[w] = FAULTED
            now = target
            pair.tick(now)
        else:
            (pair.closed if kind == "close" else pair.faulted)(which, now)
            if expected[which] == OPEN:
                expected[which] = CLOSED if kind == "close" else FAULTED
                if ended_at is None:
                    ended_at = now
        if not hosts_syphon:
            assert pair.next_due() is None
        assert pair.state == expected


# ------------------------------------------------------------------ the CLI


def sbconform(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sbconform.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.clauses("PAIR-SYPH-005", "PAIR-COST-001")
def test_sbconform_cost_prints_the_seed_figures() -> None:
    run = sbconform("cost", "--backlog-queues", "10", "--days", "30")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert "receive calls per hour: 40" in lines
    assert "receive calls per day: 960" in lines
    assert "receive calls in 30 days: 28800" in lines
    assert "billed operations per message moved through a backlog queue: 4" in lines
    assert [l.strip()[3:] for l in lines[-4:]] == [
        "send to the backlog queue", "receive from the backlog queue", "send to the primary entity", "receive from the primary entity",
    ]
    two = sbconform("cost", "--backlog-queues", "3", "--days", "2")
    assert "receive calls per hour: 12" in two.stdout and "receive calls in 2 days: 576" in two.stdout


@pytest.mark.parametrize(("args", "says"), [
    (["--backlog-queues", "0"], "--backlog-queues: must be at least 1, got 0"),
    (["--backlog-queues", "ten"], "--backlog-queues: expected a whole number, got 'ten'"),
    (["--backlog-queues", "10", "--days", "-3"], "--days: must be at least 1, got -3"),
    ([], "the following arguments are required: --backlog-queues"),
])
def test_sbconform_cost_refuses_bad_input_clearly(args: list[str], says: str) -> None:
    run = sbconform("cost", *args)
    assert run.returncode == 2 and says in run.stderr, run.stderr


# ----------------------------------------------------------------- mutants


def test_the_ping_scenarios_catch_a_broker_that_delivers_pings() -> None:
    """Tests the kit, not a target: names no clause."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "test_features.py"),
         "--sb-target", "mutant-pings-delivered", "-k", "never_delivers_a_ping or no_subscription_delivers_a_ping or never_reach_its_receivers"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert "3 failed" in result.stdout, result.stdout[-2000:]


def test_a_target_without_paired_namespaces_skips_the_client_clauses_but_not_the_broker_rule(tmp_path: Path) -> None:
    """Tests the kit's grading, not a target: names no clause."""
    run = sbconform("certify", "--target", "reference", "--option", "without=paired-namespaces", "--report-dir", str(tmp_path),
                    "--", "tests/test_features.py", "-k", "ping")
    assert run.returncode == 0, run.stdout + run.stderr
    import json

    clauses = json.loads((tmp_path / "report.json").read_text())["clauses"]
    assert clauses["PAIR-PING-002"]["status"] == "pass"  # two of its scenarios need nothing paired
    assert clauses["PAIR-PING-001"]["status"] == "skip"
    assert "lacks capability 'paired-namespaces'" in clauses["PAIR-PING-001"]["reason"]


# ------------------------------------------------------- pings and sessions


@pytest.mark.clauses("PAIR-PING-004", "PAIR-PING-001")
def test_a_session_queue_fails_back_once_its_ping_is_delivered() -> None:
    """Issue 13: the ping had no SessionId, so a primary queue requiring sessions refused it
    (InvalidOperation) and the entity never failed back. The .NET client's ping carries a fresh
    SessionId (Guid.NewGuid().ToString("N")): sbreference/paired/ping.py."""
    from sbconform.paired import PairedFactory
    from sbconform.targets.reference import ReferenceTarget

    primary, secondary = ReferenceTarget(), ReferenceTarget()
    q = primary.create_queue("orders", requires_session=True)
    factory = PairedFactory(primary, secondary, PairedNamespaceOptions(backlog_queue_count=1, failover_interval=0, ping_primary_interval=5 * SECOND))
    factory.pair_namespace()
    client = factory.client(q)
    primary.make_unavailable(q, "entity-unavailable", False)
    assert client.send(Message(b"m1", message_id="m1", session_id="s1")) == [factory.backlog_paths[0]]
    primary.make_available(q)
    factory.run(5 * SECOND)
    assert [p.ok for p in factory.pings] == [True]
    ping = factory.pings[0].message
    assert ping.session_id and len(ping.session_id) == 32 and ping.body == b""
    assert client.send(Message(b"m2", message_id="m2", session_id="s1")) == [q]


@pytest.mark.clauses("PAIR-SYPH-002")
def test_a_message_back_before_its_retry_instant_does_not_hide_the_next_retry() -> None:
    """The syphon looks at a backlog queue again when a message it could not forward comes back
    (its lock's end, as the client reads it). If the message comes back earlier than computed
    (a broker's clock a little ahead) and fails again, the next retry must be the new lock's end,
    not the stale one: else the message waits for the 15-minute poll (found through the SDK)."""
    from sbreference.paired.rewrite import to_backlog
    from sbreference.paired.syphon import Syphon

    syphon = Syphon(1, 0)
    message = to_backlog(Message(b"m", message_id="m"), "t")
    [first] = syphon.received(0, [(message, "h1")], 1_000)
    syphon.forward_failed(0, 61_000)  # locked until 61 s as the client reads it
    [again] = syphon.received(0, [(message, "h2")], 60_900)  # back 100 ms early
    syphon.forward_failed(0, 121_000)
    syphon.tick(61_000)
    assert syphon.next_due() == 121_000


@pytest.mark.clauses("PAIR-SYPH-002", "PAIR-API-001")
def test_a_refused_message_back_within_the_clock_tolerance_is_forwarded_once_its_destination_is_up() -> None:
    """The syphon sends a destination nothing until the lock of a message it refused has ended
    (a refused send costs a round trip). That window ended at the lock's end *plus* the clock
    tolerance, so when the refused message itself came back inside the tolerance (the ping woke
    the syphon then) it was not sent but locked for one more lock duration: through the SDK,
    under load, "peeking q shows m1" failed in CI. The message coming back is the proof that its
    lock ended: it is tried again."""
    from sbconform.paired import PairedFactory
    from sbconform.targets.reference import ReferenceTarget

    class SkewedClock(ReferenceTarget):
        clock_tolerance = 300  # as the SDK target declares

    primary, secondary = SkewedClock(), SkewedClock()
    q = primary.create_queue("q")
    factory = PairedFactory(primary, secondary, PairedNamespaceOptions(backlog_queue_count=1, failover_interval=0, ping_primary_interval=60 * SECOND, enable_syphon=True))
    factory.pair_namespace()
    primary.make_unavailable(q, "entity-unavailable", False)
    assert factory.client(q).send(Message(b"m1", message_id="m1")) == [factory.backlog_paths[0]]
    factory.run(30 * SECOND)  # the syphon took m1 and could not forward it: locked for a minute
    primary.make_available(q)
    factory.run(31 * SECOND)  # the ping at 60 s wakes the syphon as m1's lock ends
    receiver = primary.receiver(q)
    assert [m.message_id for m in primary.peek(receiver, 10)] == ["m1"]
