"""Issue 15, progress: ``sbconform replay`` shows a live line on a terminal (events checked of
the total, the piece being checked, elapsed) and nothing but its summary when piped; the exit
codes stay 0 valid, 1 violations, 2 undecided. One line helper (``sbconform.progress``) for
certify, generate and replay."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("pyarrow")

from sbconform.progress import LiveLine, SparkStages  # noqa: E402
from sbconform.trace.generate import generate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LIVE = re.compile(r"  ([\d,]+)/([\d,]+) events checked(?:, file (\d+)/(\d+))?, ([\d,]+) pieces"
                  r"(?: \(([\d,]+) with a violation\))?, now (\S+), (\d+) s")


def replay(args: list[str], cwd: Path, terminal: bool) -> tuple[int, str]:
    """Run ``sbconform replay`` with stdout on a pseudo-terminal (``terminal``) or a pipe."""
    command = [sys.executable, "-m", "sbconform.cli", "replay", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if not terminal:
        run = subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=300)
        return run.returncode, run.stdout.decode()
    import pty

    master, slave = pty.openpty()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=slave, stderr=subprocess.DEVNULL)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return process.wait(timeout=60), b"".join(chunks).decode().replace("\r\n", "\n")  # the terminal's newlines


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("traces")
    generate(root / "legal.jsonl", 40_000, entities=5, seed=3)
    generate(root / "broken", 20_000, entities=10, seed=4, inject=["lost-message"], buckets=2)
    return root


def live_lines(text: str) -> list[re.Match]:
    return [m for m in (LIVE.match(part) for part in text.split("\r")) if m]


@pytest.mark.parametrize("trace, args, code", [("legal.jsonl", [], 0), ("broken", [], 1),
                                               ("legal.jsonl", ["--search-bound", "1"], 2)])
def test_replay_local_shows_a_live_line_on_a_terminal(traces, trace, args, code) -> None:
    rc, text = replay(["--local", trace, *args], traces, terminal=True)
    assert rc == code, text[-2000:]
    shown = live_lines(text)
    assert shown, text[:2000]
    total = int(shown[-1].group(2).replace(",", ""))
    assert int(shown[-1].group(1).replace(",", "")) == total  # the last line: everything checked
    done = [int(m.group(1).replace(",", "")) for m in shown]
    assert done == sorted(done) and len(set(m.group(2) for m in shown)) == 1  # counts up to one total
    assert all(re.fullmatch(r"q\d{4}-[a-z]+", m.group(7)) for m in shown)  # the piece being checked
    if trace == "broken":
        assert shown[-1].group(3) == "2" and shown[-1].group(4) == "2"  # the second of two bucket files
        assert shown[-1].group(6) == "1"  # the planted lost message, found as it was checked
    else:
        assert not any(m.group(6) for m in shown)
    # the line is erased before the summary, which names the same number of events
    summary = text.split("\r")[-1]
    assert re.match(rf"{total} events in \d+ pieces", summary), text[-500:]


@pytest.mark.parametrize("trace, args, code", [("legal.jsonl", [], 0), ("broken", [], 1),
                                               ("legal.jsonl", ["--search-bound", "1"], 2)])
def test_replay_local_piped_prints_the_summary_only(traces, trace, args, code) -> None:
    rc, text = replay(["--local", trace, *args], traces, terminal=False)
    assert rc == code
    assert "\r" not in text and not live_lines(text)
    lines = text.splitlines()
    assert re.match(r"\d+ events in \d+ pieces", lines[0]), text
    assert all(line.startswith("  ") for line in lines[1:]), text  # the problems under the summary


def test_the_live_line_is_rate_limited_and_silent_off_a_terminal() -> None:
    quiet = io.StringIO()
    line = LiveLine(quiet)  # a StringIO is no terminal
    assert not line.live and not line.show("x", force=True)
    line.finish("done", keep=True)
    assert quiet.getvalue() == ""

    shown = io.StringIO()
    line = LiveLine(shown, live=True, interval=60)
    assert line.show("a long first line")  # the first is always shown
    assert not line.show("second")  # too soon
    assert line.show("third", force=True)
    line.finish()
    parts = shown.getvalue().split("\r")
    assert parts[1].startswith("a long first line") and parts[2].startswith("third ")
    assert parts[-2].strip() == "" and parts[-1] == ""  # erased, the cursor at the start of the line


def test_spark_progress_counts_the_partitions_of_the_running_stages() -> None:
    stages = {3: SimpleNamespace(numCompletedTasks=2, numTasks=8, numActiveTasks=2, numFailedTasks=0)}
    tracker = SimpleNamespace(getActiveStageIds=lambda: list(stages), getStageInfo=stages.get)
    progress = SparkStages(tracker, LiveLine(io.StringIO(), live=True))
    assert re.fullmatch(r"  Spark stage 3: 2/8 partitions checked \(2 running\), \d+ s", progress.describe())
    stages[4] = stages.pop(3)
    stages[4].numCompletedTasks, stages[4].numFailedTasks = 5, 1
    text = progress.describe()
    assert "stage 4: 5/8 partitions checked (2 running), 1 failed; 1 stage done" in text
    stages.clear()
    assert progress.describe() is None


def test_spark_progress_polls_only_on_a_terminal() -> None:
    calls = []
    tracker = SimpleNamespace(getActiveStageIds=lambda: calls.append(1) or [], getStageInfo=lambda _: None)
    with SparkStages(tracker, LiveLine(io.StringIO(), live=False), poll=0.01):
        time.sleep(0.1)
    assert calls == []
    out = io.StringIO()
    stage = SimpleNamespace(numCompletedTasks=1, numTasks=2, numActiveTasks=1, numFailedTasks=0)
    tracker = SimpleNamespace(getActiveStageIds=lambda: calls.append(1) or [0], getStageInfo=lambda _: stage)
    with SparkStages(tracker, LiveLine(out, live=True), poll=0.01):
        deadline = time.monotonic() + 10
        while "1/2 partitions" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert "stage 0: 1/2 partitions checked (1 running)" in out.getvalue()
