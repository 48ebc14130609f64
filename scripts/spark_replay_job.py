"""spark-submit entry point: replay sbconform traces through the reference model.

    python -m pip wheel --no-deps -w dist .          # dist/sbconform-0.1.0-py3-none-any.whl
    spark-submit --master yarn --deploy-mode client \
        --py-files dist/sbconform-0.1.0-py3-none-any.whl \
        scripts/spark_replay_job.py hdfs:///traces/run-42 --out hdfs:///replays/run-42

The master comes from spark-submit (this script sets none). Executors need pyarrow and
pandas (what PySpark's mapInArrow needs); the wheel brings sbconform and the reference
model, which need nothing else. Exit code: 0 valid, 1 violations, 2 could not decide.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from sbconform.commands.replay import print_summary
    from sbconform.trace.replay import exit_code, replay_spark
    from sbconform.trace.schema import TraceFormatError

    ap = argparse.ArgumentParser(prog="spark_replay_job.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="trace files or directories, local or any Hadoop-compatible URI")
    ap.add_argument("--out", required=True, help="results directory (local or Hadoop-compatible URI)")
    ap.add_argument("--layout", choices=("by-piece", "time"))
    ap.add_argument("--reader", choices=("arrow", "spark"), default="arrow")
    ap.add_argument("--search-bound", type=int, default=2000)
    args = ap.parse_args(argv)
    try:
        summary = replay_spark(args.paths, args.out, master=None, search_bound=args.search_bound, layout=args.layout,
                               reader=args.reader)
    except (TraceFormatError, FileNotFoundError) as error:
        print(f"spark_replay_job: {error}", file=sys.stderr)
        return 2
    print_summary(summary, args.out)
    return exit_code(summary)


if __name__ == "__main__":
    sys.exit(main())
