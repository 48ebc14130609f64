"""sbconform diff: equivalent traces despite tokens, times, names and allowed partition choices;
real differences listed with both positions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sbconform.trace.diff import Trace, compare, diff_paths
from sbconform.trace.io import JsonlWriter

REPO = Path(__file__).resolve().parent.parent


class Script:
    """Hand-made traces: ``op(...)`` writes an invoke and its outcome events."""

    def __init__(self, trace: str = "scenario", suffix: str = "", lock_base: int = 1, time_scale: int = 1, conn: str = ".1") -> None:
        self.events: list[dict] = []
        self.trace, self.suffix, self.lock, self.scale, self.conn = trace, suffix, lock_base, time_scale, conn
        self.op_id = 0

    def _event(self, client: str, op: str, phase: str, **fields) -> None:
        conn = None if client == "admin" else client + self.conn
        self.events.append({"trace": self.trace, "pos": len(self.events), "time": len(self.events) * self.scale,
                            "client": client, "conn": conn, "op_id": self.op_id, "op": op, "phase": phase, **fields})

    def op(self, client: str, op: str, entity: str | None, outcomes: list[dict] | None = None, phase: str = "ok", **fields) -> None:
        self.op_id += 1
        self._event(client, op, "invoke", entity=entity, **fields)
        if phase != "ok":
            self._event(client, op, phase, entity=entity, **fields)
            return
        for outcome in outcomes or [{}]:
            self._event(client, op, "ok", entity=entity, **{**fields, **outcome})

    def create(self, name: str, partitions: int | None = None) -> str:
        path = name + self.suffix
        result = {"path": path, **({"partitions": partitions} if partitions else {})}
        self.op_id += 1
        self._event("admin", "create-entity", "invoke", entity=name, args=json.dumps({"kind": "queue", "name": name}))
        self._event("admin", "create-entity", "ok", entity=path, result=json.dumps(result))
        return path

    def delivery(self, mid: str, dc: int = 1, partition: int | None = None, key: str | None = None) -> dict:
        self.lock += 1
        return {"message_id": mid, "seq": self.lock * 7, "lock": f"tok-{self.lock}", "delivery_count": dc,
                "partition": partition, "partition_key": key}

    def write(self, path: Path) -> Path:
        with JsonlWriter(path, self.trace) as writer:
            writer.write_all(self.events)
        return path


def scenario(s: Script, *, fail_complete: str | None = None, second_dc: int = 2, keyed_partition: int = 3,
             keyless: tuple[int, int] = (0, 1), extra_receive: bool = False) -> Script:
    q = s.create("q")
    pq = s.create("pq", partitions=4)
    s.op("c1", "attach", q)
    s.op("c1", "send", q, message_id="m1", outcomes=[{"seq": 1}])
    s.op("c1", "send", q, message_id="m2", outcomes=[{"seq": 2}])
    s.op("c2", "attach", q)
    s.op("c2", "receive", q, outcomes=[s.delivery("m1"), s.delivery("m2")])
    if fail_complete:
        s.op("c2", "complete", q, message_id="m1", lock="x", phase="fail", error=fail_complete)
    else:
        s.op("c2", "complete", q, message_id="m1", lock="x")
    s.op("c2", "abandon", q, message_id="m2", lock="y")
    s.op("c2", "receive", q, outcomes=[s.delivery("m2", dc=second_dc)])
    s.op("admin", "wait", None, args=json.dumps({"ms": 5000}))
    s.op("c3", "attach", pq)
    s.op("c3", "receive", pq, outcomes=[s.delivery("k1", partition=keyed_partition, key="K"),
                                        s.delivery("u1", partition=keyless[0])])
    s.op("c3", "receive", pq, outcomes=[s.delivery("u2", partition=keyless[1])])
    if extra_receive:
        s.op("c3", "receive", pq, outcomes=[{"result": json.dumps({"count": 0})}])
    return s


def test_tokens_times_names_and_allowed_partition_choices_are_not_differences() -> None:
    a = scenario(Script())
    b = scenario(Script(suffix="-7f3a", lock_base=100, time_scale=13, conn=".9"), keyless=(2, 0))
    assert compare(Trace(a.events), Trace(b.events)) == []


def test_real_differences_are_listed_with_both_positions() -> None:
    a = scenario(Script())
    b = scenario(Script(suffix="-x"), fail_complete="message-lock-lost", second_dc=1, keyed_partition=1, extra_receive=True)
    diffs = compare(Trace(a.events), Trace(b.events))
    text = [str(d) for d in diffs]
    assert len(diffs) == 4, text
    failed, counts, partition, only = diffs
    assert "complete: A ok, B fail message-lock-lost" in failed.what and failed.client == "c2" and failed.entity == "q"
    complete_a = next(e["pos"] for e in a.events if e["op"] == "complete")
    complete_b = next(e["pos"] for e in b.events if e["op"] == "complete")
    assert (failed.pos_a, failed.pos_b) == (complete_a, complete_b)
    assert "different delivery counts" in counts.what and "m2(dc 2)" in counts.what and "m2(dc 1)" in counts.what
    assert "keyed message k1" in partition.what and "partition 3 in A, 1 in B" in partition.what
    assert only.what.startswith("receive only in B") and only.pos_a is None and only.pos_b is not None
    assert text[0].startswith(f"A:pos {complete_a} / B:pos {complete_b}  c2 q op #")


def test_different_errors_and_messages_are_differences() -> None:
    a = scenario(Script(), fail_complete="message-lock-lost")
    b = scenario(Script(), fail_complete="session-lock-lost")
    [diff] = compare(Trace(a.events), Trace(b.events))
    assert "different errors: A message-lock-lost, B session-lock-lost" in diff.what
    c = Script()
    q = c.create("q")
    c.op("c1", "receive", q, outcomes=[c.delivery("m1")])
    d = Script()
    q = d.create("q")
    d.op("c1", "receive", q, outcomes=[d.delivery("m1"), d.delivery("m9")])
    [diff] = compare(Trace(c.events), Trace(d.events))
    assert "delivered different messages: A ['m1'] (1), B ['m1', 'm9'] (2)" in diff.what


def test_on_a_partitioned_entity_deliveries_are_compared_as_a_whole() -> None:
    a, b = Script(), Script()
    for s, batches in ((a, [["u1", "u2"], ["u3"]]), (b, [["u3"], ["u2", "u1"]])):
        pq = s.create("pq", partitions=2)
        for batch in batches:
            s.op("c1", "receive", pq, outcomes=[s.delivery(m, partition=i) for i, m in enumerate(batch)])
    assert compare(Trace(a.events), Trace(b.events)) == []
    c = Script()
    pq = c.create("pq", partitions=2)
    c.op("c1", "receive", pq, outcomes=[c.delivery("u1"), c.delivery("u2")])
    c.op("c1", "receive", pq, outcomes=[c.delivery("u9")])
    [diff] = compare(Trace(a.events), Trace(c.events))
    assert "only A [('u3', 1)], only B [('u9', 1)]" in diff.what


def sbconform(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sbconform.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_diff_command_exit_codes(tmp_path: Path) -> None:
    a = scenario(Script()).write(tmp_path / "a.jsonl")
    same = scenario(Script(suffix="-s", lock_base=50)).write(tmp_path / "same.jsonl")
    other = scenario(Script(), second_dc=5).write(tmp_path / "other.jsonl")
    run = sbconform("diff", str(a), str(same))
    assert run.returncode == 0 and "same" in run.stdout, run.stdout + run.stderr
    run = sbconform("diff", str(a), str(other))
    assert run.returncode == 1 and "m2(dc 5)" in run.stdout and "1 difference(s)" in run.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text(a.read_text().replace('"op":"abandon"', '"op":"abandn"', 1))
    run = sbconform("diff", str(a), str(bad))
    assert run.returncode == 2 and "bad.jsonl:" in run.stderr and "'op'" in run.stderr
    run = sbconform("diff", str(a), str(tmp_path / "missing.jsonl"))
    assert run.returncode == 2 and "missing.jsonl" in run.stderr


def record(directory: Path, *extra: str) -> None:
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_features.py",
                          "--sb-clause", "SETTLE-DLQ-*", "--sb-clause", "SETTLE-ABAN-*", "--sb-clause", "PART-KEY-*",
                          "--sb-trace", str(directory), *extra], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode in (0, 1), run.stdout + run.stderr
    assert list(directory.glob("*.jsonl")), run.stdout


def test_two_recordings_of_one_run_are_the_same_and_a_broken_target_differs(tmp_path: Path) -> None:
    record(tmp_path / "one")
    record(tmp_path / "two")
    result = diff_paths(tmp_path / "one", tmp_path / "two")
    assert result.same and len(result.differences) >= 5
    record(tmp_path / "mutant", "--sb-target", "mutant-delivery-count")
    result = diff_paths(tmp_path / "one", tmp_path / "mutant")
    assert not result.same
    found = [str(d) for ds in result.differences.values() for d in ds]
    assert any("different delivery counts" in d for d in found), found
