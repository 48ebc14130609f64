"""A self-contained HTML report: one row per clause, one column per target, filters by
status, area and level, each cell opening the scenarios that graded it with their reasons.
The filters can be set from the address: ``report.html#status=fail&level=MUST,SHOULD``.

No external resources (no CDN, no fonts): the page works from a file, offline, in CI artefacts.
"""

from __future__ import annotations

import html
import json
import re
from functools import lru_cache
from typing import Any

from sbspec import Catalog

_CSS = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left}
th{background:#f3f3f3;position:sticky;top:0}
.pass{background:#dff5df}.fail{background:#f9d6d6}.fail.nonstrict{background:#fdebd0}.skip{background:#eee}
.uncovered{background:#fff7c2}.expected{background:#e8e0f5}
details summary{cursor:pointer}pre.steps{background:#fafafa;border-left:3px solid #ccc;margin:2px 0;padding:2px 6px}.filters label{margin-right:1em}.muted{color:#777}.why{font-size:12px}
"""

_JS = """
function applyFilters(){
  const sel = id => Array.from(document.querySelectorAll('#'+id+' input:checked')).map(i => i.value);
  const st = sel('f-status'), ar = sel('f-area'), lv = sel('f-level');
  let shown = 0;
  document.querySelectorAll('tr.clause').forEach(row => {
    const statuses = row.dataset.statuses.split(' ');
    const ok = statuses.some(s => st.includes(s)) && ar.includes(row.dataset.area) && lv.includes(row.dataset.level);
    row.style.display = ok ? '' : 'none'; if (ok) shown++;
  });
  document.getElementById('shown').textContent = shown;
}
function filtersFromHash(){
  // file:///report.html#status=fail,skip&level=MUST: a link to a filtered view
  const wanted = new URLSearchParams(location.hash.slice(1));
  for (const [name, values] of wanted) {
    const keep = values.split(',');
    document.querySelectorAll('#f-'+name+' input').forEach(i => { i.checked = keep.includes(i.value); });
  }
}
document.addEventListener('change', applyFilters);
document.addEventListener('DOMContentLoaded', () => { filtersFromHash(); applyFilters(); });
"""


def _checkboxes(ident: str, title: str, values: list[str]) -> str:
    boxes = "".join(f'<label><input type="checkbox" value="{html.escape(v)}" checked> {html.escape(v.replace("-", " "))}</label>'
                    for v in values)
    return f'<div id="{ident}" class="filters"><b>{title}:</b> {boxes}</div>'


_WHERE = re.compile(r"\((features/[^():]+\.feature):(\d+)\)$")


@lru_cache(maxsize=None)
def _feature_lines(relative: str) -> tuple[str, ...]:
    from .coverage import kit_root

    try:
        return tuple((kit_root() / relative).read_text(encoding="utf-8").splitlines())
    except OSError:
        return ()


def scenario_steps(name: str) -> tuple[str, str] | None:
    """(the feature file's path, the scenario's lines as written) for a scenario named as the
    plugin names it ("Feature: Scenario (features/x.feature:23)"), else None."""
    found = _WHERE.search(name)
    if found is None:
        return None
    lines = _feature_lines(found[1])
    start = int(found[2]) - 1
    if not 0 <= start < len(lines):
        return None
    block = [lines[start].strip()]
    for line in lines[start + 1:]:
        text = line.strip()
        if not text or text.startswith(("@", "Scenario", "Rule:", "Feature:")):
            break
        block.append("  " + text)
    return found[1], "\n".join(block)


def _scenario(sc: dict[str, Any]) -> str:
    """One scenario of a cell: its outcome and reason, and its steps as the feature file has them."""
    head = f"<code>{html.escape(sc['id'])}</code>: {html.escape(sc['outcome'])}" + (
        f" — {html.escape(sc['reason'])}" if sc.get("reason") else "")
    steps = scenario_steps(sc.get("name", ""))
    if steps is None:
        return f"<li>{head}</li>"
    where, text = steps
    from .coverage import kit_root

    link = (kit_root() / where).resolve().as_uri()
    return (f'<li>{head}<details class="scenario"><summary>steps (<a href="{html.escape(link)}">{html.escape(where)}</a>)'
            f'</summary><pre class="steps">{html.escape(text)}</pre></details></li>')


def _cell(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return '<td class="muted">—</td>'
    status = entry["status"]
    classes = [status]
    if entry.get("expected"):
        classes.append("expected")
    if entry.get("grade") in ("non-strict", "informational"):
        classes.append("nonstrict")
    label = ("not selected" if entry.get("selected") is False else status) + (" (expected)" if entry.get("expected") else " (unexpected: update the expectations)"
                      if entry.get("unexpected_pass") else f" ({entry['grade']})" if entry.get("grade") else "")
    if status == "pass" and entry.get("subject") == "client" and entry.get("reason"):
        label += " (the kit's client)"  # report.CLIENT_PASS: the target supports it, does not implement it
    scenarios = "".join(_scenario(sc) for sc in entry.get("scenarios", []))
    from .report import expected_note

    reason = html.escape("; ".join(filter(None, (expected_note(entry), entry.get("reason")))))
    body = (f"<details><summary>{html.escape(label)}</summary><p>{reason}</p><ul>{scenarios}</ul></details>"
            if scenarios or reason else html.escape(label))
    why = entry.get("reason") or ""  # a failure's why in one line, seen without opening the cell
    first = (f'<div class="why">{html.escape(why if len(why) <= 160 else why[:157] + "...")}</div>'
             if status == "fail" and why else "")
    return f'<td class="{" ".join(classes)}" data-status="{status}">{first}{body}</td>'


def _statement(clause: Any, catalog: Catalog) -> str:
    """The kit's statement, then what the documentation says and where (the catalog's sources)."""
    from .report import cite, sources_of

    quotes = "".join(f"<blockquote>{html.escape(s['quote'])} <cite>{html.escape(cite(s))}</cite></blockquote>"
                     for s in sources_of(clause, catalog))
    return html.escape(clause.text) + (f"<details><summary>source</summary>{quotes}</details>" if quotes else "")


def render_html(reports: list[dict[str, Any]], catalog: Catalog, labels: list[str], only_differences: bool = False) -> str:
    from .report import clause_rows, provenance, skips, status_cells, target_lines

    shown = clause_rows(reports, catalog)
    areas = list(dict.fromkeys([*catalog.areas, *(area for _, area, _, _ in shown)]))
    levels = list(dict.fromkeys(["MUST", "SHOULD", "MAY", "INFO", *(level for _, _, level, _ in shown)]))
    head = "".join(f"<th>{html.escape(label)}</th>" for label in labels)
    rows = []
    for cid, area, level, text in shown:
        if only_differences and len(set(status_cells(reports, cid))) <= 1:
            continue  # the same status everywhere (compare --only-differences)
        entries = [r["clauses"].get(cid) for r in reports]
        statuses = " ".join(sorted({"not-selected" if e.get("selected") is False else e["status"]
                                    for e in entries if e is not None} or {"uncovered"}))
        rows.append(
            f'<tr class="clause" id="{html.escape(cid)}" data-area="{html.escape(area)}" '
            f'data-level="{html.escape(level)}" data-statuses="{statuses}">'
            f"<td><a href=\"#{html.escape(cid)}\">{html.escape(cid)}</a></td><td>{html.escape(area)}</td>"
            f"<td>{html.escape(level)}</td><td>{_statement(catalog.clauses[cid], catalog) if cid in catalog.clauses else html.escape(text)}</td>"
            + "".join(_cell(e) for e in entries) + "</tr>")
    summaries = "".join(
        f"<li><b>{html.escape(label)}</b>: {html.escape(str(r['summary'].get('verdict', '')))} — "
        + f"{r['summary'].get('pass', 0)} pass, {r['summary'].get('fail', 0)} fail, "
        + (skips(r['summary']) if 'skip' in r['summary'] else '0 skip') + f", {r['summary'].get('uncovered', 0)} uncovered"
        + (f" ({r['summary']['client_pass']} of the passes the kit's own client over the target)"
           if r['summary'].get('client_pass') else "")
        + f"; failures: {r['summary'].get('strict_fail', 0)} MUST, {r['summary'].get('non_strict_fail', 0)} SHOULD/MAY, "
        f"{r['summary'].get('informational_fail', 0)} INFO<br><small>{'<br>'.join(html.escape(t) for t in [provenance(r), *target_lines(r['target'])])}</small></li>"
        for label, r in zip(labels, reports))
    data = html.escape(json.dumps([r["summary"] for r in reports]))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>sbconform report: {html.escape(', '.join(labels))}</title>
<style>{_CSS}</style><script>{_JS}</script></head>
<body data-summaries="{data}">
<h1>sbconform report: {html.escape(', '.join(labels))}</h1>
<ul>{summaries}</ul>
{_checkboxes("f-status", "status", ["pass", "fail", "skip", "not-selected", "uncovered"])}
{_checkboxes("f-area", "area", areas)}
{_checkboxes("f-level", "level", levels)}
<p><span id="shown">{len(rows)}</span> of {len(rows)} clauses shown.</p>
<table><thead><tr><th>clause</th><th>area</th><th>level</th><th>statement</th>{head}</tr></thead>
<tbody>{''.join(rows)}</tbody></table>
</body></html>
"""
