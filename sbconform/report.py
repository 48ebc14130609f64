"""Per-clause reports: what was run against a target, and what it says about each clause.

``build_report`` folds the per-test results the pytest plugin wrote (``--sb-report-json``)
into one graded outcome per clause:

- ``fail``: a test of the clause failed on this target;
- ``pass``: at least one test of the clause ran and passed, and none failed;
- ``skip``: every test of the clause was skipped (the reasons say why, usually a
  capability the target lacks), or only model-level tests cover it and the target is
  not the model;
- ``uncovered``: no scenario or test names the clause yet.

Expectations (web-platform-tests style) live outside the tests, in a TOML file per
target: ``[clauses."SETTLE-LOCK-009"] status = "fail" reason = "..."``. A clause that
fails as expected is reported as ``fail`` with ``expected = true`` and does not make
certification fail. A clause that passes where the file says it fails (or skips) is an
**unexpected pass**: the file is out of date, which is the user's to fix, not a failure of the
target. The clause stays ``pass``, marked ``unexpected_pass = true`` with a reason saying so,
counted apart (``summary.unexpected_pass``), never graded as a MUST failure; the run is not
certified until the file is updated (certify exits 2 for it).

Verdicts follow the clause levels (as Autobahn grades "strict" and "non-strict"): a
failing MUST clause is a **strict** failure and fails certification; a failing SHOULD or
MAY clause is **non-strict** and an INFO clause **informational**: both are reported, and
neither fails certification (the verdict names them). A run narrowed to some clauses
(``--clause``, or pytest arguments) grades those only and is never "CERTIFIED"; an interrupted
run (or one a ``--shard-timeout`` stopped) is incomplete and certifies nothing; nor does a run
that graded no clause. A report says what made it (``kit``) and how it was run (``run``).

Each clause has a **subject** (Jepsen's distinction between the system and the client
that drives it): ``broker`` for what a broker does, ``client`` for clauses tagged
``client`` in the catalog, which specify a client library's behaviour (the paired
namespace client, a sender's timeout). On any target but the reference model those run
the kit's own client (``sbconform.paired``) over the target: a pass shows the target
*supports* that client, never that the target implements the behaviour, so it is
reported apart (``client_pass``) and not counted as a pass of the target
(``broker_pass``); a failure is still a failure of the target's part in it (the client
worked on the model, so the difference is the target's).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

from sbspec import Catalog

from .results import RunResults

STATUSES = ("pass", "fail", "skip", "uncovered")

#: level -> how a failure at that level counts
GRADES = {"MUST": "strict", "SHOULD": "non-strict", "MAY": "non-strict", "INFO": "informational"}


#: the reason a client clause's pass carries on a target other than the model
CLIENT_PASS = ("the kit's client (sbconform.paired) passed over this target: evidence that the target "
               "supports that client, not that the target implements the behaviour")


def subject_of(clause: Any) -> str:
    """``client`` for a clause about a client library's behaviour (tag ``client``), else ``broker``."""
    return "client" if "client" in clause.tags else "broker"


def catalog_version(catalog: Catalog) -> str:
    """The catalog's fingerprint (12 hex digits of a SHA-256 of every clause's id, area, level,
    statement and sources): two reports grade the same clauses only if theirs agree."""
    text = json.dumps([[c.id, c.area, c.level, c.text, [[s.describe(), s.quote] for s in c.sources]]
                       for c in sorted(catalog.clauses.values(), key=lambda c: c.id)])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def sources_of(clause: Any, catalog: Catalog) -> list[dict[str, str]]:
    """Where a clause comes from: each source's seed and section (or page), the seed's title, its verbatim quote."""
    return [{"source": s.describe(), "quote": s.quote, **({"url": s.url} if s.url else {}),
             **({"title": catalog.seeds[s.seed]} if s.seed in catalog.seeds else {})} for s in clause.sources]


def cite(source: dict[str, str]) -> str:
    """'Message transfers, locks and settlement (French, 2017): 004_....txt', or the source alone."""
    return f"{source['title']}: {source['source']}" if source.get("title") else source["source"]


def clause_patterns(args: list[str]) -> list[str]:
    """The clause selection patterns of ``--clause`` / ``--sb-clause`` arguments (commas split too)."""
    return [p.strip() for arg in args for p in arg.split(",") if p.strip()]


def selects(pattern: str, clause: Any) -> bool:
    """Does a clause selection pattern (an id, a glob, an area name) take this clause?"""
    return pattern == clause.area or fnmatch.fnmatchcase(clause.id, pattern.upper())


