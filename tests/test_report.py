"""Grading: how per-test outcomes become one status per clause."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbconform.report import build_report, compare, load_expectations, render_markdown
from sbspec import load_catalog

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


def test_expected_failures_do_not_fail_certification_and_unexpected_passes_are_the_files_error(tmp_path: Path) -> None:
    """A clause passing where the expectations say it fails is the expectations file's mistake:
    the clause passes (the target did nothing wrong), counted apart as an unexpected pass, not as
    a MUST failure; the run certifies nothing until the file is updated."""
    path = tmp_path / "expect.toml"
    path.write_text(f'[clauses."{A}"]\nstatus = "fail"\nreason = "known bug"\n[clauses."{B}"]\nstatus = "fail"\nreason = "was broken"\n')
    expectations = load_expectations(path)
    report = build_report(run(result("fail", A), result("pass", B)), CATALOG, expectations)
    assert report["clauses"][A]["status"] == "fail" and report["clauses"][A]["expected"] is True
    b = report["clauses"][B]
    assert b["status"] == "pass" and b["unexpected_pass"] is True and "grade" not in b
    assert "unexpected pass" in b["reason"] and "update the expectations file" in b["reason"]
    s = report["summary"]
    assert s["unexpected_pass"] == 1 and s["unexpected_fail"] == 0 and s["strict_fail"] == 0 and s["fail"] == 1
    assert not s["certified"] and "expectations file is out of date" in s["verdict"]
    assert "pass (unexpected" in render_markdown(report, CATALOG)


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


# ------------------------------------------------------------------ verdict by level (issue 13)
def _level(level: str) -> str:
    return next(cid for cid, c in CATALOG.clauses.items() if c.level == level)


def test_a_should_failure_is_non_strict_and_does_not_fail_certification() -> None:
    should, info = _level("SHOULD"), _level("INFO")
    report = build_report(run(result("fail", should, reason="late"), result("fail", info, reason="off by one")), CATALOG)
    assert report["clauses"][should]["grade"] == "non-strict"
    assert report["clauses"][info]["grade"] == "informational"
    s = report["summary"]
    assert (s["strict_fail"], s["non_strict_fail"], s["informational_fail"]) == (0, 1, 1)
    assert s["passed"] is True and s["verdict"] != "NOT CERTIFIED"
    text = render_markdown(report, CATALOG)
    assert "1 non-strict (SHOULD/MAY)" in text and "fail (non-strict)" in text and "1 informational (INFO)" in text


def test_a_must_failure_fails_certification() -> None:
    must = _level("MUST")
    report = build_report(run(result("fail", must, reason="lost")), CATALOG)
    assert report["clauses"][must]["grade"] == "strict"
    assert report["summary"]["strict_fail"] == 1 and report["summary"]["passed"] is False
    assert report["summary"]["certified"] is False and report["summary"]["verdict"] == "NOT CERTIFIED: 1 MUST clause failing"


def test_an_unexpected_pass_blocks_certification_whatever_the_level_without_being_a_failure(tmp_path: Path) -> None:
    should = _level("SHOULD")
    path = tmp_path / "expect.toml"
    path.write_text(f'[clauses."{should}"]\nstatus = "fail"\nreason = "x"\n')
    report = build_report(run(result("pass", should)), CATALOG, load_expectations(path))
    assert "grade" not in report["clauses"][should] and report["summary"]["strict_fail"] == 0
    assert report["summary"]["unexpected_pass"] == 1 and not report["summary"]["certified"]


def test_junit_reports_an_unexpected_pass_as_an_error_of_the_expectations_not_a_must_failure(tmp_path: Path) -> None:
    from sbconform.certify_outputs import write_junit

    path = tmp_path / "expect.toml"
    path.write_text(f'[clauses."{B}"]\nstatus = "fail"\nreason = "x"\n')
    report = build_report(run(result("pass", B)), CATALOG, load_expectations(path))
    text = write_junit(report, tmp_path / "j.xml").read_text()
    assert 'type="expectations"' in text and 'type="MUST"' not in text
    import xml.etree.ElementTree as ET  # the suite counts its errors: a CI page shows that count

    suite = next(s for s in ET.fromstring(text.encode()) if s.get("name") == "t.settlement")
    assert suite.get("errors") == "1"


def test_a_narrowed_run_grades_its_clauses_and_never_says_certified() -> None:
    report = build_report({**run(result("pass", A)), "selection": ["SETTLE-SEND-*"]}, CATALOG)
    s = report["summary"]
    assert s["scope"] == "selection" and s["passed"] is True and s["certified"] is False
    assert "CERTIFIED" not in s["verdict"] and f"{s['graded']} clauses graded" in s["verdict"]
    assert "CERTIFIED" not in render_markdown(report, CATALOG)


def test_an_incomplete_run_certifies_nothing() -> None:
    report = build_report(run(result("pass", A)), CATALOG, incomplete="interrupted by SIGINT")
    assert report["summary"]["incomplete"] == "interrupted by SIGINT" and not report["summary"]["certified"]
    assert "INCOMPLETE" in report["summary"]["verdict"] and "Incomplete" in render_markdown(report, CATALOG)


# ------------------------------------------------------------------ JUnit, HTML, compare
def test_junit_xml_has_one_test_case_per_clause(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    from sbconform.certify_outputs import write_junit

    should = _level("SHOULD")
    report = build_report(run(result("pass", A), result("fail", B, reason="boom"), result("fail", should)), CATALOG)
    root = ET.parse(write_junit(report, tmp_path / "j.xml")).getroot()
    cases = root.findall(".//testcase")
    assert len(cases) == len(CATALOG.clauses)
    by_name = {c.get("name").split(" ")[0]: c for c in cases}
    assert by_name[B].find("failure") is not None and "boom" in by_name[B].find("failure").get("message")
    assert by_name[A].find("failure") is None and by_name[A].find("skipped") is None
    assert by_name[should].find("failure") is None and "non-strict" in by_name[should].find("system-out").text
    assert by_name["SETTLE-PEEK-001"].find("skipped") is not None
    assert root.get("failures") == "1"


def test_html_report_is_self_contained_with_filters(tmp_path: Path) -> None:
    from sbconform.report import write_html

    a = build_report(run(result("pass", A), result("fail", B, reason="boom <b>")), CATALOG)
    b = build_report({**run(result("pass", A), result("pass", B)), "target": {"name": "sdk", "capabilities": []}}, CATALOG)
    text = write_html([a, b], CATALOG, tmp_path / "r.html").read_text()
    assert "<script src" not in text and "<link" not in text and "http://" not in text.replace("http://www.w3", "")
    for f in ("f-status", "f-area", "f-level"):
        assert f'id="{f}"' in text
    assert text.count('<tr class="clause"') == len(CATALOG.clauses)
    assert "boom &lt;b&gt;" in text and "<th>t</th><th>sdk</th>" in text


def test_compare_labels_totals_and_only_differences() -> None:
    a = build_report(run(result("pass", A), result("fail", B)), CATALOG)
    b = build_report({**run(result("pass", A), result("pass", B)),
                      "target": {"name": "container", "image": "localhost/x:1", "capabilities": []}}, CATALOG)
    table = compare([a, b], CATALOG)
    assert "| clause | level | t | container (localhost/x:1) |" in table
    assert "| pass | 1 | 2 |" in table and "| MUST failures | 1 | 0 |" in table
    diff = compare([a, b], CATALOG, only_differences=True)
    assert f"| {B} | MUST | fail | pass |" in diff and f"| {A} |" not in diff and "1 clause(s) differ" in diff
    same = compare([a, a], CATALOG)
    assert "| t #1 | t #2 |" in same


def test_html_cells_show_each_scenarios_steps_and_link_its_feature(tmp_path: Path) -> None:
    from sbconform.report import write_html

    lines = (Path(__file__).resolve().parent.parent / "features/settlement/sending.feature").read_text().splitlines()
    line = 1 + next(i for i, text in enumerate(lines) if "Scenario: Properties count toward the message size" in text)
    named = {**result("pass", "SETTLE-SEND-006"),  # the line found, not written: the feature file grows
             "name": f"Settling send operations: Properties count toward the message size (features/settlement/sending.feature:{line})"}
    report = build_report(run(named), CATALOG)
    text = write_html([report], CATALOG, tmp_path / "s.html").read_text()
    assert "Scenario: Properties count toward the message size" in text
    assert "When message &quot;props&quot; with a body of 262000 bytes" in text and "Then the operation fails with" in text
    assert 'href="file://' in text and "features/settlement/sending.feature</a>" in text


def test_compare_html_shows_only_the_differences_when_asked(tmp_path: Path) -> None:
    from sbconform.report import write_html

    a = build_report(run(result("pass", A), result("fail", B)), CATALOG)
    b = build_report({**run(result("pass", A), result("pass", B)), "target": {"name": "sdk", "capabilities": []}}, CATALOG)
    text = write_html([a, b], CATALOG, tmp_path / "d.html", only_differences=True).read_text()
    assert text.count('<tr class="clause"') == 1 and f'id="{B}"' in text and f'id="{A}"' not in text


def test_html_filters_work_in_a_headless_browser(tmp_path: Path) -> None:
    """Opt-in where no browser is installed (Debian: apt-get install chromium)."""
    import shutil
    import subprocess

    from sbconform.report import write_html

    browser = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
    if browser is None:
        pytest.skip("no chromium to check the HTML report in")
    should = _level("SHOULD")
    a = build_report(run(result("pass", A), result("fail", B, reason="boom"), result("fail", should)), CATALOG)
    page = write_html([a], CATALOG, tmp_path / "r.html")

    def dom(fragment: str) -> str:
        shown = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                                f"file://{page}{fragment}"], capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0, shown.stderr[-2000:]
        return shown.stdout

    everything = dom("")
    assert f'<span id="shown">{len(CATALOG.clauses)}</span>' in everything
    failing = dom("#status=fail")
    assert '<span id="shown">2</span>' in failing, failing[:2000]
    assert '<span id="shown">1</span>' in dom("#status=fail&level=MUST")


def test_a_client_clause_passing_on_a_target_is_credited_to_the_kits_client_not_the_target() -> None:
    """Clauses tagged ``client`` (the paired client) run the kit's own client over a target:
    their passes are reported apart, with the reason, and never counted as the target's;
    on the model they grade the model's own client; their failures still count."""
    client, broker = "PAIR-FAIL-001", "PAIR-PING-002"
    assert "client" in CATALOG.clauses[client].tags and "client" not in CATALOG.clauses[broker].tags
    report = build_report(run(result("pass", client), result("pass", broker)), CATALOG)
    assert report["clauses"][client]["subject"] == "client" and report["clauses"][broker]["subject"] == "broker"
    assert "not that the target implements" in report["clauses"][client]["reason"]
    assert report["summary"]["client_pass"] == 1 and report["summary"]["broker_pass"] == 1
    assert "1 grade the kit's own client over this target" in render_markdown(report, CATALOG)
    model = build_report(run(result("pass", client), capabilities=("model-internals",)), CATALOG)
    assert model["summary"]["client_pass"] == 0 and model["clauses"][client]["reason"] == ""
    failed = build_report(run(result("fail", client, reason="no failover")), CATALOG)
    assert failed["clauses"][client]["grade"] == "strict" and failed["summary"]["passed"] is False
