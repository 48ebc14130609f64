"""Recording: every Target call becomes invoke + ok/fail events; --sb-trace records tests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from sbreference import ErrorCode, Message, ServiceBusError
from sbconform.targets import RECEIVE_AND_DELETE
from sbconform.targets.reference import ReferenceTarget
from sbconform.trace.io import JsonlWriter, read_jsonl
from sbconform.trace.recorder import ADMIN, RecordingTarget, TestTrace, TraceRecorder, trace_file_name

REPO = Path(__file__).resolve().parent.parent


def check_pairing(events: list[dict]) -> dict[int, list[dict]]:
    """Every op has one invoke, first; then one fail/info, or one or more oks; pos counts from 0."""
    assert [e["pos"] for e in events] == list(range(len(events)))
    ops: dict[int, list[dict]] = defaultdict(list)
    for e in events:
        ops[e["op_id"]].append(e)
    for op_id, steps in ops.items():
        phases = [s["phase"] for s in steps]
        assert phases[0] == "invoke", (op_id, phases)
        rest = phases[1:]
        assert rest, f"op {op_id} ({steps[0]['op']}) never completed"
        assert "invoke" not in rest, (op_id, phases)
        assert rest in (["fail"], ["info"]) or set(rest) == {"ok"}, (op_id, phases)
        assert len({(s["client"], s["op"]) for s in steps}) == 1, steps
        if rest == ["fail"]:
            assert steps[1]["error"], steps
        assert all(s["args"] is None for s in steps[1:]), steps  # args are the invoke's
    return ops


@pytest.fixture
def recorded(tmp_path: Path):
    path = tmp_path / "t.jsonl"
    recorder = TraceRecorder(JsonlWriter(path, "unit"), "unit")
    target = RecordingTarget(ReferenceTarget(), recorder)

    def events() -> list[dict]:
        return list(read_jsonl(path))

    yield target, events
    recorder.close()


def test_calls_become_paired_events_with_the_fields_of_the_format(recorded) -> None:
    target, events = recorded
    q = target.create_queue("q", lock_duration=5000, max_delivery_count=2)
    sender = target.sender(q)
    assert target.send(sender, [Message(b"a", message_id="m1"), Message(b"bb", message_id="m2")]) == [1, 2]
    assert target.send(sender, [Message(b"c", message_id="m3"), Message(b"d", message_id="m4")], batch=True) == [3, 4]
    receiver = target.receiver(q)
    got = target.receive(receiver, max_count=3)
    assert [m.message_id for m in got] == ["m1", "m2", "m3"]
    assert len(target.peek(receiver, 3)) == 3
    target.complete(receiver, got[0])
    target.wait(6000)  # the other locks expire
    with pytest.raises(ServiceBusError):
        target.complete(receiver, got[1])
    assert target.receive(target.receiver(q, RECEIVE_AND_DELETE), max_count=1, max_wait=0)[0].message_id == "m2"

    ops = check_pairing(events())
    by_op = defaultdict(list)
    for steps in ops.values():
        by_op[steps[0]["op"]].append(steps)
    create = by_op["create-entity"][0]
    assert create[0]["client"] == ADMIN and create[0]["entity"] == "q"
    assert json.loads(create[0]["args"]) == {"lock_duration": 5000, "max_delivery_count": 2}
    result = json.loads(create[1]["result"])
    assert result["description"]["max_delivery_count"] == 2 and result["description"]["requires_session"] is False
    assert result["kind"] == "queue" and result["path"] == "q"
    sends = by_op["send"]
    assert [s[1]["seq"] for s in sends] == [1, 2, 3, 4]
    assert all(s[1]["partition"] is None for s in sends)  # not partitioned
    assert [s[0]["message_id"] for s in sends] == ["m1", "m2", "m3", "m4"]
    batch_ids = {json.loads(s[0]["args"]).get("batch") for s in sends}
    assert batch_ids == {None, sends[2][0]["op_id"]}  # the batch's two sends share the first one's op id
    assert json.loads(sends[1][0]["args"])["body_size"] == 2
    receive = by_op["receive"][0]
    oks = [s for s in receive if s["phase"] == "ok"]
    assert [(s["message_id"], s["seq"], s["delivery_count"]) for s in oks] == [("m1", 1, 1), ("m2", 2, 1), ("m3", 3, 1)]
    assert all(isinstance(s["lock"], str) for s in oks)
    assert len({s["lock"] for s in oks}) == 3
    sender_client = sends[0][0]["client"]
    assert receive[0]["client"] != sender_client and receive[0]["conn"] == receive[0]["client"] + ".1"
    peeked = by_op["peek"][0][1:]
    assert [p["message_id"] for p in peeked] == ["m1", "m2", "m3"] and all(p["lock"] is None for p in peeked)
    complete_ok, complete_fail = by_op["complete"]
    assert complete_ok[1]["phase"] == "ok" and complete_ok[1]["lock"] == oks[0]["lock"]
    assert complete_fail[1]["phase"] == "fail" and complete_fail[1]["error"] == ErrorCode.MESSAGE_LOCK_LOST.value
    assert complete_fail[1]["time"] == 6000
    wait = by_op["wait"][0]
    assert json.loads(wait[0]["args"]) == {"ms": 6000} and (wait[0]["time"], wait[1]["time"]) == (0, 6000)
    rad = by_op["receive"][1]
    assert rad[1]["lock"] is None and json.loads(rad[0]["args"])["mode"] == RECEIVE_AND_DELETE


def test_an_empty_receive_is_one_ok_without_a_message(recorded) -> None:
    target, events = recorded
    receiver = target.receiver(target.create_queue("q"))
    assert target.receive(receiver, max_wait=500) == []
    ok = [e for e in events() if e["op"] == "receive" and e["phase"] == "ok"]
    assert len(ok) == 1 and ok[0]["message_id"] is None and ok[0]["time"] == 500


def test_faults_partitions_and_dropped_connections_are_recorded(recorded) -> None:
    target, events = recorded
    premium = target.premium_namespace(2)
    q = premium.create_queue("pq")
    sender = premium.sender(q)
    premium.send(sender, [Message(b"x", message_id="k1", partition_key="a")])
    receiver = premium.receiver(q)
    got = premium.receive(receiver)
    premium.drop_connection(receiver)
    premium.make_partition_unavailable(q, got[0].partition)
    premium.make_partition_available(q, got[0].partition)
    plain = target.create_queue("q")
    plain_sender = target.sender(plain)
    target.make_unavailable(plain, "server-busy", transient=True)
    with pytest.raises(ServiceBusError):
        target.send(plain_sender, [Message(b"y", message_id="y")])
    target.make_available(plain)

    ops = check_pairing(events())
    steps = [s for s in ops.values()]
    created = [s for s in steps if s[0]["op"] == "create-entity"]
    assert created[0][0]["entity"] == "1:pq"  # the second namespace of the trace
    assert json.loads(created[0][1]["result"])["partitions"] == 2
    assert json.loads(created[0][1]["result"])["description"]["enable_partitioning"] is True  # Premium: always
    assert created[1][0]["entity"] == "q"
    sent = [e for e in events() if e["op"] == "send" and e["phase"] == "ok"][0]
    assert sent["partition"] == got[0].partition and sent["seq"] == got[0].sequence_number
    delivered = [e for e in events() if e["op"] == "receive" and e["phase"] == "ok"][0]
    assert delivered["partition"] == got[0].partition and delivered["partition_key"] == "a"
    down = [s for s in steps if s[0]["op"] == "partition-down"][0]
    assert down[0]["partition"] == got[0].partition and down[0]["entity"] == "1:pq"
    drop = [s for s in steps if s[0]["op"] == "drop-connection"][0]
    assert drop[0]["conn"].endswith(".1") and json.loads(drop[1]["result"])["conn"].endswith(".2")
    outage = [s for s in steps if s[0]["op"] == "entity-down"][0]
    assert json.loads(outage[0]["args"]) == {"code": "server-busy", "transient": True}
    failed = [s for s in steps if s[0]["op"] == "send" and s[-1]["phase"] == "fail"][0]
    assert failed[-1]["error"] == "server-busy" and failed[-1]["message_id"] == "y"
    assert [s[0]["op"] for s in steps].count("entity-up") == 1


def test_sessions_and_scheduling_are_recorded(recorded) -> None:
    target, events = recorded
    q = target.create_queue("s", requires_session=True)
    sender = target.sender(q)
    target.send(sender, [Message(b"1", message_id="a", session_id="S")])
    [seq] = target.schedule(sender, [Message(b"2", message_id="b", session_id="S")], 10_000)
    target.cancel_scheduled(sender, [seq])
    session = target.accept_session(q)
    target.set_session_state(session, b"st")
    assert target.get_session_state(session) == b"st"
    [m] = target.receive(session)
    target.renew_session_lock(session)
    target.complete(session, m)
    target.close_handle(session)

    ops = check_pairing(events())
    by = {s[0]["op"]: s for s in ops.values()}
    assert by["schedule"][1]["seq"] == seq and json.loads(by["schedule"][0]["args"])["enqueue_time"] == 10_000
    assert by["cancel-scheduled"][0]["seq"] == seq
    assert by["accept-session"][1]["session"] == "S"
    assert json.loads(by["get-session-state"][1]["result"]) == {"state": "c3Q="}
    assert json.loads(by["renew-session-lock"][1]["result"])["locked_until"] > 0
    assert by["complete"][1]["session"] == "S" and by["complete"][1]["phase"] == "ok"
    assert by["close"][0]["client"] == by["accept-session"][0]["client"] == by["receive"][0]["client"]


def test_trace_file_names_are_safe_and_distinct() -> None:
    a = trace_file_name("tests/test_features.py::test_x[a/b]")
    b = trace_file_name("tests/test_features.py::test_x[a_b]")
    assert a != b and "/" not in a and ":" not in a and a.endswith(".jsonl")


def test_a_test_trace_is_made_only_when_a_target_is_recorded(tmp_path: Path) -> None:
    trace = TestTrace(tmp_path, "some::test")
    trace.close()
    assert list(tmp_path.iterdir()) == []


def run_pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def test_sb_trace_records_one_valid_trace_per_test(tmp_path: Path) -> None:
    run = run_pytest("tests/test_features.py", "--sb-clause", "SETTLE-LOCK-*", "--sb-clause", "PART-KEY-*", "--sb-clause", "PART-TXN-*",
                     "--sb-trace", str(tmp_path))
    assert run.returncode == 0, run.stdout + run.stderr
    passed = int(run.stdout.strip().splitlines()[-1].split(" passed")[0].split()[-1])
    files = sorted(tmp_path.glob("*.jsonl"))
    assert len(files) == passed > 5
    ops_seen = set()
    for file in files:
        events = list(read_jsonl(file))
        assert events, file
        assert {e["trace"] for e in events} == {events[0]["trace"]}
        assert events[0]["trace"].startswith("tests/test_features.py::")
        ops = check_pairing(events)
        ops_seen |= {s[0]["op"] for s in ops.values()}
    assert {"create-entity", "attach", "send", "receive", "complete", "close", "partition-down", "drop-connection"} <= ops_seen
    committed = []
    for file in files:
        events = list(read_jsonl(file))
        in_transactions = {e["op_id"] for e in events if json.loads(e["args"] or "{}").get("transaction")}
        committed += [e for e in events if e["op_id"] in in_transactions and e["phase"] == "ok"]
    assert committed and all(isinstance(e["seq"], int) for e in committed)  # the reference tells a transaction's numbers


def test_certify_trace_records_the_certified_run(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "sbconform.cli", "certify", "--target", "reference", "--report-dir",
                          str(tmp_path / "report"), "--trace", str(tmp_path / "traces"), "--clause", "SETTLE-DEFR-*", "--hypothesis-profile", "dev",
                          "--", "tests/test_features.py"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "PASSED for the" in run.stdout, run.stdout + run.stderr  # a narrowed run certifies nothing
    files = sorted((tmp_path / "traces").glob("*.jsonl"))
    assert files
    for file in files:
        events = list(read_jsonl(file))
        check_pairing(events)
    assert any(e["op"] == "receive-deferred" for file in files for e in read_jsonl(file))


def test_an_exception_that_is_not_a_broker_error_is_an_unknown_outcome(tmp_path: Path) -> None:
    class Broken(ReferenceTarget):
        def peek(self, receiver, max_count=1, from_sequence_number=1):
            raise RuntimeError("socket closed")

    path = tmp_path / "t.jsonl"
    recorder = TraceRecorder(JsonlWriter(path, "unit"), "unit")
    target = RecordingTarget(Broken(), recorder)
    receiver = target.receiver(target.create_queue("q"))
    with pytest.raises(RuntimeError):
        target.peek(receiver)
    recorder.close()
    info = [e for e in read_jsonl(path) if e["op"] == "peek"][-1]
    assert info["phase"] == "info" and info["error"] is None
    assert json.loads(info["result"]) == {"exception": "RuntimeError: socket closed"}



def test_a_discharge_that_timed_out_is_recorded_as_unknown_not_as_nothing_applied(recorded) -> None:
    """A commit whose answer never came may have happened: ``info``, not ``fail`` (a definite
    transaction error, and only that, means nothing of it was applied)."""
    from sbreference import ErrorCode, ServiceBusError

    target, events = recorded
    q = target.create_queue("q")
    inner = target.target.transaction_client()

    class Unanswered(type(inner)):
        def discharge(self, txn, commit):
            super().discharge(txn, commit)
            raise ServiceBusError(ErrorCode.TIMEOUT, "no answer")

    inner.__class__ = Unanswered
    from sbconform.trace.recorder import RecordingTransactionalClient

    client = RecordingTransactionalClient(target, inner)
    txn = client.declare()
    client.send(txn, q, [Message(b"x", message_id="t1")])
    with pytest.raises(ServiceBusError):
        client.discharge(txn, True)
    phases = [e["phase"] for e in events() if e["op"] == "send" and e["message_id"] == "t1"]
    assert phases == ["invoke", "info"], phases
