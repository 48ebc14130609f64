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
