"""End to end: the CLI certifies a target, writes its report, and grades it honestly."""

from __future__ import annotations

import re

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def sbconform(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sbconform.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_certify_writes_a_passing_report(tmp_path: Path) -> None:
    run = sbconform("certify", "--target", "reference", "--report-dir", str(tmp_path), "--", "tests/test_features.py", "-k", "deferred")
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["target"]["name"] == "reference"
    assert report["clauses"]["SETTLE-DEFR-001"]["status"] == "pass"
    assert report["clauses"]["SETTLE-DEFR-001"]["scenarios"][0]["name"].startswith("Deferral: ")
    # narrowed (by test arguments): it grades what it ran and certifies nothing
    assert report["summary"]["passed"] is True and report["summary"]["certified"] is False
    assert report["summary"]["scope"] == "selection"
    assert "CERTIFIED" not in (tmp_path / "report.md").read_text() and "PASSED for the" in run.stdout


def test_a_certification_run_runs_only_the_tests_that_name_clauses(tmp_path: Path) -> None:
    """The kit's own tests name no clause and grade nothing; some of them run ``certify``
    themselves, so running them inside a certification would recurse without end."""
    run = sbconform("certify", "--target", "reference", "--report-dir", str(tmp_path), "--",
                    "tests/test_report.py", "tests/test_features.py", "-k", "deferred or report")
    assert run.returncode == 0, run.stdout + run.stderr
    tests = json.loads((tmp_path / "results.json").read_text())["tests"]
    assert tests and all(t["clauses"] for t in tests), [t["nodeid"] for t in tests if not t["clauses"]]
    assert not any(t["nodeid"].startswith("tests/test_report.py") for t in tests)


def test_scenarios_exercise_the_target_even_though_their_steps_ask_for_it(tmp_path: Path) -> None:
    """pytest-bdd steps request ``sb_target`` at run time: a scenario must still count as a test
    of the target, not as a model-level test (which grades only the model itself)."""
    run = sbconform("certify", "--target", "reference", "--option", "without=model-internals", "--report-dir",
                    str(tmp_path), "--", "tests/test_features.py", "tests/test_model_stateful.py", "-k",
                    "deferred or settlement_state_machine")
    assert run.returncode == 0, run.stdout + run.stderr
    clauses = json.loads((tmp_path / "report.json").read_text())["clauses"]
    assert clauses["SETTLE-DEFR-001"]["status"] == "pass", clauses["SETTLE-DEFR-001"]
    model_only = [c for c in clauses.values() if c["status"] == "skip" and "model-level" in c["reason"]]
    assert model_only, "the model's own stateful test should grade nothing on a target that is not the model"


def test_certify_fails_a_broken_target(tmp_path: Path) -> None:
    run = sbconform("certify", "--target", "mutant-complete-ignored", "--report-dir", str(tmp_path), "--",
                    "tests/test_features.py", "-k", "gone_for_good")
    assert run.returncode == 1, run.stdout + run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["clauses"]["SETTLE-COMP-001"]["status"] == "fail"
    assert report["summary"]["certified"] is False


def test_scenarios_a_target_cannot_run_are_skipped_with_the_reason(tmp_path: Path) -> None:
    run = sbconform("certify", "--target", "reference", "--option", "without=sessions", "--report-dir", str(tmp_path),
                    "--", "tests/test_features.py", "-k", "session")
    assert run.returncode == 0, run.stdout + run.stderr
    clause = json.loads((tmp_path / "report.json").read_text())["clauses"]["SETTLE-SESS-002"]
    assert clause["status"] == "skip"
    assert "lacks capability 'sessions'" in clause["reason"]


def test_an_unknown_target_is_a_clear_error(tmp_path: Path) -> None:
    run = sbconform("certify", "--target", "nonesuch", "--report-dir", str(tmp_path))
    assert run.returncode == 2
    assert "unknown target 'nonesuch'" in run.stdout + run.stderr


def test_certify_a_selection_of_clauses(tmp_path: Path) -> None:
    run = sbconform("certify", "--target", "reference", "--report-dir", str(tmp_path), "--clause", "SETTLE-DEFR-*",
                    "--clause", "PART-KEY-001", "--", "tests/test_features.py")
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["selection"] == ["SETTLE-DEFR-*", "PART-KEY-001"]
    statuses = {cid: c["status"] for cid, c in report["clauses"].items()}
    assert statuses["SETTLE-DEFR-001"] == statuses["PART-KEY-001"] == "pass"
    assert statuses["SETTLE-LOCK-003"] == "skip"
    assert report["clauses"]["SETTLE-LOCK-003"]["reason"].startswith("not selected")
    # only tests naming a selected clause ran
    tests = json.loads((tmp_path / "results.json").read_text())["tests"]
    assert tests
    for test in tests:
        assert any(c.startswith("SETTLE-DEFR-") or c == "PART-KEY-001" for c in test["clauses"]), test["nodeid"]


def test_a_selection_matching_no_clause_is_a_clear_error(tmp_path: Path) -> None:
    run = sbconform("certify", "--target", "reference", "--report-dir", str(tmp_path), "--clause", "SETTLE-NOPE-*")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [run.stderr.strip()] and "--clause 'SETTLE-NOPE-*' matches no clause" in run.stderr


def test_a_stuck_shard_is_stopped_and_its_unfinished_tests_fail_as_timed_out(tmp_path: Path, monkeypatch) -> None:
    from sbconform.certify import certify

    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "sb_stuck.py").write_text(
        "import time\n\n"
        "def pytest_runtest_call(item):\n"
        "    if 'not_deferred' in item.name:\n"
        "        time.sleep(300)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(plugin))
    started = time.monotonic()
    code = certify("reference", tmp_path / "report", clauses=["SETTLE-DEFR-*"], jobs=2, shard_timeout=10,
                   pytest_args=["-p", "sb_stuck"])
    assert time.monotonic() - started < 120
    assert code == 1
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    scenarios = [s for c in report["clauses"].values() for s in c.get("scenarios", [])]
    stuck = [s for s in scenarios if "not_deferred" in s["id"]]
    assert stuck and all(s["outcome"] == "fail" and s["reason"].startswith("timed out") for s in stuck)
    # the user's time limit stopped them: the reason says so, and the run is not complete
    assert all("--shard-timeout 10 s" in s["reason"] for s in stuck)
    assert "--shard-timeout 10 s" in report["summary"]["incomplete"] and "INCOMPLETE" in report["summary"]["verdict"]
    assert any(s["outcome"] == "pass" for s in scenarios)  # the other tests' results survive
    assert not list((tmp_path / "report").glob("results.*.json*"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its parent is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_certify_stops_every_child_and_writes_an_incomplete_report(tmp_path: Path, signum) -> None:
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    pids = tmp_path / "pids"
    (plugin / "sb_hang.py").write_text(
        "import os, subprocess, time\n\n"
        "def pytest_runtest_call(item):\n"
        "    if 'not_deferred' in item.name:\n"
        "        child = subprocess.Popen(['sleep', '300'])  # what a test starts (a server) must stop too\n"
        f"        open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "        time.sleep(300)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(plugin)}
    process = subprocess.Popen(
        [sys.executable, "-m", "sbconform.cli", "certify", "--report-dir", str(tmp_path / "r"), "--jobs", "2",
         "--clause", "SETTLE-DEFR-*", "--", "-p", "sb_hang"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not pids.exists():
        time.sleep(0.2)
    assert pids.exists(), "the hanging test never started"
    time.sleep(0.5)
    process.send_signal(signum)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, out + err
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "interrupted" in lines[0], err
    for pid in map(int, pids.read_text().split()):
        assert not _alive(pid), f"process {pid} outlived the interrupted certify"
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["summary"]["incomplete"].startswith("interrupted by SIG")
    assert report["summary"]["certified"] is False and "INCOMPLETE" in report["summary"]["verdict"]
    assert "Incomplete" in (tmp_path / "r" / "report.md").read_text()


def test_progress_is_a_live_line_per_clause_on_a_terminal_and_a_summary_per_area_otherwise(tmp_path: Path) -> None:
    import io

    from sbconform.certify import certify

    live = io.StringIO()
    assert certify("reference", tmp_path / "a", clauses=["SETTLE-DEFR-*"], jobs=2, progress=True,
                   pytest_args=["tests/test_features.py"], out=live) == 0
    text = live.getvalue()
    updates = [u for u in text.split("\r") if "clauses," in u]
    assert updates, text
    assert any("SETTLE-DEFR-" in u for u in updates)  # the clause being run
    final = updates[-1]
    done, total = final.split()[0].split("/")
    assert done == total and int(total) >= 4 and "tests" in final and final.split("\n")[0].rstrip().endswith(" s"), final
    assert "settlement:" not in text  # the terminal has the live line instead of the area lines

    quiet = io.StringIO()
    assert certify("reference", tmp_path / "b", clauses=["SETTLE-DEFR-*"], jobs=1, progress=False,
                   pytest_args=["tests/test_features.py"], out=quiet) == 0
    lines = quiet.getvalue().splitlines()
    assert "\r" not in quiet.getvalue()
    assert any(re.match(r"settlement: [4-9] pass", line.strip()) for line in lines), lines
    assert not any("PASSED" in line or "::" in line for line in lines[:-4])  # no test runner output


def _stuck_before_any_test(tmp_path: Path, monkeypatch) -> None:
    """A test process that hangs before it reports a single test (loaded through
    PYTEST_PLUGINS, so the run is not narrowed by test arguments)."""
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "sb_hang_early.py").write_text(
        "import sys, time\n\n"
        "def pytest_sessionstart(session):\n"
        "    if '--collect-only' not in sys.argv:\n"
        "        time.sleep(300)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(plugin))
    monkeypatch.setenv("PYTEST_PLUGINS", "sb_hang_early")


@pytest.mark.parametrize("clauses", [[], ["SETTLE-LOCK-003"]])
def test_a_run_whose_every_test_process_timed_out_is_never_certified(tmp_path: Path, monkeypatch, capsys, clauses) -> None:
    """Finding 1: every shard killed by --shard-timeout gave '0 pass, 0 fail, 198 uncovered ->
    CERTIFIED', exit 0 (with --clause too, although a narrowed run is never CERTIFIED)."""
    from sbconform.certify import certify

    _stuck_before_any_test(tmp_path, monkeypatch)
    started = time.monotonic()
    code = certify("reference", tmp_path / "r", clauses=clauses, jobs=1, shard_timeout=1)
    assert time.monotonic() - started < 60
    assert code == 2, code  # nothing ran: the run could not be made, and no MUST clause failed
    summary = json.loads((tmp_path / "r" / "report.json").read_text())["summary"]
    assert summary["certified"] is False and summary["passed"] is False
    assert "CERTIFIED" not in summary["verdict"].replace("not certified", "") and "PASSED" not in summary["verdict"]
    assert "--shard-timeout 1 s" in summary["incomplete"]
    assert summary["scope"] == ("selection" if clauses else "catalog")
    err = capsys.readouterr().err
    assert "--shard-timeout" in err and "Traceback" not in err


@pytest.mark.parametrize("jobs", [1, 2])
def test_tests_a_stopped_process_never_started_keep_their_clauses_and_are_not_run(tmp_path: Path, monkeypatch, capsys, jobs) -> None:
    """A test process stopped by --shard-timeout before it reached its tests left them without
    their clauses: the report said "uncovered" (no test in the kit checks them), which is false.
    They are now "skip: not run" under their own clauses; never a failure of the target."""
    from sbconform.certify import certify

    _stuck_before_any_test(tmp_path, monkeypatch)
    code = certify("reference", tmp_path / "r", clauses=["SETTLE-DEFR-*"], jobs=jobs, shard_timeout=1)
    assert code == 2, code
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    defr = {cid: c for cid, c in report["clauses"].items() if cid.startswith("SETTLE-DEFR-")}
    assert defr and all(c["status"] == "skip" and "not run" in c["reason"] and "--shard-timeout 1 s" in c["reason"]
                        for c in defr.values()), {cid: (c["status"], c["reason"]) for cid, c in defr.items()}
    assert report["summary"]["uncovered"] == 0 and "INCOMPLETE" in report["summary"]["verdict"]
    err = capsys.readouterr().err
    assert "never started" in err and "Traceback" not in err, err


def test_a_report_of_no_test_at_all_certifies_nothing() -> None:
    from sbspec import load_catalog

    from sbconform.report import build_report
    from sbconform.results import empty_run

    summary = build_report(empty_run(), load_catalog())["summary"]
    assert summary["graded"] == 0 and summary["certified"] is False and summary["verdict"] != "CERTIFIED"


def test_a_stale_expectations_file_is_the_users_error_not_a_must_failure(tmp_path: Path, capsys) -> None:
    """Finding 11: a clause passing where the expectations say 'fail' was counted '1 fail (1 MUST)
    -> FAILED', exit 1 (the code of a broker failing a MUST clause)."""
    from sbconform.certify import certify

    expectations = tmp_path / "expect.toml"
    expectations.write_text('[clauses."SETTLE-DEFR-001"]\nstatus = "fail"\nreason = "was broken"\n')
    code = certify("reference", tmp_path / "r", clauses=["SETTLE-DEFR-001"], expectations=expectations,
                   pytest_args=["tests/test_features.py"])
    assert code == 2
    captured = capsys.readouterr()
    summary_line = [line for line in captured.out.splitlines() if line.startswith("sbconform: reference:")][0]
    assert "0 fail (0 MUST" in summary_line and "1 unexpected pass" in summary_line, summary_line
    err = [line for line in captured.err.splitlines() if line.strip()]
    assert len(err) == 1 and str(expectations) in err[0] and "out of date" in err[0] and "SETTLE-DEFR-001" in err[0], err
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["clauses"]["SETTLE-DEFR-001"]["status"] == "pass"
    assert report["summary"]["unexpected_pass"] == 1 and report["summary"]["strict_fail"] == 0


@pytest.mark.parametrize("content", ["clauses = 5\n", "clauses = [1, 2]\n", '[clauses]\n"SETTLE-DEFR-001" = "fail"\n', b"\xff\xfe bad"])
def test_an_expectations_file_of_the_wrong_shape_is_one_line_and_exit_2(tmp_path: Path, content) -> None:
    """Review finding: these crashed load_expectations (AttributeError) with exit 1, certify's code
    for a MUST failure of the broker; the file is the user's, and the message names it."""
    expectations = tmp_path / "expect.toml"
    expectations.write_bytes(content if isinstance(content, bytes) else content.encode())
    done = sbconform("certify", "--target", "reference", "--clause", "SETTLE-DEFR-001", "--jobs", "1",
                     "--expectations", str(expectations), "--report-dir", str(tmp_path / "r"))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and str(expectations) in done.stderr, done.stderr


def test_a_relative_report_dir_is_the_users_directory(tmp_path: Path) -> None:
    """Review finding: run from outside the kit's root, a relative --report-dir sent the test
    processes' results to the kit's root: 'the test run broke', exit 2, no report."""
    done = subprocess.run([sys.executable, "-m", "sbconform.cli", "certify", "--target", "reference",
                           "--clause", "SETTLE-LOCK-011", "--jobs", "1", "--report-dir", "rel"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "rel" / "report.json").is_file() and not (REPO / "rel").exists()
    # a narrowed run collects only the files naming its clauses (tests/test_certify_selection.py)
    log = (tmp_path / "rel" / "run.log").read_text()
    assert " deselected" in log and int(log.split(" deselected")[0].rsplit(" ", 1)[-1]) < 500, log[-500:]
