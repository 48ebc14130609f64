"""The clause catalog and its coverage checker, including what they say about bad input."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from sbconform.coverage import REPO, check
from sbspec import CatalogError, load_catalog

SPEC = REPO / "sbspec"


def test_catalog_loads_and_every_area_has_clauses() -> None:
    catalog = load_catalog()
    for area in catalog.areas:
        assert catalog.by_area(area), f"area {area} has no clauses"
    assert all(c.sources for c in catalog.clauses.values())


def test_the_seed_contradiction_on_x_ms_path_is_recorded() -> None:
    catalog = load_catalog()
    texts = " ".join(d.description + d.resolution for d in catalog.discrepancies)
    assert "ScheduledEnqueueTimeUtc" in texts and "x-ms-path" in texts


def test_coverage_has_no_problems_and_complete_areas_are_fully_covered() -> None:
    coverage = check()
    assert coverage.failures() == [], "\n".join(coverage.failures())
    for area, info in coverage.catalog.areas.items():
        if info.get("complete"):
            assert coverage.uncovered(area) == []


def test_coverage_reports_uncovered_clauses_per_area() -> None:
    coverage = check()
    summary = coverage.summary()
    for area in coverage.catalog.areas:
        assert area in summary
        missing = coverage.uncovered(area)
        if missing:
            assert ", ".join(missing) in summary


@pytest.fixture
def spec_copy(tmp_path: Path) -> Path:
    target = tmp_path / "spec"
    shutil.copytree(SPEC, target, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    return target


def _append(spec_dir: Path, text: str) -> None:
    path = spec_dir / "clauses" / "settlement.toml"
    path.write_text(path.read_text(encoding="utf-8") + textwrap.dedent(text), encoding="utf-8")


def _problems(spec_dir: Path) -> list[str]:
    with pytest.raises(CatalogError) as info:
        load_catalog(spec_dir)
    return info.value.problems


def test_a_quote_missing_from_its_seed_is_named_with_file_and_line(spec_copy: Path) -> None:
    _append(spec_copy, '''
        [[clause]]
        id = "SETTLE-TEST-001"
        level = "MUST"
        text = "x"
        sources = [{ seed = "004_63e6cc90d25a5256.txt", quote = "cette phrase n'existe pas" }]
        ''')
    (problem,) = _problems(spec_copy)
    assert "settlement.toml:" in problem and "SETTLE-TEST-001" in problem and "quote not found" in problem
    line = int(problem.split("settlement.toml:")[1].split(":")[0])
    lines = (spec_copy / "clauses" / "settlement.toml").read_text(encoding="utf-8").splitlines()
    assert '"SETTLE-TEST-001"' in lines[line - 1]


def test_every_problem_is_reported_at_once(spec_copy: Path) -> None:
    _append(spec_copy, '''
        [[clause]]
        id = "SETTLE-SEND-001"
        level = "MUST"
        text = "duplicate id"
        sources = [{ url = "https://example.org", quote = "q" }]

        [[clause]]
        id = "settle-bad"
        level = "MUST"
        text = "bad id"

        [[clause]]
        id = "SETTLE-TEST-002"
        level = "MAYBE"
        text = "bad level, capability and tag"
        needs = ["teleportation"]
        tags = ["nonsense"]
        sources = [{ url = "http://insecure.example", quote = "q" }]
        ''')
    problems = "\n".join(_problems(spec_copy))
    for expected in ("duplicate clause id SETTLE-SEND-001", "malformed clause id 'settle-bad'", "level 'MAYBE'",
                     "unknown capability 'teleportation'", "unknown tag 'nonsense'", "url must be https"):
        assert expected in problems, problems


def test_broken_toml_is_reported_with_its_file(spec_copy: Path) -> None:
    (spec_copy / "clauses" / "broken.toml").write_text('area = "settlement"\n[[clause]\n', encoding="utf-8")
    (problem,) = _problems(spec_copy)
    assert "broken.toml" in problem


def test_scenarios_must_name_known_clauses(tmp_path: Path) -> None:
    features = tmp_path / "features"
    features.mkdir()
    (features / "x.feature").write_text(textwrap.dedent('''\
        Feature: x

          @SETTLE-NOPE-999
          Scenario: names an unknown clause
            Given a queue "q"

          Scenario: names no clause at all
            Given a queue "q"
        '''), encoding="utf-8")
    problems = check(tmp_path).problems
    assert any("x.feature:4" in p and "unknown clause SETTLE-NOPE-999" in p for p in problems), problems
    assert any("x.feature:7" in p and "names no clause" in p for p in problems), problems


def test_python_tests_naming_unknown_clauses_are_reported(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_x.py").write_text('import pytest\n\n@pytest.mark.clauses("SETTLE-NOPE-001")\ndef test_x():\n    pass\n')
    problems = check(tmp_path).problems
    assert problems == ["tests/test_x.py:3: names unknown clause SETTLE-NOPE-001"]
