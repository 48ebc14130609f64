"""``sbconform certify``: run the kit against a target and write its report.

The features and the tests run in a child pytest process (a clean interpreter per run),
with the sbconform plugin writing every test's clauses and outcome; those results are
then folded into ``report.json`` and ``report.md`` (see ``report.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
) -> int:
    """Returns 0 if no clause fails unexpectedly, 1 if one does, 2 if the run broke."""
    catalog = load_catalog()
    expected = load_expectations(expectations)
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    raw_path = report_dir / "results.json"
    raw_path.unlink(missing_ok=True)
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REPO / "tests"),
        "--sb-target", target, "--sb-report-json", str(raw_path),
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
    env = {**os.environ, "HYPOTHESIS_PROFILE": hypothesis_profile}
    print(f"sbconform: certifying target {target!r}: {' '.join(command[3:])}", flush=True)
    run = subprocess.run(command, cwd=REPO, env=env)
    if not raw_path.exists() or run.returncode not in (0, 1):
        print(f"sbconform: the test run broke (pytest exit status {run.returncode}); no report written", file=sys.stderr)
        return 2
    raw = json.loads(raw_path.read_text(encoding="utf-8"))
    report = build_report(raw, catalog, expected)
    json_path, md_path = write_report(report, catalog, report_dir)
    s = report["summary"]
    print(
        f"sbconform: {target}: {s['pass']} pass, {s['fail']} fail ({s['expected_fail']} expected), "
        f"{s['skip']} skip, {s['uncovered']} uncovered of {s['total']} clauses -> "
        f"{'CERTIFIED' if s['certified'] else 'NOT CERTIFIED'}\n  {json_path}\n  {md_path}",
        flush=True,
    )
    return 0 if s["certified"] else 1
