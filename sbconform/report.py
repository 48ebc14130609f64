"""Per-clause reports: what was run against a target, and what it says about each clause.

``build_report`` folds the per-test results the pytest plugin wrote (``--sb-report-json``)
into one graded outcome per clause:

- ``fail``: a test of the clause failed on this target (or passed where the target's
  expectations file said it would fail: an unexpected pass is an error too);
- ``pass``: at least one test of the clause ran and passed, and none failed;
- ``skip``: every test of the clause was skipped (the reasons say why, usually a
  capability the target lacks), or only model-level tests cover it and the target is
  not the model;
- ``uncovered``: no scenario or test names the clause yet.

Expectations (web-platform-tests style) live outside the tests, in a TOML file per
target: ``[clauses."SETTLE-LOCK-009"] status = "fail" reason = "..."``. A clause that
fails as expected is reported as ``fail`` with ``expected = true`` and does not make
certification fail.
"""

from __future__ import annotations

import fnmatch
import json
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

from spec import Catalog

STATUSES = ("pass", "fail", "skip", "uncovered")


def selects(pattern: str, clause: Any) -> bool:
    """Does a clause selection pattern (an id, a glob, an area name) take this clause?"""
    return pattern == clause.area or fnmatch.fnmatchcase(clause.id, pattern.upper())


def load_expectations(path: Path | str | None) -> dict[str, dict[str, str]]:
    if path is None:
        return {}
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"{path}: cannot read expectations: {error}") from error
    out = {}
    for cid, entry in data.get("clauses", {}).items():
        status = entry.get("status")
        if status not in ("fail", "skip"):
            raise ValueError(f"{path}: clause {cid}: expected status must be 'fail' or 'skip', got {status!r}")
        out[cid] = {"status": status, "reason": entry.get("reason", "")}
    return out


def build_report(
    raw: dict[str, Any],
    catalog: Catalog,
    expectations: dict[str, dict[str, str]] | None = None,
    covered: set[str] | None = None,
) -> dict[str, Any]:
    """``covered``: the clauses some scenario or test of the kit names (``coverage.check``).
    A clause in it that no test of this run named was not run (the run was narrowed with
    pytest arguments): ``skip``, saying so, not ``uncovered``."""
    expectations = expectations or {}
    target = raw.get("target", {})
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
            clauses[cid] = {"area": clause.area, "level": clause.level, "text": clause.text, "scenarios": [],
                            "status": "skip", "reason": f"not selected (--clause {' '.join(selection)})"}
            continue
        relevant = [t for t in tests if t.get("uses_target") or is_model]
        entry: dict[str, Any] = {
            "area": clause.area,
            "level": clause.level,
            "text": clause.text,
            "scenarios": [
                {"name": t["name"], "id": t["nodeid"], "kind": t["kind"], "outcome": t["outcome"], "reason": t.get("reason", "")}
                for t in tests
            ],
        }
        failed = [t for t in relevant if t["outcome"] in ("fail", "xpass")]
        passed = [t for t in relevant if t["outcome"] == "pass"]
        if not tests and covered is not None and cid in covered:
            entry["status"], entry["reason"] = "skip", "not run: none of its tests was among the tests this run was narrowed to"
        elif not tests:
            entry["status"], entry["reason"] = "uncovered", "no scenario or test names this clause"
        elif failed:
            entry["status"] = "fail"
            entry["reason"] = "; ".join(f"{t['name']}: {t.get('reason') or 'failed'}" for t in failed)
        elif passed:
            entry["status"], entry["reason"] = "pass", ""
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
            elif entry["status"] == "pass":
                entry["status"] = "fail"
                entry["expected"] = False
                entry["reason"] = (
                    f"unexpected pass: the expectations say {expected['status']} ({expected['reason']}); "
                    "update the expectations file"
                )
        clauses[cid] = entry

    summary: dict[str, Any] = {"total": len(clauses), **{s: 0 for s in STATUSES}, "expected_fail": 0, "by_area": {}}
    for entry in clauses.values():
        summary[entry["status"]] += 1
        if entry["status"] == "fail" and entry.get("expected"):
            summary["expected_fail"] += 1
        area = summary["by_area"].setdefault(entry["area"], Counter())
        area[entry["status"]] += 1
    summary["by_area"] = {k: dict(v) for k, v in summary["by_area"].items()}
    summary["unexpected_fail"] = summary["fail"] - summary["expected_fail"]
    summary["certified"] = summary["unexpected_fail"] == 0
    return {
        "target": target,
        "finished": raw.get("finished"),
        "pytest_exit_status": raw.get("exitstatus"),
        "selection": selection,
        "clauses": clauses,
        "summary": summary,
    }


