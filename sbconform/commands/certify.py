"""sbconform certify: run the kit against a target and write report.json / report.md."""

from __future__ import annotations

import argparse
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from ..certify import certify

    return certify(
        args.target,
        Path(args.report_dir),
        options=args.option,
        connection_string=args.connection_string,
        expectations=Path(args.expectations) if args.expectations else None,
        hypothesis_profile=args.hypothesis_profile,
        pytest_args=args.pytest_args,
        clauses=args.clause,
        trace_dir=Path(args.trace) if args.trace else None,
        jobs=args.jobs,
        shard_timeout=args.shard_timeout,
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("certify", help="run the kit against a target and write report.json / report.md")
    p.add_argument("--target", default="reference", help="target name (see `sbconform targets`)")
    p.add_argument("--report-dir", required=True, help="where to write report.json and report.md")
    p.add_argument("--connection-string", default=None)
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a target option (repeatable)")
    p.add_argument("--expectations", default=None, help="TOML file of clauses expected to fail or skip on this target")
    p.add_argument("--hypothesis-profile", default="ci", help="Hypothesis profile for the stateful tests (ci: 200 examples)")
    p.add_argument("--clause", action="append", default=[], metavar="PATTERN",
                   help="certify only these clauses: an id, a glob (PART-KEY-*) or an area (repeatable); "
                        "the others are reported as skipped, not selected")
    p.add_argument("--trace", default=None, metavar="DIR",
                   help="record every test's trace in DIR (one JSON Lines file per test; spec/trace-format.md)")
    p.add_argument("--jobs", type=int, default=1,
                   help="run the tests in this many pytest processes side by side (real-time targets wait in parallel)")
    p.add_argument("--shard-timeout", type=float, default=None, metavar="SECONDS",
                   help="with --jobs: stop a test process still running after this long; "
                        "its unfinished tests are reported as failed (timed out)")
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    p.set_defaults(func=run)
