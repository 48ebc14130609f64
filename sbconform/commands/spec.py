"""sbconform spec: check clause coverage, or list clauses."""

from __future__ import annotations

import argparse
import sys


def run(args: argparse.Namespace) -> int:
    from sbspec import CatalogError, load_catalog

    from ..coverage import check

    if args.area is not None and args.action == "check":  # it checked every area, the option dropped unsaid
        print(f"sbconform spec: --area {args.area!r}: only `sbconform spec list` takes --area; "
              "`spec check` checks every area", file=sys.stderr)
        return 2
    try:
        catalog = load_catalog()
    except CatalogError as error:
        print(error, file=sys.stderr)
        return 1
    if args.action == "list":
        if args.area and args.area not in catalog.areas:
            print(f"sbconform spec: --area {args.area!r}: no such area; known areas: {', '.join(sorted(catalog.areas))}",
                  file=sys.stderr)
            return 2
        for clause in catalog.clauses.values():
            if args.area and clause.area != args.area:
                continue
            print(f"{clause.id:<18} {clause.level:<6} {clause.text}")
        return 0
    coverage = check(catalog=catalog)
    print(coverage.summary())
    return 1 if coverage.failures() else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("spec", help="the clause catalog: check coverage, or list clauses")
    p.add_argument("action", choices=["check", "list"], nargs="?", default="check",
                   help="check: coverage per area, exit 1 on unknown clauses or untagged scenarios; list: the clauses")
    p.add_argument("--area", default=None, help="list: only this area's clauses (spec list only)")
    p.set_defaults(func=run)
