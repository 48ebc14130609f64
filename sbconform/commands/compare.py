"""sbconform compare: several targets' reports side by side."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..argtypes import path
from ..certify_outputs import printable
from ..report import STATUSES

#: a full certification's report.json is well under 1 MB; past this it is not one (and is not read)
MAX_REPORT_BYTES = 64 * 1024 * 1024


#: the summary's counts that compare and the HTML page show (numbers, never text)
_COUNTS = STATUSES + ("strict_fail", "non_strict_fail", "informational_fail", "client_pass")


def report_problem(data: Any) -> str | None:
    """What in a report.json compare and the HTML page could not show (where, and what is
    there), else None: every value they read has the type and, for a status, a value they know."""
    def got(value: Any) -> str:
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."

    if not (isinstance(data, dict) and all(isinstance(data.get(k), dict) for k in ("target", "clauses", "summary"))):
        return "no target, clauses and summary"
    for key in ("name", "image"):
        if data["target"].get(key) is not None and not isinstance(data["target"][key], str):
            return f"target.{key} must be text, got {got(data['target'][key])}"
    for key in ("kit", "run"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            return f"{key} must be an object, got {got(data[key])}"
    if (data.get("kit") or {}).get("catalog") is not None and not isinstance(data["kit"]["catalog"], str):
        return f"kit.catalog must be text, got {got(data['kit']['catalog'])}"
    for key in _COUNTS:
        value = data["summary"].get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return f"summary.{key} must be a whole number, got {got(value)}"
    if data["summary"].get("verdict") is not None and not isinstance(data["summary"]["verdict"], str):
        return f"summary.verdict must be text, got {got(data['summary']['verdict'])}"
    for cid, entry in data["clauses"].items():
        if not isinstance(entry, dict):
            return f"clauses.{cid} must be an object with a status, got {got(entry)}"
        if entry.get("status") not in STATUSES:
            return f"clauses.{cid}.status must be one of {', '.join(STATUSES)}, got {got(entry.get('status'))}"
        if entry.get("expectation") is not None and not isinstance(entry["expectation"], dict):
            return f"clauses.{cid}.expectation must be an object, got {got(entry['expectation'])}"
        for key in ("reason", "grade", "subject"):
            if entry.get(key) is not None and not isinstance(entry[key], str):
                return f"clauses.{cid}.{key} must be text, got {got(entry[key])}"
        scenarios = entry.get("scenarios", [])
        if not isinstance(scenarios, list):
            return f"clauses.{cid}.scenarios must be a list, got {got(scenarios)}"
        for n, sc in enumerate(scenarios):
            if not (isinstance(sc, dict) and isinstance(sc.get("id"), str) and isinstance(sc.get("outcome"), str)
                    and all(sc.get(k) is None or isinstance(sc[k], str) for k in ("reason", "name"))):
                return f"clauses.{cid}.scenarios[{n}] must be an object with text id, outcome, name and reason, got {got(sc)}"
    return None


def run(args: argparse.Namespace) -> int:
    from sbspec import load_catalog

    from ..report import compare, write_html

    if args.html and args.out and Path(args.html).resolve() == Path(args.out).resolve():
        print(f"sbconform compare: --out {args.out} and --html {args.html} name the same file: one would overwrite "
              f"the other", file=sys.stderr)
        return 2
    read: list[tuple[dict, Path]] = []  # each report and where it came from
    for name in args.reports:
        path = Path(name)
        if path.is_dir():
            path = path / "report.json"
        again = next((p for _, p in read if path.is_file() and p.is_file() and p.resolve() == path.resolve()), None)
        if again is not None:  # two identical columns, "#1" and "#2", read as two runs that agree
            print(f"sbconform compare: note: {path} is given twice (as {again}): its two columns are one run",
                  file=sys.stderr)
        for flag, out in (("--out", args.out), ("--html", args.html)):
            if out and Path(out).resolve() == path.resolve():
                print(f"sbconform compare: {flag} {out}: is an input report; writing it would replace the report",
                      file=sys.stderr)
                return 2
        try:
            with path.open("rb") as f:  # read to the bound: a pipe or /dev/zero has no size to stat
                raw = f.read(MAX_REPORT_BYTES + 1)
            if len(raw) > MAX_REPORT_BYTES:
                print(f"sbconform compare: {path}: too large for a report.json (more than {MAX_REPORT_BYTES:,} bytes)",
                      file=sys.stderr)
                return 2
            data = json.loads(raw.decode("utf-8"))
        except FileNotFoundError:
            print(f"sbconform compare: {path}: no such file", file=sys.stderr)
            return 2
        except (OSError, UnicodeDecodeError) as error:
            print(f"sbconform compare: {path}: cannot read it: {getattr(error, 'strerror', None) or error}", file=sys.stderr)
            return 2
        except ValueError as error:
            print(f"sbconform compare: {path}: not JSON ({error})", file=sys.stderr)
            return 2
        except RecursionError:
            print(f"sbconform compare: {path}: JSON nested too deeply for a report.json", file=sys.stderr)
            return 2
        data = printable(data)  # "\ud800" in JSON: text no file or terminal can be written in
        problem = report_problem(data)
        if problem:
            print(f"sbconform compare: {path}: not an sbconform report.json ({problem})", file=sys.stderr)
            return 2
        catalogs = {(r.get("kit") or {}).get("catalog") for r, _ in read} - {None}
        mine = (data.get("kit") or {}).get("catalog")
        if mine is not None and catalogs and mine not in catalogs:
            first = next(p for r, p in read if (r.get("kit") or {}).get("catalog") is not None)
            print(f"sbconform compare: {path}: graded against catalog {mine}, {first} against catalog {next(iter(catalogs))}: "
                  f"their clauses differ; compare reports of one catalog", file=sys.stderr)
            return 2
        read.append((data, path))
    reports = [r for r, _ in read]
    catalog = load_catalog()
    text = compare(reports, catalog, only_differences=args.only_differences)
    if args.html:
        try:
            write_html(reports, catalog, Path(args.html), only_differences=args.only_differences)
        except OSError as error:
            said = (f"cannot make its directory: {error.filename} is a file" if isinstance(error, FileExistsError)
                    else error.strerror or str(error))
            print(f"sbconform compare: --html {args.html}: {said}", file=sys.stderr)
            return 2
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as error:
            print(f"sbconform compare: --out {args.out}: {error.strerror}", file=sys.stderr)
            return 2
    else:
        sys.stdout.write(text)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="several targets' report.json side by side (markdown), with totals")
    p.add_argument("reports", nargs="+", metavar="REPORT", help="report.json files (or report directories)")
    p.add_argument("--out", type=path, default=None, metavar="FILE", help="write the markdown here (default: standard output)")
    p.add_argument("--only-differences", action="store_true", help="show only the clauses whose status differs")
    p.add_argument("--html", type=path, default=None, metavar="FILE", help="also write a self-contained HTML page, side by side")
    p.set_defaults(func=run)
