"""sbconform compare: several targets' reports side by side."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from spec import load_catalog

    from ..report import compare

    reports = [json.loads(Path(p).read_text(encoding="utf-8")) for p in args.reports]
    text = compare(reports, load_catalog())
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="several targets' report.json side by side (markdown)")
    p.add_argument("reports", nargs="+")
    p.add_argument("--out", default=None)
    p.set_defaults(func=run)
