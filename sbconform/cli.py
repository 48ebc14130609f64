"""The ``sbconform`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _certify(args: argparse.Namespace) -> int:
    from .certify import certify

    return certify(
        args.target,
        Path(args.report_dir),
        options=args.option,
        connection_string=args.connection_string,
        expectations=Path(args.expectations) if args.expectations else None,
        hypothesis_profile=args.hypothesis_profile,
        pytest_args=args.pytest_args,
    )


def _spec(args: argparse.Namespace) -> int:
    from spec import CatalogError, load_catalog

    from .coverage import check

    try:
        catalog = load_catalog()
    except CatalogError as error:
        print(error, file=sys.stderr)
        return 1
    if args.action == "list":
        for clause in catalog.clauses.values():
            if args.area and clause.area != args.area:
                continue
            print(f"{clause.id:<18} {clause.level:<6} {clause.text}")
        return 0
    coverage = check(catalog=catalog)
    print(coverage.summary())
    return 1 if coverage.failures() else 0


def _compare(args: argparse.Namespace) -> int:
    from spec import load_catalog

    from .report import compare

    reports = [json.loads(Path(p).read_text(encoding="utf-8")) for p in args.reports]
    text = compare(reports, load_catalog())
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def _targets(args: argparse.Namespace) -> int:
    from .targets import make_target, names

    for name in names():
        if name.startswith("mutant-"):
            continue
        try:
            caps = ", ".join(sorted(make_target(name).capabilities))
        except Exception as error:  # a target that needs options still gets listed
            caps = f"(needs options: {error})"
        print(f"{name}: {caps}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sbconform", description="Azure Service Bus conformance kit")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("certify", help="run the kit against a target and write report.json / report.md")
    p.add_argument("--target", default="reference", help="target name (see `sbconform targets`)")
    p.add_argument("--report-dir", required=True, help="where to write report.json and report.md")
    p.add_argument("--connection-string", default=None)
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a target option (repeatable)")
    p.add_argument("--expectations", default=None, help="TOML file of clauses expected to fail or skip on this target")
    p.add_argument("--hypothesis-profile", default="ci", help="Hypothesis profile for the stateful tests (ci: 200 examples)")
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    p.set_defaults(func=_certify)

    p = sub.add_parser("spec", help="the clause catalog: check coverage, or list clauses")
    p.add_argument("action", choices=["check", "list"], nargs="?", default="check")
    p.add_argument("--area", default=None)
    p.set_defaults(func=_spec)

    p = sub.add_parser("compare", help="several targets' report.json side by side (markdown)")
    p.add_argument("reports", nargs="+")
    p.add_argument("--out", default=None)
    p.set_defaults(func=_compare)

    p = sub.add_parser("targets", help="list the targets and their capabilities")
    p.set_defaults(func=_targets)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
