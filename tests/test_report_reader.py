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


def scenario(cid: str, outcome: str, reason: str = "") -> dict:
    """One test result of a clause, as the plugin writes it."""
    return {"nodeid": f"t::{cid}", "name": cid, "kind": "scenario", "clauses": [cid], "uses_target": True,
            "outcome": outcome, "reason": reason}


@pytest.fixture(scope="module")
def mutant_run(tmp_path_factory) -> dict:
    """One narrowed certification of a target that ignores complete: its files and console."""
    where = tmp_path_factory.mktemp("reader")
    args = [str(SBCONFORM), "certify", "--target", MUTANT, "--jobs", "1", "--hypothesis-profile", "dev", "--report-dir", str(where / "r"),
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


def test_a_report_says_which_kit_and_catalog_made_it_and_how_it_was_run(mutant_run) -> None:
    """Nothing said which sbconform, which catalog, which options or selection made a report."""
    import sbconform
    from sbconform.report import catalog_version
    from sbspec import load_catalog

    version = catalog_version(load_catalog())
    assert re.fullmatch(r"[0-9a-f]{12}", version)
    report = mutant_run["json"]
    assert report["kit"] == {"sbconform": sbconform.__version__, "catalog": version,
                             "clauses": len(load_catalog().clauses)}
    assert report["run"]["clauses"] == list(CLAUSES) and report["run"]["jobs"] == 1
    assert report["run"]["expectations"] is None and report["run"]["options"] == []
    assert report["run"]["hypothesis_profile"] == "dev"  # how many examples the stateful tests tried
    assert "--hypothesis-profile dev" in report["run"]["arguments"]
    for text in (mutant_run["md"], mutant_run["html"]):
        assert f"sbconform {sbconform.__version__}" in text and f"catalog {version}" in text
        assert report["finished"] in text
        assert "--clause SETTLE-COMP-001 --clause SETTLE-COMP-002" in text


def test_run_info_keeps_the_endpoint_and_masks_every_key() -> None:
    from sbconform.certify_outputs import run_info
    from sbconform.report import build_report, render_markdown
    from sbconform.html_report import render_html
    from sbspec import load_catalog

    info = run_info("sdk", ["serve=false", "secondary=Endpoint=sb://two.example/;SharedAccessKeyName=k;SharedAccessKey=K2SECRET"],
                    "Endpoint=sb://one.example/;SharedAccessKeyName=root;SharedAccessKey=K1SECRET", None,
                    ["settlement"], 2, None, ["-k", "x"])
    assert info["endpoint"] == "sb://one.example/"
    assert "secondary=Endpoint=sb://two.example/;SharedAccessKeyName=k;SharedAccessKey=***" in info["options"]
    catalog = load_catalog()
    report = build_report({"target": {"name": "sdk"}, "tests": []}, catalog, run=info)
    for text in (json.dumps(report), render_markdown(report, catalog), render_html([report], catalog, ["sdk"])):
        assert "sb://one.example/" in text and "SECRET" not in text


def test_each_clause_carries_its_level_quote_and_source(mutant_run) -> None:
    """A reader of a failure saw the kit's statement, never what the documentation says nor where."""
    from sbspec import load_catalog

    clause = load_catalog().clauses[CLAUSES[0]]
    entry = mutant_run["json"]["clauses"][CLAUSES[0]]
    assert entry["level"] == "MUST"
    assert entry["sources"] == [{"source": s.describe(), "quote": s.quote, **({"url": s.url} if s.url else {}),
                                 **({"title": load_catalog().seeds[s.seed]} if s.seed in load_catalog().seeds else {})}
                                for s in clause.sources]
    quote = clause.sources[0].quote
    import html as H

    assert quote and quote.split("\n")[0][:60] in mutant_run["md"]
    assert H.escape(quote.split("\n")[0][:60]) in mutant_run["html"]
    assert clause.sources[0].describe() in mutant_run["md"]


def test_graded_outcomes_agree_between_console_json_html_and_junit(mutant_run) -> None:
    s = mutant_run["json"]["summary"]
    line = next(x for x in mutant_run["stdout"].splitlines() if x.startswith(f"sbconform: {MUTANT}:"))
    assert f"{s['pass']} pass, {s['fail']} fail ({s['strict_fail']} MUST" in line and s["verdict"] in line
    assert f"{s['skip']} skip ({s['not_selected']} not selected)" in line
    assert s["not_selected"] == s["total"] - len(CLAUSES)
    assert f"{s['skip']} skip ({s['not_selected']} not selected)" in mutant_run["md"]
    assert f"{s['skip']} skip ({s['not_selected']} not selected)" in mutant_run["html"]
    assert int(mutant_run["xml"].get("failures")) == s["strict_fail"] > 0
    for cid in CLAUSES:
        status = mutant_run["json"]["clauses"][cid]["status"]
        row = re.search(rf'<tr class="clause" id="{cid}".*?</tr>', mutant_run["html"], re.S)[0]
        assert f'data-status="{status}"' in row
        assert f"| {cid} | MUST | {status}" in mutant_run["md"]


def test_an_interrupted_run_does_not_call_the_clauses_it_never_reached_uncovered() -> None:
    from sbconform.report import build_report
    from sbspec import load_catalog

    report = build_report({"target": {"name": "reference"}, "tests": []}, load_catalog(),
                          incomplete="interrupted by SIGINT")
    entry = report["clauses"]["SETTLE-COMP-001"]
    assert entry["status"] == "skip" and "interrupted by SIGINT" in entry["reason"], entry
    assert report["summary"]["uncovered"] == 0


def _write(path: Path, report: dict) -> str:
    path.write_text(json.dumps(report), encoding="utf-8")
    return str(path)


def test_compare_refuses_reports_of_different_catalogs(mutant_run, tmp_path, capsys) -> None:
    from sbconform.cli import main

    other = json.loads(json.dumps(mutant_run["json"]))
    other["kit"]["catalog"] = "0123456789ab"
    argv = ["compare", str(mutant_run["dir"]), _write(tmp_path / "other.json", other)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "0123456789ab" in err[0] and "catalog" in err[0] and "other.json" in err[0], err
    assert main(["compare", str(mutant_run["dir"]), str(mutant_run["dir"] / "report.json")]) == 0
    out = capsys.readouterr().out
    assert f"catalog {mutant_run['json']['kit']['catalog']}" in out


@pytest.mark.parametrize("content", [b"", b"\x00\xff garbage", b"[1, 2]", b'{"target": {}, "clauses": {}}',
                                     b'{"target": {}, "summary": {}, "kit": [1], "clauses": {}}',
                                     b'{"target": {}, "summary": {}, "clauses": {"X": {"status": "fail", "expected": true, '
                                     b'"expectation": "oops"}}}'])
def test_compare_refuses_garbage_in_one_line(tmp_path, capsys, content) -> None:
    from sbconform.cli import main

    path = tmp_path / "report.json"
    path.write_bytes(content)
    assert main(["compare", str(path), "--html", str(tmp_path / "c.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "c.html").exists()


def test_a_certified_verdict_says_how_much_of_the_catalog_was_graded() -> None:
    """One clause passed, every other skipped for a capability the target lacks: the verdict was
    a bare 'CERTIFIED', read as 'conforms to the catalog'."""
    from sbconform.report import build_report, render_markdown
    from sbspec import load_catalog

    catalog = load_catalog()
    tests = [scenario(cid, "pass") if cid == CLAUSES[0] else scenario(cid, "skip", "target 't' lacks capability 'x'")
             for cid in catalog.clauses]
    s = build_report({"target": {"name": "t"}, "tests": tests}, catalog)["summary"]
    total = len(catalog.clauses)
    assert s["certified"] and s["verdict"] == f"CERTIFIED for 1 of {total} clauses graded ({total - 1} skipped, 0 uncovered)"
    full = build_report({"target": {"name": "t"}, "tests": [{**t, "outcome": "pass"} for t in tests]}, catalog)
    assert full["summary"]["verdict"] == "CERTIFIED" and "**CERTIFIED**" in render_markdown(full, catalog)


def test_a_report_says_what_the_target_is_and_what_it_lacks() -> None:
    """report.md and the HTML page listed the capabilities a target has, never those it lacks
    (with the target's reason) nor its SDK and endpoint: what was not tested, and why, was hidden."""
    from sbconform.html_report import render_html
    from sbconform.report import build_report, render_markdown
    from sbspec import load_catalog

    catalog = load_catalog()
    target = {"name": "sdk", "capabilities": ["sessions"], "sdk": "azure-servicebus 7.15.0",
              "endpoint": "sbconform serve (started by the target)",
              "lacking": {"model-internals": "not observable <through> the SDK"}}
    report = build_report({"target": target, "tests": []}, catalog)
    md, page = render_markdown(report, catalog), render_html([report], catalog, ["sdk"])
    assert "Lacks: model-internals (not observable <through> the SDK)." in md
    assert "Lacks: model-internals (not observable &lt;through&gt; the SDK)." in page
    for text in (md, page):
        assert "sdk: azure-servicebus 7.15.0" in text and "endpoint: sbconform serve (started by the target)" in text


def test_an_interrupted_report_does_not_say_the_target_declared_no_capability() -> None:
    """Stopped before any test process reported, the target is only a name: report.md said
    'Capabilities: none declared', as if the target had none."""
    from sbconform.report import build_report, render_markdown
    from sbspec import load_catalog

    catalog = load_catalog()
    report = build_report({"target": {"name": "reference"}, "tests": []}, catalog, incomplete="interrupted by SIGINT")
    md = render_markdown(report, catalog)
    assert "none declared" not in md and "Capabilities: not known (no test process reported them)." in md


def test_junit_says_the_verdict_and_what_made_it(mutant_run) -> None:
    """The JUnit XML a CI system shows had the clauses but no verdict, version or selection."""
    report = mutant_run["json"]
    props = {p.get("name"): p.get("value") for p in mutant_run["xml"].iter("property")}
    assert props["verdict"] == report["summary"]["verdict"]
    assert props["sbconform"] == report["kit"]["sbconform"] and props["catalog"] == report["kit"]["catalog"]
    assert props["run"] == report["run"]["arguments"] and props["finished"] == report["finished"]


def test_a_key_in_a_failure_reason_is_masked_in_every_file_certify_writes(tmp_path) -> None:
    """The key was masked verbatim in report.json and report.md, not in the JUnit XML nor the HTML."""
    from sbconform.certify_outputs import write_outputs
    from sbconform.report import build_report
    from sbspec import load_catalog

    catalog = load_catalog()
    test = scenario(CLAUSES[0], "fail", "refused: token made with S3CR3TKEY== expired")
    report = build_report({"target": {"name": "sdk"}, "tests": [test]}, catalog)
    written = write_outputs(report, catalog, tmp_path / "r", tmp_path / "j.xml", tmp_path / "p.html", ("S3CR3TKEY==",))
    assert len(written) == 4
    for path in written:
        text = path.read_text(encoding="utf-8")
        assert "S3CR3TKEY" not in text and "token made with ***" in text, path


def test_the_secondary_namespaces_key_is_masked_verbatim_too() -> None:
    """Only the primary connection string's key was masked verbatim in run.log and the reports;
    the key of --option secondary=... (the paired namespace) only where it followed 'SharedAccessKey='."""
    from sbconform.certify_outputs import secrets_of

    assert set(secrets_of("Endpoint=sb://a/;SharedAccessKeyName=k;SharedAccessKey=ONE",
                          ["serve=true", "secondary=Endpoint=sb://b/;SharedAccessKeyName=k;SharedAccessKey=TWO"])) == {"ONE", "TWO"}
    assert secrets_of(None, []) == ()


def test_compare_tells_a_clause_not_selected_from_one_the_target_could_not_run() -> None:
    """Both were 'skip': a clause one run did not select looked like one the other target lacks
    the capability for, and --only-differences hid the difference."""
    from sbconform.report import build_report, compare
    from sbspec import load_catalog

    catalog = load_catalog()
    narrowed = build_report({"target": {"name": "a"}, "selection": [CLAUSES[0]], "tests": [scenario(CLAUSES[0], "pass")]},
                            catalog)
    lacking = build_report({"target": {"name": "b"}, "tests": [scenario(CLAUSES[0], "pass"),
                                                              scenario(CLAUSES[1], "skip", "lacks capability 'x'")]}, catalog)
    text = compare([narrowed, lacking], catalog, only_differences=True)
    assert f"| {CLAUSES[1]} | MUST | not selected | skip |" in text
    assert f"| {CLAUSES[0]} |" not in text


def test_compare_shows_a_clause_this_sbconforms_catalog_does_not_have() -> None:
    """The rows followed the installed catalog: a failing clause of a newer catalog vanished from
    the table while the totals still counted it."""
    from sbconform.report import build_report, compare
    from sbspec import load_catalog

    catalog = load_catalog()
    report = build_report({"target": {"name": "a"}, "tests": []}, catalog)
    report["clauses"]["SETTLE-NEW-999"] = {"status": "fail", "level": "SHOULD", "reason": "x", "scenarios": []}
    assert "| SETTLE-NEW-999 | SHOULD | fail |" in compare([report], catalog)
    from sbconform.html_report import render_html

    page = render_html([report], catalog, ["a"])
    assert 'id="SETTLE-NEW-999" data-area="?" data-level="SHOULD"' in page and 'value="?" checked' in page


def test_a_run_stopped_before_any_test_process_reported_still_names_its_target() -> None:
    """A run whose every test process --shard-timeout stopped wrote 'sbconform report: ?'."""
    from sbconform.certify_outputs import run_info
    from sbconform.report import build_report, render_markdown
    from sbspec import load_catalog

    catalog = load_catalog()
    info = run_info("reference", [], None, None, ["settlement"], 1, 3.0, [])
    report = build_report({"target": {}, "tests": []}, catalog, incomplete="stopped", run=info)
    assert report["target"]["name"] == "reference" and info["target"] == "reference"
    assert render_markdown(report, catalog).startswith("# sbconform report: reference\n")


def test_the_counts_per_area_tell_the_clauses_not_selected_apart(mutant_run) -> None:
    """'paired: 0 pass, 0 fail, 40 skip' after --clause settlement read as 40 paired clauses the
    target could not run."""
    paired = mutant_run["json"]["summary"]["by_area"]["paired"]
    assert paired["skip"] == paired["not_selected"] > 0
    n = paired["not_selected"]
    assert f"  paired: 0 pass, 0 fail, {n} skip ({n} not selected), 0 uncovered" in mutant_run["stdout"]
    assert f"| paired | 0 | 0 | {n} ({n} not selected) | 0 |" in mutant_run["md"]


def test_compare_labels_reports_of_one_target_by_their_endpoints() -> None:
    """Two namespaces certified through the sdk target were 'sdk #1' and 'sdk #2': which was which?"""
    from sbconform.report import build_report, compare
    from sbspec import load_catalog

    catalog = load_catalog()
    reports = [build_report({"target": {"name": "sdk"}, "tests": []}, catalog, run={"endpoint": f"sb://{ns}.example/"})
               for ns in ("east", "west")]
    assert "| clause | level | sdk (sb://east.example/) | sdk (sb://west.example/) |" in compare(reports, catalog)


def test_the_endpoint_of_a_connection_string_missing_a_semicolon_keeps_no_key() -> None:
    from sbconform.certify_outputs import run_info

    info = run_info("sdk", [], "Endpoint=sb://x.example/SharedAccessKeyName=k,SharedAccessKey=K3Y", None, [], 1, None, [])
    assert "K3Y" not in json.dumps(info)


def test_the_verdict_says_which_failures_it_rests_on() -> None:
    """'NOT CERTIFIED' said nothing of why, and 'CERTIFIED' nothing of the SHOULD clauses failing."""
    from sbconform.report import build_report
    from sbspec import load_catalog

    catalog = load_catalog()
    by_level = {c.level: cid for cid, c in catalog.clauses.items()}

    def verdict(*failing: str) -> str:
        tests = [scenario(cid, "fail" if cid in failing else "pass", "x") for cid in catalog.clauses]
        return build_report({"target": {"name": "t"}, "tests": tests}, catalog)["summary"]["verdict"]

    assert verdict(by_level["MUST"]) == "NOT CERTIFIED: 1 MUST clause failing"
    assert verdict(by_level["SHOULD"], by_level["INFO"]) == "CERTIFIED; failing without failing certification: 1 SHOULD/MAY, 1 INFO"
    assert verdict() == "CERTIFIED"


def test_an_expected_failure_shows_why_it_was_expected(tmp_path) -> None:
    """report.md and the HTML page said 'fail (expected)' with the failure, never the expectations
    file's reason nor its source: the reader could not tell a known gap from a waved-away bug."""
    from sbconform.html_report import render_html
    from sbconform.report import build_report, load_expectations, render_markdown
    from sbspec import load_catalog

    catalog = load_catalog()
    path = tmp_path / "e.toml"
    path.write_text(f'[clauses."{CLAUSES[0]}"]\nstatus = "fail"\nreason = "the proxy keeps locks"\nsource = "issue 7"\n')
    test = scenario(CLAUSES[0], "fail", "receiver B got m1")
    report = build_report({"target": {"name": "t"}, "tests": [test]}, catalog, load_expectations(path))
    assert report["clauses"][CLAUSES[0]]["expectation"] == {"status": "fail", "reason": "the proxy keeps locks",
                                                             "source": "issue 7"}
    for text in (render_markdown(report, catalog), render_html([report], catalog, ["t"])):
        assert "expected (--expectations): the proxy keeps locks (issue 7)" in text
        assert "receiver B got m1" in text


def test_compare_says_when_and_by_which_sbconform_each_report_was_made() -> None:
    from sbconform.report import build_report, compare
    from sbspec import load_catalog

    catalog = load_catalog()
    old, new = (build_report({"target": {"name": n}, "tests": [], "finished": f"2026-0{i}-01T00:00:00Z"}, catalog)
                for i, n in ((1, "a"), (2, "b")))
    old["kit"]["sbconform"] = "0.0.9"
    text = compare([old, new], catalog)
    assert "| finished | 2026-01-01T00:00:00Z | 2026-02-01T00:00:00Z |" in text
    assert f"| sbconform | 0.0.9 | {new['kit']['sbconform']} |" in text


def test_report_md_sums_up_what_was_not_graded_and_why() -> None:
    """What was not tested was only findable clause by clause in 216 rows."""
    from sbconform.report import build_report, render_markdown
    from sbspec import load_catalog

    catalog = load_catalog()
    lacking = [cid for cid in catalog.clauses if cid not in CLAUSES][:3]
    tests = [scenario(cid, "pass") for cid in CLAUSES] + [scenario(cid, "skip", "target 't' lacks 'x'") for cid in lacking]
    md = render_markdown(build_report({"target": {"name": "t"}, "tests": tests}, catalog), catalog)
    section = md[md.index("## Not graded"):]
    assert f"| skip | target 't' lacks 'x' | 3 | {', '.join(lacking)} |" in section
    assert f"| uncovered | no scenario or test names this clause | {len(catalog.clauses) - 5} |" in section


def test_a_quotes_source_is_named_by_its_documents_title_not_only_its_file(mutant_run) -> None:
    """'(004_63e6cc90d25a5256.txt)' told the reader nothing of where the quote comes from."""
    from sbspec import load_catalog

    catalog = load_catalog()
    source = catalog.clauses[CLAUSES[0]].sources[0]
    assert source.seed and catalog.seeds[source.seed]
    entry = mutant_run["json"]["clauses"][CLAUSES[0]]["sources"][0]
    assert entry["title"] == catalog.seeds[source.seed]
    assert f"({catalog.seeds[source.seed]}: {source.describe()})" in mutant_run["md"]


def test_a_narrowed_verdict_says_which_failures_it_rests_on_too() -> None:
    from sbconform.report import build_report
    from sbspec import load_catalog

    catalog = load_catalog()
    by_level = {c.level: cid for cid, c in catalog.clauses.items()}

    def verdict(*failing: str) -> str:
        tests = [scenario(cid, "fail", "x") for cid in failing] + [scenario(CLAUSES[0], "pass")]
        raw = {"target": {"name": "t"}, "selection": [*failing, CLAUSES[0]], "tests": tests}
        return build_report(raw, catalog)["summary"]["verdict"]

    assert verdict(by_level["MUST"]).startswith("FAILED for the 2 clauses graded: 1 MUST clause failing (a narrowed run")
    assert verdict(by_level["SHOULD"]).startswith("PASSED for the 2 clauses graded; failing without failing the run: "
                                                  "1 SHOULD/MAY (a narrowed run")


def test_a_failing_cell_shows_its_reason_without_a_click(mutant_run) -> None:
    """The HTML page said 'fail (strict)' and hid why behind a disclosure in every failing cell."""
    row = re.search(rf'<tr class="clause" id="{CLAUSES[0]}".*?</tr>', mutant_run["html"], re.S)[0]
    cell = row[row.index('data-status="fail"'):]
    first = mutant_run["json"]["clauses"][CLAUSES[0]]["reason"][:60]
    import html as H

    assert H.escape(first) in cell[:cell.index("<details>")]


def test_the_html_status_filter_tells_not_selected_from_skipped(mutant_run) -> None:
    """Filtering the page on 'skip' showed the 214 clauses the run did not select among those the
    target could not run: no way to see only the latter."""
    page = mutant_run["html"]
    assert '<input type="checkbox" value="not-selected" checked> not selected' in page
    other = next(cid for cid, e in mutant_run["json"]["clauses"].items() if e.get("selected") is False)
    assert re.search(rf'<tr class="clause" id="{other}"[^>]*data-statuses="not-selected"', page)


def test_a_narrowed_run_that_graded_nothing_does_not_say_passed() -> None:
    """Two clauses selected, both covered only by model-level tests on an SDK target: the verdict
    was 'PASSED for the 0 clauses graded'."""
    from sbconform.report import build_report
    from sbspec import load_catalog

    raw = {"target": {"name": "sdk"}, "selection": list(CLAUSES),
           "tests": [{**scenario(cid, "pass"), "uses_target": False} for cid in CLAUSES]}
    s = build_report(raw, load_catalog())["summary"]
    assert s["graded"] == 0 and "PASSED" not in s["verdict"]
    assert s["verdict"].startswith("NOTHING GRADED: none of the 2 selected clauses")
