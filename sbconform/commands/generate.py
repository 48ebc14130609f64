"""sbconform generate: a large legal trace from the reference model, optionally with planted violations."""

from __future__ import annotations

import argparse
import time

from .cost import positive


def run(args: argparse.Namespace) -> int:
    from ..trace.generate import INJECTIONS, generate

    inject = [k.strip() for k in (args.inject or "").split(",") if k.strip()]
    if inject == ["all"]:
        inject = list(INJECTIONS)
    started = time.perf_counter()
    try:
        result = generate(args.out, args.events, clients=args.clients, entities=args.entities, partitions=args.partitions,
                          seed=args.seed, inject=inject, layout=args.layout, buckets=args.buckets)
    except ValueError as error:
        print(f"sbconform generate: {error}")
        return 2
    seconds = time.perf_counter() - started
    where = f"{result['buckets']} bucket files" if result["layout"] == "by-piece" else "one file"
    print(f"wrote {result['events']} events to {result['out']} ({result['layout']} layout, {where}) "
          f"in {seconds:.1f} s ({result['events'] / seconds:,.0f} events/s)")
    for r in result["injected"]:
        print(f"  injected {r['kind']:<27} entity {r['entity']:<22} pos {r['pos']:<9} clause {r['clause']}")
    for kind in result["not_planted"]:
        print(f"  NOT injected {kind}: no place for it in this trace (more --events?)")
    return 0 if not result["not_planted"] else 2


def register(sub: argparse._SubParsersAction) -> None:
    from ..trace.generate import INJECTIONS

    p = sub.add_parser("generate", help="write a large legal trace from the reference model (with --inject: planted violations)")
    p.add_argument("--events", type=positive, required=True, metavar="N", help="at least this many events")
    p.add_argument("--clients", type=positive, default=4, metavar="C", help="clients per entity (default 4)")
    p.add_argument("--entities", type=positive, default=8, metavar="E",
                   help="entities; their shapes cycle through plain, sessions, partitioned, retries (max delivery count 3), pings")
    p.add_argument("--partitions", type=int, default=4, metavar="P", help="partitions of partitioned entities: 1, 2 or 4 (default 4)")
    p.add_argument("--seed", type=int, default=0, metavar="S")
    p.add_argument("--out", required=True, metavar="PATH",
                   help="a directory (by-piece layout, for Spark), or a .parquet / .jsonl file (events in position order)")
    p.add_argument("--layout", choices=("by-piece", "time"), help="override the layout chosen from --out")
    p.add_argument("--buckets", type=positive, help="bucket files of the by-piece layout (default: about one per 250,000 events)")
    p.add_argument("--inject", metavar="KIND,...", help=f"plant violations: {', '.join(INJECTIONS)} (or all)")
    p.set_defaults(func=run)
