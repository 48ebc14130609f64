"""Grading: how per-test outcomes become one status per clause."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbconform.report import build_report, compare, load_expectations, render_markdown
from spec import load_catalog

CATALOG = load_catalog()
A, B = "SETTLE-SEND-001", "SETTLE-LOCK-001"


def run(*tests, capabilities=("sessions",)):
    return {"target": {"name": "t", "capabilities": list(capabilities)}, "tests": list(tests)}


def result(outcome, *clauses, uses_target=True, reason=""):
    return {"nodeid": f"n::{outcome}", "name": outcome, "kind": "scenario", "outcome": outcome,
            "reason": reason, "clauses": list(clauses), "uses_target": uses_target}


def test_statuses() -> None:
    report = build_report(run(result("pass", A), result("fail", B, reason="boom"), result("pass", B)), CATALOG)
    assert report["clauses"][A]["status"] == "pass"
    assert report["clauses"][B]["status"] == "fail" and "boom" in report["clauses"][B]["reason"]
    assert report["clauses"]["SETTLE-PEEK-001"]["status"] == "uncovered"
    assert report["summary"]["certified"] is False


def test_a_clause_the_kit_covers_but_a_narrowed_run_did_not_run_is_skipped_not_uncovered() -> None:
    report = build_report(run(result("pass", A)), CATALOG, covered={A, "SETTLE-PEEK-001"})
    assert report["clauses"]["SETTLE-PEEK-001"]["status"] == "skip"
    assert report["clauses"]["SETTLE-PEEK-001"]["reason"].startswith("not run")
    assert report["clauses"]["SETTLE-LOCK-001"]["status"] == "uncovered"  # nothing in the kit names it here


def test_skips_carry_their_reasons() -> None:
    report = build_report(run(result("skip", A, reason="target 't' lacks capability 'x'")), CATALOG)
    assert report["clauses"][A]["status"] == "skip"
    assert "lacks capability" in report["clauses"][A]["reason"]


def test_model_level_tests_are_not_evidence_about_another_target() -> None:
    report = build_report(run(result("pass", A, uses_target=False)), CATALOG)
    assert report["clauses"][A]["status"] == "skip"
    model = build_report(run(result("pass", A, uses_target=False), capabilities=("model-internals",)), CATALOG)
    assert model["clauses"][A]["status"] == "pass"


def test_expected_failures_do_not_fail_certification_but_unexpected_passes_do(tmp_path: Path) -> None:
    path = tmp_path / "expect.toml"
    path.write_text(f'[clauses."{A}"]\nstatus = "fail"\nreason = "known bug"\n[clauses."{B}"]\nstatus = "fail"\nreason = "was broken"\n')
    expectations = load_expectations(path)
    report = build_report(run(result("fail", A), result("pass", B)), CATALOG, expectations)
    assert report["clauses"][A]["status"] == "fail" and report["clauses"][A]["expected"] is True
    assert report["clauses"][B]["status"] == "fail" and "unexpected pass" in report["clauses"][B]["reason"]
    assert report["summary"]["unexpected_fail"] == 1 and not report["summary"]["certified"]


def test_bad_expectations_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "expect.toml"
    path.write_text('[clauses."SETTLE-SEND-001"]\nstatus = "pass"\n')
    with pytest.raises(ValueError, match="expect.toml: clause SETTLE-SEND-001"):
        load_expectations(path)


def test_markdown_and_comparison_render() -> None:
    report = build_report(run(result("pass", A), result("fail", B, reason="boom")), CATALOG)
    text = render_markdown(report, CATALOG)
    assert "NOT CERTIFIED" in text and "boom" in text
    table = compare([report, report], CATALOG)
    assert f"| {A} | MUST | pass | pass |" in table
