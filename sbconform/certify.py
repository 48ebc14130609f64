"""``sbconform certify``: run the kit against a target and write its report.

The features and the tests run in a child pytest process (a clean interpreter per run),
with the sbconform plugin writing every test's clauses and outcome; those results are
then folded into ``report.json`` and ``report.md`` (see ``report.py``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from spec import load_catalog

from .coverage import REPO
from .report import build_report, load_expectations, write_report


def certify(
    target: str,
    report_dir: Path,
    options: Sequence[str] = (),
    connection_string: str | None = None,
    expectations: Path | None = None,
    hypothesis_profile: str = "ci",
    pytest_args: Sequence[str] = (),
    clauses: Sequence[str] = (),
    trace_dir: Path | None = None,
    jobs: int = 1,
    shard_timeout: float | None = None,
) -> int:
    """Returns 0 if no clause fails unexpectedly, 1 if one does, 2 if the run broke.

    ``jobs > 1`` splits the selected tests into that many pytest processes run side by
    side (each with its own target, so a real-time target's waits overlap); their
    results are merged into one report. ``shard_timeout`` (seconds) stops a shard still
    running after that long: its results so far are kept and each of its tests without a
    result is reported as failed, "timed out"."""
    catalog = load_catalog()
    expected = load_expectations(expectations)
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    raw_path = report_dir / "results.json"
    raw_path.unlink(missing_ok=True)
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REPO / "tests"),
        "--sb-target", target, "--sb-report-json", str(raw_path), "--sb-certify",
    ]
    for option in options:
        command += ["--sb-option", option]
    if connection_string:
        command += ["--sb-connection-string", connection_string]
    for pattern in clauses:
        command += ["--sb-clause", pattern]
    if trace_dir is not None:
        command += ["--sb-trace", str(Path(trace_dir).resolve())]
    command += list(pytest_args)
    env = {**os.environ, "HYPOTHESIS_PROFILE": hypothesis_profile, "SBCONFORM_CERTIFY_CHILD": "1"}
    print(f"sbconform: certifying target {target!r}: {' '.join(command[3:])}", flush=True)
    if jobs > 1:
        raw = _run_sharded(command, raw_path, env, jobs, shard_timeout)
        if raw is None:
            return 2
    else:
        run = subprocess.run(command, cwd=REPO, env=env)
        if not raw_path.exists() or run.returncode not in (0, 1):
            print(f"sbconform: the test run broke (pytest exit status {run.returncode}); no report written", file=sys.stderr)
            return 2
        raw = json.loads(raw_path.read_text(encoding="utf-8"))
    covered = None
    if pytest_args:  # narrowed by pytest arguments: what it did not run is not thereby uncovered
        from .coverage import check

        covered = {use.clause for use in check(catalog=catalog).uses}
    report = build_report(raw, catalog, expected, covered)
    json_path, md_path = write_report(report, catalog, report_dir)
    s = report["summary"]
    print(
        f"sbconform: {target}: {s['pass']} pass, {s['fail']} fail ({s['expected_fail']} expected), "
        f"{s['skip']} skip, {s['uncovered']} uncovered of {s['total']} clauses -> "
        f"{'CERTIFIED' if s['certified'] else 'NOT CERTIFIED'}\n  {json_path}\n  {md_path}",
        flush=True,
    )
    return 0 if s["certified"] else 1


def _run_sharded(
    command: list[str], raw_path: Path, env: dict[str, str], jobs: int, timeout: float | None = None
) -> dict | None:
    """Collect the selected tests once, run them in ``jobs`` pytest processes, merge the results."""
    collect = [c for c in command if c not in ("--sb-report-json", str(raw_path))]
    listing = subprocess.run(collect + ["--collect-only"], cwd=REPO, env=env, capture_output=True, text=True)
    if listing.returncode not in (0, 5):
        print(f"sbconform: collecting the tests failed:\n{listing.stdout[-2000:]}{listing.stderr[-2000:]}", file=sys.stderr)
        return None
    ids = [line.strip() for line in listing.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if not ids:
        print(f"sbconform: no tests collected:\n{listing.stdout[-2000:]}", file=sys.stderr)
        return None
    shards = [ids[i::jobs] for i in range(jobs) if ids[i::jobs]]
    base = [c for c in command if not c.endswith("/tests") and c != str(REPO / "tests")]
    runs = []
    for i, shard in enumerate(shards):
        path = raw_path.with_name(f"results.{i}.json")
        path.unlink(missing_ok=True)
        Path(str(path) + ".partial").unlink(missing_ok=True)
        args = [c if c != str(raw_path) else str(path) for c in base]
        # own process group: a stuck shard is stopped together with the processes it started
        runs.append((path, shard, subprocess.Popen(args + shard, cwd=REPO, env=env, start_new_session=True)))
    deadline = None if timeout is None else time.monotonic() + timeout
    merged: dict | None = None
    broke = False
    for path, shard, process in runs:
        try:
            code = process.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            part = _stop_shard(process, path, shard, timeout)
        else:
            if not path.exists() or code not in (0, 1):
                print(f"sbconform: a test shard broke (pytest exit status {code})", file=sys.stderr)
                broke = True
                continue
            part = json.loads(path.read_text(encoding="utf-8"))
            path.unlink()
        if merged is None:
            merged = part
        else:
            merged["tests"] += part["tests"]
            merged["target"] = merged["target"] or part["target"]
            merged["selection"] = merged["selection"] or part["selection"]
            merged["exitstatus"] = max(merged["exitstatus"], part["exitstatus"])
    if broke or merged is None:
        return None
    raw_path.write_text(json.dumps(merged, indent=2, default=str), encoding="utf-8")
    return merged


def _stop_shard(process: subprocess.Popen, path: Path, shard: list[str], timeout: float | None) -> dict:
    """Kill a shard that outran the timeout; keep its results so far, fail its unfinished tests."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    partial = Path(str(path) + ".partial")
    lines = []
    if partial.exists():
        lines = [json.loads(line) for line in partial.read_text(encoding="utf-8").splitlines() if line.strip()]
        partial.unlink()
    metas = {line.pop("collected"): line for line in lines if "collected" in line}
    tests = [line for line in lines if "nodeid" in line]
    done = {t["nodeid"] for t in tests}
    reason = f"timed out: the test shard was still running after {timeout:g} s and was stopped"
    stuck = [nodeid for nodeid in shard if nodeid not in done]
    print(f"sbconform: a test shard timed out after {timeout:g} s; not finished: {', '.join(stuck)}", file=sys.stderr)
    for nodeid in stuck:
        meta = metas.get(nodeid, {"title": nodeid, "clauses": [], "needs": [], "kind": "test", "uses_target": True})
        tests.append({"nodeid": nodeid, "name": meta["title"], "phase": "call", "outcome": "fail",
                      "reason": reason, "duration": 0.0, **meta})
    return {"target": {}, "exitstatus": 1, "selection": [], "tests": tests}

