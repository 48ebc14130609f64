"""sbconform certify: run the kit against a target and write report.json / report.md."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..argtypes import path, seconds, whole

#: test processes side by side (each a Python with the kit, the SDK, its own target)
MAX_JOBS = 128


def _secondary_problem(args: argparse.Namespace) -> str | None:
    """The sdk target's ``secondary=`` namespace (paired scenarios) checked as the primary is
    (targets/preflight.py): wrong, every paired scenario failed, and the run said FAILED, exit 1."""
    from ..secrets import mask
    from ..targets.preflight import PreflightError, check_connection_string

    options = dict(o.partition("=")[::2] for o in args.option if "=" in o)
    if args.target != "sdk" or not options.get("secondary"):
        return None
    try:
        check_connection_string(options["secondary"], options.get("control", "auto"))
    except PreflightError as error:
        return f"--option secondary: {mask(str(error))}"
    return None


def _twice(options: list[str]) -> str | None:
    """An option given twice with two values: which one was meant? (The last won, silently.)"""
    from ..secrets import mask

    seen: dict[str, str] = {}
    for option in options:
        key, _, value = option.partition("=")
        key, value = key.strip(), value.strip()
        if key in seen and seen[key] != value:
            return mask(f"--option {key} given twice ({seen[key]!r}, {value!r}): give it once")
        seen[key] = value
    return None


def run(args: argparse.Namespace) -> int:
    from ..certify import certify

    problem = _twice(args.option) or _secondary_problem(args)
    if problem:
        print(f"sbconform certify: {problem}", file=sys.stderr)
        return 2
    return certify(
        args.target,
        Path(args.report_dir or f"reports/{args.target}"),
        options=args.option,
        connection_string=args.connection_string,
        expectations=Path(args.expectations) if args.expectations else None,
        hypothesis_profile=args.hypothesis_profile,
        pytest_args=args.pytest_args,
        clauses=args.clause,
        trace_dir=Path(args.trace) if args.trace else None,
        jobs=args.jobs,
        shard_timeout=args.shard_timeout,
        junit_xml=Path(args.junit_xml) if args.junit_xml else None,
        html=Path(args.html) if args.html else None,
    )


def register(sub: argparse._SubParsersAction) -> None:
    from ..secrets import ENV

    p = sub.add_parser("certify", help="run the kit against a target and write report.json / report.md",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       description="Exit 0: no MUST clause fails; 1: a MUST clause fails; 2: the run could not be made "
                                   "or gave no verdict (bad input, an out-of-date expectations file, target unreachable or "
                                   "refusing the key, every clause skipped: nothing graded); 130: interrupted.")
    p.add_argument("--target", default="reference", help="target name (see `sbconform targets`)")
    p.add_argument("--report-dir", type=path, default=None, metavar="DIR",
                   help="where to write report.json, report.md and run.log (default: reports/TARGET)")
    p.add_argument("--connection-string", default=None,
                   help=f"the namespace, for targets that need one; better set ${ENV} (a command line is visible to "
                        f"every user of the machine); default: ${ENV}")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a target option (repeatable)")
    p.add_argument("--expectations", type=path, default=None, metavar="FILE",
                   help="TOML file of clauses expected to fail or skip on this target")
    p.add_argument("--hypothesis-profile", default="ci", choices=("dev", "ci", "thorough"),
                   help="Hypothesis profile for the stateful tests (dev: 30 examples, ci: 200, thorough: 2000)")
    p.add_argument("--clause", action="append", default=[], metavar="PATTERN",
                   help="certify only these clauses: an id, a glob (PART-KEY-*) or an area (repeatable); "
                        "the others are reported as skipped, not selected, and the verdict covers only these")
    p.add_argument("--trace", type=path, default=None, metavar="DIR",
                   help="record every test's trace in DIR (one JSON Lines file per test; sbspec/trace-format.md)")
    p.add_argument("--jobs", type=whole(1, MAX_JOBS, " (each is a test process, side by side)"),
                   default=min(MAX_JOBS, os.cpu_count() or 1), metavar="N",
                   help="run the tests in N processes side by side (real-time targets wait in parallel); "
                        "default: the number of cores; at most 128")
    p.add_argument("--shard-timeout", type=seconds(), default=None, metavar="SECONDS",
                   help="stop a test process still running after this long; "
                        "the test it had begun fails (timed out), those it never reached are not run")
    p.add_argument("--junit-xml", type=path, default=None, metavar="FILE", help="also write JUnit XML, one test case per clause")
    p.add_argument("--html", type=path, default=None, metavar="FILE", help="also write a self-contained HTML report")
    p.add_argument("pytest_args", nargs="*", metavar="TEST-ARGS", help="advanced: test selection arguments passed to the test runner, after --")
    p.set_defaults(func=run)
