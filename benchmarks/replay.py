"""How fast is trace replay? Spark local[2] against a single process, same trace, same run.

1. Generates a trace of N events (default 10 million) with ``sbconform generate`` in the
   **by-piece layout** (bucket files, each piece's events in one file in position order):
   the generator writes that layout directly; no conversion step exists to leave out.
   Generation time is printed on its own line and is not part of either replay figure.
2. Replays it with Spark (``--master``, default ``local[2]``): the full job, from listing
   the bucket files to every result row written (``pieces.parquet``, ``summary.json``).
   Each task reads its bucket files with pyarrow: no shuffle, no event through the JVM.
   The session start and one warm-up job on a 20,000-event trace (Python workers and JVM
   classes loaded) are fixed costs printed on their own line; the figure with the warm-up
   counted is printed too.
3. Replays the same files in one Python process (``replay_local``), in a subprocess so
   that its peak memory is its own.

Both replays must agree (same pieces, all valid). Printed: events per second of each,
their ratio, the generation rate, the driver's JVM heap retained after the job (after a GC) and the
peak resident memory of the driver's Python process and of the single-process replay.

Usage: python benchmarks/replay.py [--events N] [--entities E] [--master local[2]] [--dir DIR]
Last line: spark_events_per_s=<n> ratio=<spark/single>
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sbconform.trace.generate import generate  # noqa: E402
from sbconform.trace.replay import replay_spark, spark_session  # noqa: E402

SINGLE = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from sbconform.trace.replay import replay_local
import numpy, pyarrow, pyarrow.parquet  # loaded before the timer, as Spark's warm-up loads them in its workers
t = time.perf_counter()
results = replay_local([{path!r}])
seconds = time.perf_counter() - t
print(json.dumps({{"seconds": seconds, "events": sum(r["events"] for r in results), "pieces": len(results),
                  "statuses": sorted({{r["status"] for r in results}}),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--entities", type=int, default=64)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--dir", help="where to write the trace (default: a temporary directory, removed afterwards)")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="sbconform-replay-bench-"))
    trace, out = root / "trace", root / "out"
    try:
        t = time.perf_counter()
        gen = generate(trace, args.events, clients=args.clients, entities=args.entities, seed=1)
        gen_s = time.perf_counter() - t
        n = gen["events"]
        size = sum(f.stat().st_size for f in trace.glob("*.parquet"))
        print(f"trace: {n:,} events, {args.entities} entities x {args.clients} clients, by-piece layout, "
              f"{gen['buckets']} bucket files, {size / 2**20:.0f} MiB")
        print(f"generate: {gen_s:.1f} s ({n / gen_s:,.0f} events/s; not part of the replay figures)")

        t = time.perf_counter()
        spark = spark_session(args.master, "sbconform-replay-bench")
        start_s = time.perf_counter() - t
        try:
            # Warm-up: the same job on a small trace starts the Python workers and loads
            # the JVM's classes; a fixed cost, printed, and added back on the next line.
            warm = root / "warm"
            generate(warm, 20_000, clients=args.clients, entities=4, seed=2)
            t = time.perf_counter()
            replay_spark([str(warm)], str(root / "warm-out"), spark=spark)
            warm_s = time.perf_counter() - t
            print(f"spark session start ({args.master}): {start_s:.1f} s; warm-up job on 20,000 events: {warm_s:.1f} s "
                  f"(fixed costs, not in the figure below)")
            t = time.perf_counter()
            summary = replay_spark([str(trace)], str(out), spark=spark)
            spark_s = time.perf_counter() - t
            spark._jvm.java.lang.System.gc()  # what the driver JVM still holds, not garbage awaiting collection
            rt = spark._jvm.java.lang.Runtime.getRuntime()
            heap_mb = (rt.totalMemory() - rt.freeMemory()) / 2**20
        finally:
            spark.stop()
        assert summary["events"] == n, (summary["events"], n)
        assert summary["valid"] == summary["pieces"] == args.entities, summary
        spark_eps = n / spark_s
        print(f"spark replay with the warm-up counted too: {n / (spark_s + warm_s):,.0f} events/s")
        print(f"spark replay: {spark_s:.1f} s, {spark_eps:,.0f} events/s ({summary['pieces']} pieces, all valid; "
              f"{summary['reader']})")

        proc = subprocess.run([sys.executable, "-c", SINGLE.format(root=str(Path(__file__).resolve().parent.parent), path=str(trace))],
                              capture_output=True, text=True, check=True)
        single = json.loads(proc.stdout.strip().splitlines()[-1])
        assert single["events"] == n and single["statuses"] == ["valid"], single
        single_eps = n / single["seconds"]
        print(f"single-process replay: {single['seconds']:.1f} s, {single_eps:,.0f} events/s, peak RSS {single['peak_rss_mb']:.0f} MB")
        driver_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"driver memory: JVM heap retained after the job (after a GC) {heap_mb:.0f} MB; driver Python peak RSS {driver_rss:.0f} MB "
              f"(includes generation, in this process)")
        print(f"100 million events at this Spark rate: {1e8 / spark_eps / 60:.1f} min")
        print(f"spark_events_per_s={spark_eps:.0f} ratio={spark_eps / single_eps:.2f}")
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
