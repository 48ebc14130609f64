"""sbconform replay: check traces against the reference model, on Spark (or --local in this process)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from .cost import positive


def print_summary(summary: dict, out: str | None) -> None:
    print(f"{summary['events']} events in {summary['pieces']} pieces ({summary['layout']} layout, {summary['files']} files): "
          f"{summary['valid']} valid, {summary['violations']} with a violation, {summary['unknown']} unknown, "
          f"{summary['errors']} unreadable; {summary['seconds']} s, {summary['events_per_s']} events/s"
          + (f"; {summary['reader']}" if summary.get("reader") else ""))
    for p in summary.get("problems", [])[:50]:
        if p["status"] == "violation":
            print(f"  VIOLATION {p['clause']} {p['kind']} at pos {p['pos']} entity {p['entity']} message {p['message_id']} "
                  f"seq {p['seq']}: expected {p['expected']}; observed {p['observed']}")
        else:
            print(f"  {p['status'].upper()} {p['piece'] or ''}: {p['reason']}")
    for note in summary.get("notes", []):
        print(f"  note: {note}")
    if out:
        print(f"results: {out}")


def run(args: argparse.Namespace) -> int:
    from ..trace.replay import exit_code, replay_spark, run_local
    from ..trace.schema import TraceFormatError

    try:
        if args.local:
            summary = run_local(args.paths, args.search_bound, args.out)
        else:
            out = args.out or "replay-out"
            summary = replay_spark(args.paths, out, args.master, args.search_bound, layout=args.layout, reader=args.reader)
    except (TraceFormatError, FileNotFoundError) as error:
        print(f"sbconform replay: {error}", file=sys.stderr)
        return 2
    print_summary(summary, args.out or (None if args.local else "replay-out"))
    return exit_code(summary)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="check traces against the reference model on Spark; exit 0 valid, 1 violations, 2 undecided")
    p.add_argument("paths", nargs="+", metavar="PATH", help="trace files or directories (local or any Hadoop-compatible URI)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*]; under spark-submit use scripts/spark_replay_job.py)")
    p.add_argument("--out", metavar="DIR", help="results: pieces/ (one row per piece), violations/, summary.json (default replay-out)")
    p.add_argument("--local", action="store_true", help="check in this process, without Spark")
    p.add_argument("--layout", choices=("by-piece", "time"), help="override the detected layout (remote inputs)")
    p.add_argument("--reader", choices=("arrow", "spark"), default="arrow",
                   help="by-piece layouts: tasks read their bucket files with pyarrow (arrow, default: local paths and "
                        "URIs pyarrow opens) or through Spark's Parquet reader (spark: any Hadoop-compatible path)")
    p.add_argument("--search-bound", type=positive, default=2000, metavar="N",
                   help="model steps tried per window of overlapping operations before answering unknown (default 2000)")
    p.set_defaults(func=run)