#: an expectations file has an entry per clause (the emulator's: 21 kB); past this it is not one
MAX_EXPECTATIONS_BYTES = 4 * 1024 * 1024


def load_expectations(path: Path | str | None) -> dict[str, dict[str, str]]:
    if path is None:
        return {}
    path = Path(path)
    try:
        if path.stat().st_size > MAX_EXPECTATIONS_BYTES:
            raise ValueError(f"{path}: too large for an expectations file ({path.stat().st_size:,} bytes; "
                             f"at most {MAX_EXPECTATIONS_BYTES:,})")
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"{path}: cannot read expectations: {error}") from error
    except RecursionError:
        raise ValueError(f"{path}: cannot read expectations: arrays or tables nested too deeply") from None
    unknown = sorted(set(data) - {"clauses", "quotas"})  # quotas: the emulator's, documentation for the reader
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(unknown)}: expected [clauses.ID] tables "
                         f"(status = \"fail\" or \"skip\", reason = ..., source = ...)")
    clauses = data.get("clauses", {})
    if not isinstance(clauses, dict):
        raise ValueError(f"{path}: 'clauses' must be a table of clause ids ([clauses.ID] status = ...), got {type(clauses).__name__}")
    out = {}
    for cid, entry in clauses.items():
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: clause {cid}: expected a table (status = \"fail\" or \"skip\", reason = ...), got {entry!r}")
        status = entry.get("status")
        if status not in ("fail", "skip"):
            raise ValueError(f"{path}: clause {cid}: expected status must be 'fail' or 'skip', got {status!r}")
        extra = sorted(set(entry) - {"status", "reason", "source"})
        if extra:
            raise ValueError(f"{path}: clause {cid}: unknown key(s) {', '.join(extra)}; expected status, reason, source")
        for key in ("reason", "source"):
            if not isinstance(entry.get(key, ""), str):
                raise ValueError(f"{path}: clause {cid}: {key} must be text, got {entry[key]!r}")
        out[cid] = {"status": status, "reason": entry.get("reason", ""), **({"source": entry["source"]} if entry.get("source") else {})}
    return out