def render_markdown(report: dict[str, Any], catalog: Catalog) -> str:
    s = report["summary"]
    target = report["target"]
    lines = [
        f"# sbconform report: {target.get('name', '?')}",
        "",
        f"Finished {report.get('finished') or '?'}. "
        f"**{'CERTIFIED' if s['certified'] else 'NOT CERTIFIED'}**: "
        f"{s['pass']} pass, {s['fail']} fail ({s['expected_fail']} expected), {s['skip']} skip, "
        f"{s['uncovered']} uncovered, of {s['total']} clauses.",
        "",
        f"Capabilities: {', '.join(target.get('capabilities', [])) or 'none declared'}.",
        "",
        *([f"Only these clauses were selected: `{' '.join(report['selection'])}`; the others are skipped.", ""]
          if report.get("selection") else []),
        "| area | pass | fail | skip | uncovered |",
        "|---|---:|---:|---:|---:|",
    ]
    for area, counts in s["by_area"].items():
        lines.append(f"| {area} | {counts.get('pass', 0)} | {counts.get('fail', 0)} | {counts.get('skip', 0)} | {counts.get('uncovered', 0)} |")
    for area, info in catalog.areas.items():
        entries = [(cid, e) for cid, e in report["clauses"].items() if e["area"] == area]
        if not entries:
            continue
        lines += ["", f"## {info.get('title', area)}", "", "| clause | level | status | reason |", "|---|---|---|---|"]
        for cid, e in entries:
            status = e["status"] + (" (expected)" if e.get("expected") and e["status"] == "fail" else "")
            reason = (e.get("reason") or "").replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {cid} | {e['level']} | {status} | {reason[:300]} |")
    failing = [(cid, e) for cid, e in report["clauses"].items() if e["status"] == "fail"]
    if failing:
        lines += ["", "## Failures in detail", ""]
        for cid, e in failing:
            lines.append(f"### {cid}: {e['text']}")
            for sc in e["scenarios"]:
                if sc["outcome"] in ("fail", "xpass"):
                    lines.append(f"- `{sc['id']}`: {sc['reason']}")
            lines.append("")
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], catalog: Catalog, report_dir: Path) -> tuple[Path, Path]:
    report_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = report_dir / "report.json", report_dir / "report.md"
    json_path.write_text(json.dumps(report, indent=2, sort_keys=False), encoding="utf-8")
    md_path.write_text(render_markdown(report, catalog), encoding="utf-8")
    return json_path, md_path


def compare(reports: list[dict[str, Any]], catalog: Catalog) -> str:
    """Several targets' reports side by side, one row per clause."""
    names = [r["target"].get("name", f"target{i}") for i, r in enumerate(reports)]
    lines = ["| clause | level | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for cid, clause in catalog.clauses.items():
        cells = []
        for r in reports:
            e = r["clauses"].get(cid)
            cells.append("—" if e is None else e["status"] + ("*" if e.get("expected") else ""))
        lines.append(f"| {cid} | {clause.level} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("`*` = as the target's expectations file predicts.")
    return "\n".join(lines) + "\n"
