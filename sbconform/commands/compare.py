"""sbconform compare: several targets' reports side by side."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from sbspec import load_catalog

    from ..report import compare, is_report, write_html

    reports = []
    for name in args.reports:
        path = Path(name)
        if path.is_dir():
            path = path / "report.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            print(f"sbconform compare: {path}: no such file", file=sys.stderr)
            return 2
        except (OSError, UnicodeDecodeError) as error:
            print(f"sbconform compare: {path}: cannot read it: {getattr(error, 'strerror', None) or error}", file=sys.stderr)
            return 2
        except ValueError as error:
            print(f"sbconform compare: {path}: not JSON ({error})", file=sys.stderr)
            return 2
        if not is_report(data):
            print(f"sbconform compare: {path}: not an sbconform report.json (no target, clauses and summary)",
                  file=sys.stderr)
            return 2
        reports.append(data)
    catalog = load_catalog()
    text = compare(reports, catalog, only_differences=args.only_differences)
    if args.html:
        write_html(reports, catalog, Path(args.html), only_differences=args.only_differences)
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
    p.add_argument("--out", default=None, metavar="FILE", help="write the markdown here (default: standard output)")
    p.add_argument("--only-differences", action="store_true", help="show only the clauses whose status differs")
    p.add_argument("--html", default=None, metavar="FILE", help="also write a self-contained HTML page, side by side")
    p.set_defaults(func=run)