def build_report(
    raw: RunResults,
    catalog: Catalog,
    expectations: dict[str, dict[str, str]] | None = None,
    covered: set[str] | None = None,
    narrowed: bool = False,
    incomplete: str | None = None,
    run: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``run``: how certify was run (``certify_outputs.run_info``, keys masked). ``covered``: the clauses some scenario or test of the kit names (``coverage.check``).
    A clause in it that no test of this run named was not run (the run was narrowed with
    pytest arguments): ``skip``, saying so, not ``uncovered``."""
    expectations = expectations or {}
    target = raw.get("target") or {}
    if not target.get("name") and (run or {}).get("target"):  # no test process reported the target
        target = {**target, "name": run["target"]}
    is_model = "model-internals" in target.get("capabilities", [])
    unknown = sorted(set(expectations) - set(catalog.clauses))
    if unknown:
        raise ValueError(f"expectations name unknown clauses: {', '.join(unknown)}")

    by_clause: dict[str, list[dict[str, Any]]] = {cid: [] for cid in catalog.clauses}
    for test in raw.get("tests", []):
        for cid in test.get("clauses", []):
            by_clause.setdefault(cid, []).append(test)

    selection = raw.get("selection") or []
    clauses: dict[str, Any] = {}
    for cid, clause in catalog.clauses.items():
        tests = by_clause.get(cid, [])
        if selection and not any(selects(p, clause) for p in selection):
            clauses[cid] = {"area": clause.area, "level": clause.level, "text": clause.text, "sources": sources_of(clause, catalog),
                            "scenarios": [], "status": "skip", "selected": False,
                            "reason": f"not selected (--clause {' '.join(selection)})"}
            continue
        relevant = [t for t in tests if t.get("uses_target") or is_model]
        entry: dict[str, Any] = {
            "area": clause.area,
            "level": clause.level,
            "subject": subject_of(clause),
            "text": clause.text,
            "sources": sources_of(clause, catalog),
            "scenarios": [
                {"name": t["name"], "id": t["nodeid"], "kind": t["kind"], "outcome": t["outcome"], "reason": t.get("reason", "")}
                for t in tests
            ],
        }
        failed = [t for t in relevant if t["outcome"] in ("fail", "xpass")]
        passed = [t for t in relevant if t["outcome"] == "pass"]
        if not tests and incomplete:  # the run stopped before any test of it reported: not known to be uncovered
            entry["status"], entry["reason"] = "skip", f"not graded: no test of it finished ({incomplete})"
        elif not tests and covered is not None and cid in covered:
            entry["status"], entry["reason"] = "skip", "not run: none of its tests was among the tests this run was narrowed to"
        elif not tests:
            entry["status"], entry["reason"] = "uncovered", "no scenario or test names this clause"
        elif failed:
            entry["status"] = "fail"
            entry["reason"] = "; ".join(f"{t['name']}: {t.get('reason') or 'failed'}" for t in failed)
        elif passed:
            entry["status"], entry["reason"] = "pass", ""
            if entry["subject"] == "client" and not is_model:
                entry["reason"] = CLIENT_PASS
        elif not relevant:
            entry["status"] = "skip"
            entry["reason"] = "covered only by model-level tests, which do not exercise this target"
        else:
            reasons = sorted({t.get("reason") or "skipped" for t in relevant})
            entry["status"], entry["reason"] = "skip", "; ".join(reasons)
        expected = expectations.get(cid)
        if expected is not None:
            entry["expectation"] = expected
            if entry["status"] == expected["status"]:
                entry["expected"] = True
            elif entry["status"] == "pass":  # the file is out of date: the target passed
                entry["expected"] = False
                entry["unexpected_pass"] = True
                entry["reason"] = (
                    f"unexpected pass: the expectations say {expected['status']} ({expected['reason']}); "
                    "update the expectations file"
                )
        if entry["status"] == "fail" and not entry.get("expected"):
            entry["grade"] = GRADES.get(clause.level, "strict")
        clauses[cid] = entry

    summary: dict[str, Any] = {"total": len(clauses), **{s: 0 for s in STATUSES}, "expected_fail": 0,
                               "strict_fail": 0, "non_strict_fail": 0, "informational_fail": 0, "by_area": {}}
    for entry in clauses.values():
        summary[entry["status"]] += 1
        if entry["status"] == "fail" and entry.get("expected"):
            summary["expected_fail"] += 1
        if "grade" in entry:
            summary[entry["grade"].replace("-", "_") + "_fail"] += 1
        area = summary["by_area"].setdefault(entry["area"], Counter())
        area[entry["status"]] += 1
        area["not_selected"] += entry.get("selected") is False
    summary["by_area"] = {k: dict(v) for k, v in summary["by_area"].items()}
    summary["not_selected"] = sum(1 for e in clauses.values() if e.get("selected") is False)
    summary["unexpected_fail"] = summary["fail"] - summary["expected_fail"]
    summary["unexpected_pass"] = sum(1 for e in clauses.values() if e.get("unexpected_pass"))
    # passes that grade the kit's own client over this target, not the target (see above)
    summary["client_pass"] = 0 if is_model else sum(
        1 for e in clauses.values() if e["status"] == "pass" and e.get("subject") == "client")
    summary["broker_pass"] = summary["pass"] - summary["client_pass"]
    graded = sum(1 for e in clauses.values() if e["status"] in ("pass", "fail"))
    summary["graded"] = graded
    summary["passed"] = summary["strict_fail"] == 0 and not incomplete  # no MUST clause failed
    summary["scope"] = "selection" if (selection or narrowed) else "catalog"
    summary["incomplete"] = incomplete
    # a run that graded nothing (no test ran, or every clause uncovered) certifies nothing
    summary["certified"] = (summary["passed"] and summary["scope"] == "catalog" and graded > 0
                            and not summary["unexpected_pass"])
    stale = (f"; the expectations file is out of date ({summary['unexpected_pass']} unexpected pass"
             f"{'es' if summary['unexpected_pass'] > 1 else ''}: update it)") if summary["unexpected_pass"] else ""
    must = summary["strict_fail"]
    lesser = ", ".join(f"{n} {what}" for n, what in ((summary["non_strict_fail"], "SHOULD/MAY"),
                                                    (summary["informational_fail"], "INFO")) if n)
    failing = (f": {must} MUST clause{'s' if must > 1 else ''} failing" if must else
               f"; failing without failing the run: {lesser}" if lesser else "")
    if incomplete:
        summary["verdict"] = f"INCOMPLETE ({incomplete}): not certified"
    elif summary["scope"] == "selection" and not graded:
        chosen = summary["total"] - summary["not_selected"]
        summary["verdict"] = (f"NOTHING GRADED: none of the {chosen} selected clauses was graded on this target "
                              f"(see why under each; a narrowed run: not a certification of the catalog){stale}")
    elif summary["scope"] == "selection":
        summary["verdict"] = (f"{'PASSED' if summary['passed'] else 'FAILED'} for the {graded} clauses graded{failing} "
                              f"(a narrowed run: not a certification of the catalog){stale}")
    elif summary["certified"]:
        partial = (f" for {graded} of {summary['total']} clauses graded ({summary['skip']} skipped, "
                   f"{summary['uncovered']} uncovered)") if graded < summary["total"] else ""
        summary["verdict"] = "CERTIFIED" + partial + failing.replace("the run", "certification")
    else:
        summary["verdict"] = ("NOT CERTIFIED" + (failing if must else "" if graded else
                                                 " (no clause was graded: no test ran)") + stale)
    from . import __version__

    return {
        "target": target,
        "kit": {"sbconform": __version__, "catalog": catalog_version(catalog), "clauses": len(catalog.clauses)},
        "run": run or {},
        "finished": raw.get("finished"),
        "pytest_exit_status": raw.get("exitstatus"),
        "selection": selection,
        "clauses": clauses,
        "summary": summary,
    }


def expected_note(entry: dict[str, Any]) -> str:
    """Why a clause was expected to fail or skip (the expectations file's reason and source), else ''."""
    if not entry.get("expected"):
        return ""
    e = entry.get("expectation") or {}
    return f"expected (--expectations): {e.get('reason') or 'no reason given'}" + (f" ({e['source']})" if e.get("source") else "")


def skips(s: dict[str, Any]) -> str:
    """'200 skip (198 not selected)': the skips a narrowed run chose apart from those of the target."""
    return f"{s['skip']} skip" + (f" ({s['not_selected']} not selected)" if s.get("not_selected") else "")


def area_line(area: str, counts: dict[str, Any]) -> str:
    """'  paired: 0 pass, 0 fail, 40 skip (40 not selected), 0 uncovered': the console's line per area."""
    return (f"  {area}: {counts.get('pass', 0)} pass, {counts.get('fail', 0)} fail, "
            f"{skips({'skip': counts.get('skip', 0), **counts})}, {counts.get('uncovered', 0)} uncovered")


def summary_line(name: str, s: dict[str, Any]) -> str:
    """The console's one line on a report, with the counts report.md and the HTML page show."""
    client = f" ({s['client_pass']} of them the kit's client over the target)" if s.get("client_pass") else ""
    return (f"sbconform: {name}: {s['pass']} pass{client}, {s['fail']} fail ({s['strict_fail']} MUST, "
            f"{s['non_strict_fail']} SHOULD/MAY, {s['informational_fail']} INFO, {s['expected_fail']} expected), "
            f"{skips(s)}, " + (f"{s['unexpected_pass']} unexpected pass (expectations out of date), "
                               if s.get("unexpected_pass") else "")
            + f"{s['uncovered']} uncovered of {s['total']} clauses -> {s['verdict']}")


def target_lines(target: dict[str, Any]) -> list[str]:
    """What the target is (its other described fields) and what it lacks, with its reasons: what was
    not tested, and why."""
    other = "; ".join(f"{k}: {v}" for k, v in target.items() if k not in ("name", "capabilities", "lacking"))
    lacking = target.get("lacking") or {}
    return ([f"Target {target.get('name', '?')}: {other}."] if other else []) + (
        ["Lacks: " + "; ".join(f"{k} ({v})" for k, v in lacking.items()) + "."] if isinstance(lacking, dict) and lacking else [])


def provenance(report: dict[str, Any]) -> str:
    """What made a report and how the run was made (its keys masked by ``run_info``), in one line."""
    kit, run = report.get("kit") or {}, report.get("run") or {}
    return "; ".join(part for part in (
        f"sbconform {kit.get('sbconform', '?')}, catalog {kit.get('catalog', '?')} ({kit.get('clauses', '?')} clauses)",
        f"finished {report.get('finished') or '? (the run did not finish)'}",
        f"endpoint {run['endpoint']}" if run.get("endpoint") else "",
        f"run with: {run['arguments']}" if run.get("arguments") else "") if part)


def render_markdown(report: dict[str, Any], catalog: Catalog) -> str:
    s = report["summary"]
    target = report["target"]
    lines = [
        f"# sbconform report: {target.get('name', '?')}",
        "",
        f"**{s.get('verdict') or ('CERTIFIED' if s['certified'] else 'NOT CERTIFIED')}**: "
        f"{s['pass']} pass, {s['fail']} fail ({s['expected_fail']} expected), {skips(s)}, "
        f"{s['uncovered']} uncovered, of {s['total']} clauses.",
        "",
        provenance(report) + ".",
        "",
        *([f"Of the passes, {s['client_pass']} grade the kit's own client over this target (clauses tagged "
           f"`client`: the target supports that client; it does not implement it) and {s['broker_pass']} the target itself.", ""]
          if s.get("client_pass") else []),
        f"Failures by level: {s.get('strict_fail', 0)} strict (MUST: fails certification), "
        f"{s.get('non_strict_fail', 0)} non-strict (SHOULD/MAY), {s.get('informational_fail', 0)} informational (INFO).",
        "",
        *([f"**Incomplete**: {s['incomplete']}; clauses whose tests did not finish are not graded.", ""]
          if s.get("incomplete") else []),
        "Capabilities: " + (", ".join(target["capabilities"]) or "none declared" if "capabilities" in target
                            else "not known (no test process reported them)") + ".",
        "",
        *(line for text in target_lines(target) for line in (text, "")),
        *([f"Only these clauses were selected: `{' '.join(report['selection'])}`; the others are skipped.", ""]
          if report.get("selection") else []),
        *([f"Only {s.get('graded', 0)} clauses were graded (the run was narrowed); the others are skipped.", ""]
          if s.get("scope") == "selection" and not report.get("selection") else []),
        "| area | pass | fail | skip | uncovered |",
        "|---|---:|---:|---:|---:|",
    ]
    for area, counts in s["by_area"].items():
        skipped = f"{counts.get('skip', 0)}" + (f" ({counts['not_selected']} not selected)" if counts.get("not_selected") else "")
        lines.append(f"| {area} | {counts.get('pass', 0)} | {counts.get('fail', 0)} | {skipped} | {counts.get('uncovered', 0)} |")
    ungraded: dict[tuple[str, str], list[str]] = {}  # what was not tested, and why, in a few rows
    for cid, e in report["clauses"].items():
        if e["status"] in ("skip", "uncovered"):
            ungraded.setdefault((e["status"], (e.get("reason") or "?").replace("|", "\\|").replace("\n", " ")[:200]), []).append(cid)
    if ungraded:
        lines += ["", "## Not graded", "", "| status | why | clauses | which |", "|---|---|---:|---|"]
        lines += [f"| {status} | {why} | {len(ids)} | {', '.join(ids[:8])}{', ...' if len(ids) > 8 else ''} |"
                  for (status, why), ids in sorted(ungraded.items(), key=lambda item: -len(item[1]))]
    for area, info in catalog.areas.items():
        entries = [(cid, e) for cid, e in report["clauses"].items() if e["area"] == area]
        if not entries:
            continue
        lines += ["", f"## {info.get('title', area)}", "", "| clause | level | status | reason |", "|---|---|---|---|"]
        for cid, e in entries:
            status = e["status"] + (" (expected)" if e.get("expected") and e["status"] == "fail" else
                                    " (unexpected: update the expectations)" if e.get("unexpected_pass") else
                                    f" ({e['grade']})" if e.get("grade") else "")
            reason = "; ".join(filter(None, (expected_note(e), e.get("reason")))).replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {cid} | {e['level']} | {status} | {reason[:300]} |")
    failing = [(cid, e) for cid, e in report["clauses"].items() if e["status"] == "fail"]
    if failing:
        lines += ["", "## Failures in detail", ""]
        for cid, e in failing:
            lines.append(f"### {cid} ({e['level']}): {e['text']}")
            lines += [f"> {' '.join(src['quote'].split())} ({cite(src)})" for src in e.get("sources", [])] + [""]
            for sc in e["scenarios"]:
                if sc["outcome"] in ("fail", "xpass"):
                    lines.append(f"- `{sc['id']}`: {sc['reason']}")
            lines.append("")
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], catalog: Catalog, report_dir: Path,
                 secrets: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """``report.json`` and ``report.md`` in ``report_dir``, keys masked (``sbconform.secrets``)."""
    from .secrets import mask_value

    report = mask_value(report, secrets)
    report_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = report_dir / "report.json", report_dir / "report.md"
    json_path.write_text(json.dumps(report, indent=2, sort_keys=False), encoding="utf-8")
    md_path.write_text(render_markdown(report, catalog), encoding="utf-8")
    return json_path, md_path


def label(report: dict[str, Any], index: int = 0) -> str:
    """A report's column label: the target's name and what tells it apart (image, serve, endpoint)."""
    target = report.get("target", {})
    name = target.get("name", f"target{index + 1}")
    extra = target.get("image") or ("serve" if "started by the target" in str(target.get("endpoint", "")) else
                                    str((report.get("run") or {}).get("endpoint") or ""))
    return f"{name} ({extra})" if extra else name


def _labels(reports: list[dict[str, Any]]) -> list[str]:
    labels = [label(r, i) for i, r in enumerate(reports)]
    seen: Counter = Counter(labels)
    out, count = [], Counter()
    for text in labels:
        count[text] += 1
        out.append(f"{text} #{count[text]}" if seen[text] > 1 else text)
    return out


def status_cells(reports: list[dict[str, Any]], cid: str) -> list[str]:
    """A clause's status in each report ("—" where a report lacks it; "*" where expected; "not
    selected" where the run's --clause left it out, not a skip of the target's)."""
    cells = []
    for r in reports:
        e = r["clauses"].get(cid)
        cells.append("—" if e is None else "not selected" if e.get("selected") is False
                     else e["status"] + ("*" if e.get("expected") else ""))
    return cells


def clause_rows(reports: list[dict[str, Any]], catalog: Catalog) -> list[tuple[str, str, str, str]]:
    """(id, area, level, statement) of each clause to show: the catalog's, then those only the
    reports have (graded against another catalog), never silently left out."""
    rows = [(cid, c.area, c.level, c.text) for cid, c in catalog.clauses.items()]
    for cid in sorted({cid for r in reports for cid in r["clauses"]} - set(catalog.clauses)):
        entry = next(r["clauses"][cid] for r in reports if cid in r["clauses"])
        rows.append((cid, str(entry.get("area") or "?"), str(entry.get("level") or "?"),
                     str(entry.get("text") or "(not in this sbconform's catalog)")))
    return rows


def compare(reports: list[dict[str, Any]], catalog: Catalog, only_differences: bool = False) -> str:
    """Several targets' reports side by side, one row per clause, then totals per target."""
    names = _labels(reports)
    lines = ["| clause | level | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    shown = 0
    for cid, _, level, _ in clause_rows(reports, catalog):
        cells = status_cells(reports, cid)
        if only_differences and len(set(cells)) <= 1:
            continue
        shown += 1
        lines.append(f"| {cid} | {level} | " + " | ".join(cells) + " |")
    if only_differences and not shown:
        lines.append("| (no clause differs) | | " + " | ".join("" for _ in names) + " |")
    lines += ["", "| total | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for status in STATUSES:
        lines.append(f"| {status} | " + " | ".join(str(r["summary"].get(status, 0)) for r in reports) + " |")
    lines.append("| of the skips, not selected | " + " | ".join(str(r["summary"].get("not_selected", "?")) for r in reports) + " |")
    lines.append("| finished | " + " | ".join(str(r.get("finished") or "? (did not finish)") for r in reports) + " |")
    lines.append("| sbconform | " + " | ".join(str((r.get("kit") or {}).get("sbconform", "?")) for r in reports) + " |")
    lines.append("| MUST failures | " + " | ".join(str(r["summary"].get("strict_fail", "?")) for r in reports) + " |")
    lines.append("| verdict | " + " | ".join(str(r["summary"].get("verdict") or
                                                 ("CERTIFIED" if r["summary"].get("certified") else "NOT CERTIFIED"))
                                             for r in reports) + " |")
    lines.append("")
    if only_differences:
        lines.append(f"{shown} clause(s) differ; clauses with the same status everywhere are not shown.")
    lines.append("`*` = as the target's expectations file predicts.")
    graded = sorted({(r.get("kit") or {}).get("catalog") or "unknown (an older report)" for r in reports})
    ours = catalog_version(catalog)
    lines.append(f"Graded against catalog {', '.join(graded)}" + ("." if graded == [ours] else
                 f"; the rows follow this sbconform's catalog {ours}."))
    return "\n".join(lines) + "\n"


def write_html(reports: list[dict[str, Any]], catalog: Catalog, path: Path, only_differences: bool = False) -> Path:
    from .html_report import render_html

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(reports, catalog, _labels(reports), only_differences), encoding="utf-8")
    return path
