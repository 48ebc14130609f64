"""`sbconform replay` of a directory holding several traces (certify --trace writes one a test):
each trace is checked on its own and the verdict covers them all; before, the run was refused
("replay one trace at a time"), so a user looped over the files by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from sbconform.cli import main  # noqa: E402
from test_trace_leftovers2 import overlapping_receives  # noqa: E402


def write(path: Path, trace: str, rows) -> None:
    from sbconform.trace.io import JsonlWriter

    path.parent.mkdir(parents=True, exist_ok=True)
    with JsonlWriter(path, trace, validate=False) as writer:
        for r in rows:
            writer.write({k: v for k, v in dict(r, trace=trace).items() if v is not None})


def broken():
    rows = overlapping_receives()
    rows[6:] = [rows[7], rows[8], rows[6], rows[9]]  # sequential receives, the second message first
    return [dict(r, pos=i) for i, r in enumerate(rows)]


def test_each_trace_of_a_directory_is_checked_on_its_own_and_the_verdict_covers_all(tmp_path, capsys) -> None:
    for name in ("a", "b", "c"):  # each numbered from pos 0, each with its own queue 'q'
        write(tmp_path / "traces" / f"{name}.jsonl", name, broken() if name == "b" else overlapping_receives())
    out = tmp_path / "out"
    assert main(["replay", "--local", str(tmp_path / "traces"), "--out", str(out)]) == 1
    said = capsys.readouterr().out
    assert "VIOLATION SETTLE-RECV-002" in said and "trace 'b'" in said, said
    assert said.rstrip().splitlines()[-1].startswith("3 traces: 2 valid, 1 with a violation, 0 undecided"), said
    summary = json.loads((out / "summary.json").read_text())
    assert [(t["trace"], t["verdict"]) for t in summary["traces"]] == [("a", "valid"), ("b", "violation"), ("c", "valid")]
    assert all((out / t["out"] / "summary.json").exists() for t in summary["traces"])

    (tmp_path / "traces" / "b.jsonl").unlink()
    assert main(["replay", "--local", str(tmp_path / "traces")]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("2 traces: 2 valid")


def test_a_trace_with_no_events_leaves_the_whole_run_undecided(tmp_path, capsys) -> None:
    write(tmp_path / "traces" / "a.jsonl", "a", overlapping_receives())
    write(tmp_path / "traces" / "e.jsonl", "e", [])
    assert main(["replay", "--local", str(tmp_path / "traces")]) == 2
    assert "1 undecided" in capsys.readouterr().out


def test_spark_checks_each_trace_on_its_own_too(tmp_path, capsys, spark) -> None:
    for name in ("a", "b"):
        write(tmp_path / "traces" / f"{name}.jsonl", name, broken() if name == "b" else overlapping_receives())
    assert main(["replay", str(tmp_path / "traces"), "--out", str(tmp_path / "out")]) == 1
    said = capsys.readouterr().out
    assert "VIOLATION SETTLE-RECV-002" in said and said.rstrip().splitlines()[-1].startswith("2 traces: 1 valid, 1 with a violation")
