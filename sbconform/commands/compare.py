"""sbconform compare: several targets' reports side by side."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: a full certification's report.json is well under 1 MB; past this it is not one (and is not read)
MAX_REPORT_BYTES = 64 * 1024 * 1024


def run(args: argparse.Namespace) -> int:
    from sbspec import load_catalog

    from ..report import compare, report_problem, write_html

    if args.html and args.out and Path(args.html).resolve() == Path(args.out).resolve():
        print(f"sbconform compare: --out {args.out} and --html {args.html} name the same file: one would overwrite "
              f"the other", file=sys.stderr)
        return 2
    reports = []
    for name in args.reports:
        path = Path(name)
        if path.is_dir():
            path = path / "report.json"
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
        problem = report_problem(data)
        if problem:
            print(f"sbconform compare: {path}: not an sbconform report.json ({problem})", file=sys.stderr)
            return 2
        reports.append(data)
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
    p.add_argument("--out", default=None, metavar="FILE", help="write the markdown here (default: standard output)")
    p.add_argument("--only-differences", action="store_true", help="show only the clauses whose status differs")
    p.add_argument("--html", default=None, metavar="FILE", help="also write a self-contained HTML page, side by side")
    p.set_defaults(func=run)
