"""``certify --clause``: only the test files that name a selected clause are collected.

Collecting every test module of the kit takes seconds in each test process (and again in
certify's collection step); a narrowed run needs only the files whose tests or scenarios name
a selected clause, found statically (``sbconform.coverage``). The static answer must never
miss a file that pytest, collecting everything, finds checking a selected clause: that is
checked here against a real collection of the whole kit.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sbconform.coverage import FEATURES_MODULE, check, collection_paths, kit_root
from sbconform.results import read_partial
from sbspec import load_catalog

REPO = Path(__file__).resolve().parent.parent


def test_the_static_files_hold_every_test_pytest_finds_for_each_clause(tmp_path) -> None:
    raw = tmp_path / "collected.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(REPO),
                           str(REPO / "tests"), "--sb-target", "reference", "--sb-report-json", str(raw), "--sb-certify",
                           "--collect-only"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    collected = read_partial(Path(str(raw) + ".partial"))[0]
    by_clause: dict[str, set[str]] = {}
    for nodeid, meta in collected.items():
        for clause in meta["clauses"]:
            by_clause.setdefault(clause, set()).add(nodeid.split("::")[0])
    assert len(by_clause) > 150, len(by_clause)  # the collection saw the kit's clauses
    catalog = load_catalog()
    scanned = check(REPO, catalog)
    for clause, files in sorted(by_clause.items()):
        chosen = {str(Path(p).relative_to(REPO)) for p in collection_paths(REPO, [clause], catalog, scanned)}
        assert files <= chosen, (clause, files - chosen)
    # an area selects the union of its clauses' files; scenarios run in the features module
    settlement = {str(Path(p).relative_to(REPO)) for p in collection_paths(REPO, ["settlement"], catalog, scanned)}
    assert FEATURES_MODULE in settlement and "tests/test_model_stateful.py" in settlement
    # and it narrows: a clause only test modules check does not collect the scenarios
    only_tests = next(c for c, files in sorted(by_clause.items()) if FEATURES_MODULE not in files)
    assert FEATURES_MODULE not in {str(Path(p).relative_to(REPO)) for p in collection_paths(REPO, [only_tests], catalog, scanned)}


def test_no_selection_collects_the_whole_tests_directory() -> None:
    assert collection_paths(kit_root(), [], load_catalog()) == [str(kit_root() / "tests")]


def test_a_run_that_graded_nothing_is_no_verdict_not_a_pass(tmp_path) -> None:
    """Every selected clause skipped (the target lacks what they need): the report says NOTHING
    GRADED, and certify exited 0, as if the target had passed them; a CI job took it for a pass.
    It is 2 (no verdict), with one line saying why."""
    run = subprocess.run([sys.executable, "-m", "sbconform.cli", "certify", "--target", "reference", "--option", "without=sessions",
                          "--report-dir", str(tmp_path / "r"), "--clause", "SETTLE-SESS-00[1-3]", "--jobs", "1"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert "NOTHING GRADED" in run.stdout
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "nothing was graded" in lines[0] and "3 selected clauses" in lines[0], run.stderr
    assert (tmp_path / "r" / "report.json").exists()  # the report still says why each was skipped
