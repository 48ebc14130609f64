"""The reports as their reader sees them: someone handed report.json, report.md, the HTML page
or the JUnit XML, deciding from it alone. One certification of a broken target (a mutant,
a few clauses) is shared by the tests that read its files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SBCONFORM = Path(sys.executable).parent / "sbconform"
MUTANT = "mutant-complete-ignored"
CLAUSES = ("SETTLE-COMP-001", "SETTLE-COMP-002")


@pytest.fixture(scope="module")
def mutant_run(tmp_path_factory) -> dict:
    """One narrowed certification of a target that ignores complete: its files and console."""
    where = tmp_path_factory.mktemp("reader")
    args = [str(SBCONFORM), "certify", "--target", MUTANT, "--jobs", "1", "--report-dir", str(where / "r"),
            "--html", str(where / "r.html"), "--junit-xml", str(where / "r.xml")]
    for clause in CLAUSES:
        args += ["--clause", clause]
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]  # a MUST clause fails
    return {"json": json.loads((where / "r" / "report.json").read_text(encoding="utf-8")),
            "md": (where / "r" / "report.md").read_text(encoding="utf-8"),
            "html": (where / "r.html").read_text(encoding="utf-8"),
            "xml": ET.parse(where / "r.xml").getroot(), "stdout": done.stdout, "dir": where / "r"}


def test_every_report_names_the_target_certified_not_the_one_it_wraps(mutant_run) -> None:
    """A broken target built on the reference was reported as 'reference': FAILED, and a
    reader concluded the reference model fails."""
    assert mutant_run["json"]["target"]["name"] == MUTANT
    assert mutant_run["md"].startswith(f"# sbconform report: {MUTANT}\n")
    assert f"<title>sbconform report: {MUTANT}</title>" in mutant_run["html"]
    assert mutant_run["xml"].get("name") == f"sbconform {MUTANT}"
    assert "reference" not in mutant_run["md"].splitlines()[0]
