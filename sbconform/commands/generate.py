"""sbconform generate: a large legal trace from the reference model, optionally with planted violations."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from ..argtypes import whole
from ..progress import LiveLine, count, rate
from .cost import positive

#: Bounds on the trace's shape: every entity writes a few hundred events however few --events
#: asks, and every client is held in memory (10^8 clients grew past 7 GB).
MAX_CLIENTS, MAX_ENTITIES, MAX_CLIENTS_IN_ALL = 1000, 100_000, 1_000_000
#: --events: ten times the 100 million the replay benchmark extrapolates to (some 7 hours at
#: 40,000 events/s; 16 GB of Parquet, 250 GB of JSON Lines). Free disk is checked up front too.
MAX_EVENTS = 1_000_000_000
#: bytes an event takes on disk, about (measured: 12.5 in Parquet, 236 in JSON Lines), rounded up
EVENT_BYTES = {"parquet": 16, "jsonl": 250}


def run(args: argparse.Namespace) -> int:
    from ..trace.generate import INJECTIONS, generate

    inject = [k.strip() for k in (args.inject or "").split(",") if k.strip()]
    if inject == ["all"]:
        inject = list(INJECTIONS)
    unknown = [k for k in inject if k not in INJECTIONS]
    if unknown:
        print(f"sbconform generate: --inject {','.join(unknown)}: unknown; known: {', '.join(INJECTIONS)} (or all)",
              file=sys.stderr)
        return 2
    if args.clients * args.entities > MAX_CLIENTS_IN_ALL:
        print(f"sbconform generate: --clients {args.clients:,} x --entities {args.entities:,} is "
              f"{args.clients * args.entities:,} clients; at most {MAX_CLIENTS_IN_ALL:,}", file=sys.stderr)
        return 2
    out = Path(args.out)
    problem = _out_problem(args, out)
    if problem:
        print(f"sbconform generate: --out {out}: {problem}", file=sys.stderr)
        return 2
    problem = _disk_problem(args, out)
    if problem:
        print(f"sbconform generate: {problem}", file=sys.stderr)
        return 2
    try:  # its folders are made as needed (README's `--out traces/run1` on a fresh clone)
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        print(f"sbconform generate: --out {out}: cannot create the directory {out.parent}: {error.strerror or error}",
              file=sys.stderr)
        return 2
    if out.exists() and out.is_dir() != (_layout(args, out) == "by-piece"):
        print(f"sbconform generate: --out {out}: exists and is {'a directory' if out.is_dir() else 'a file'}",
              file=sys.stderr)
        return 2
    # Written under a temporary name and renamed when complete: an interrupted run leaves
    # nothing that replay could take for a whole trace.
    temp = out.with_name(f".{out.stem}.incomplete-{os.getpid()}{out.suffix}")
    started = time.perf_counter()
    live = LiveLine()
    try:
        try:
            result = generate(temp, args.events, clients=args.clients, entities=args.entities, partitions=args.partitions,
                              seed=args.seed, inject=inject, layout=_layout(args, out), buckets=args.buckets,
                              progress=_progress_line(args.events, started, live) if live.live else None)
        finally:
            live.finish()
        _move_into_place(temp, out, result)
    except ValueError as error:
        _remove(temp)
        print(f"sbconform generate: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        _remove(temp)
        print(f"sbconform generate: cannot write {out}: {error.strerror or error}", file=sys.stderr)
        return 2
    except ImportError as error:
        _remove(temp)
        print(f"sbconform generate: needs pyarrow (pip install 'sbconform[spark]'): {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _remove(temp)
        print(f"sbconform generate: interrupted; nothing written to {out}", file=sys.stderr)
        return 130
    seconds = max(time.perf_counter() - started, 1e-6)
    where = (f"{len(list(out.glob('bucket-*')))} bucket files of {result['buckets']} buckets"
             if result["layout"] == "by-piece" else "one file")  # a bucket no piece falls in has no file
    print(f"wrote {result['events']} events to {result['out']} ({result['layout']} layout, {where}) "
          f"in {seconds:.1f} s ({result['events'] / seconds:,.0f} events/s)")
    for r in result["injected"]:
        print(f"  injected {r['kind']:<27} entity {r['entity']:<22} pos {r['pos']:<9} clause {r['clause']}")
    for kind in result["not_planted"]:
        print(f"  NOT injected {kind}: no place for it in this trace (more --events?)")
    return 0 if not result["not_planted"] else 2


def _progress_line(total: int, started: float, live: LiveLine | None = None):
    """The live line on a terminal (``sbconform.progress``): events written of the total,
    elapsed, rate."""
    line = live or LiveLine()

    def show(done: int) -> None:
        elapsed = time.perf_counter() - started
        line.show(f"  {count(done, total, 'events')}, {elapsed:.0f} s, {rate(done, elapsed, 'events')}")
    return show


def _layout(args: argparse.Namespace, out: Path) -> str:
    from ..trace.io import JSONL_SUFFIXES, PARQUET_SUFFIXES

    return args.layout or ("time" if out.suffix in PARQUET_SUFFIXES + JSONL_SUFFIXES else "by-piece")


def _out_problem(args: argparse.Namespace, out: Path) -> str | None:
    """What is wrong with ``--out`` for the layout (README: a directory for the by-piece layout,
    a .parquet / .jsonl file for position order), else None. A name with a file's suffix
    (``x.txt``, ``x.json``) is neither: refused, not made a directory, unless ``--layout
    by-piece`` says a directory is meant. A suffix with digits (``run.2026-11-28``) names a directory."""
    from ..trace.io import JSONL_SUFFIXES, PARQUET_SUFFIXES

    trace_file = out.suffix in PARQUET_SUFFIXES + JSONL_SUFFIXES
    if _layout(args, out) == "time" and args.buckets is not None:
        return "--buckets shapes the by-piece layout (a directory); a trace in position order is one file"
    if _layout(args, out) == "time":
        return None if trace_file else "a trace in position order (--layout time) is one file: name it .parquet or .jsonl"
    if trace_file:
        return "the by-piece layout writes a directory: name it without a .parquet / .jsonl suffix"
    if out.name in ("", ".", ".."):  # written beside under a temporary name, then renamed into place
        return "name the trace's own directory or file (e.g. traces/run1), not . , .. or /"
    if out.is_dir():  # replaced whole when the new trace is written: only if it is one generate wrote
        foreign = sorted(p.name for p in out.iterdir() if not (p.name in ("_layout.json", "_injected.json") or (
            p.name.startswith("bucket-") and p.suffix == ".parquet" and p.is_file())))
        if foreign:
            return (f"exists and holds what is not a by-piece trace ({', '.join(foreign[:3])}"
                    f"{', ...' if len(foreign) > 3 else ''}), which writing the trace would remove: name a new directory")
    if args.layout is None and out.suffix[1:].isalpha() and not out.is_dir():
        return (f"neither a .parquet / .jsonl trace file nor a directory name ({out.suffix!r} is a file's suffix): "
                f"name a trace file .parquet or .jsonl, or add --layout by-piece to write a directory of that name")
    return None


def _disk_problem(args: argparse.Namespace, out: Path) -> str | None:
    """--events more than the disk holding --out has room for (about ``EVENT_BYTES`` each), else
    None: said before writing, not when the disk is full hours later."""
    from ..trace.io import JSONL_SUFFIXES

    encoding = "jsonl" if out.suffix in JSONL_SUFFIXES else "parquet"
    needed = args.events * EVENT_BYTES[encoding]
    where = out.absolute().parent
    while not where.exists() and where != where.parent:  # made when writing: its nearest existing folder
        where = where.parent
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return None  # said by the writing, naming what failed
    if needed <= free:
        return None
    return (f"--events {args.events:,} needs about {needed / 1e9:,.1f} GB "
            f"({'JSON Lines' if encoding == 'jsonl' else 'Parquet'}, about {EVENT_BYTES[encoding]} bytes an event); "
            f"{where} has {free / 1e9:,.1f} GB free")


def _injected(path: Path, by_piece: bool) -> Path:
    return path / "_injected.json" if by_piece else path.with_name(path.name + ".injected.json")


def _move_into_place(temp: Path, out: Path, result: dict) -> None:
    by_piece = result["layout"] == "by-piece"
    if not by_piece and _injected(temp, False).exists():
        os.replace(_injected(temp, False), _injected(out, False))
    if out.is_dir():
        shutil.rmtree(out)
    os.replace(temp, out)
    result["out"] = str(out)


def _remove(temp: Path) -> None:
    if temp.is_dir():
        shutil.rmtree(temp, ignore_errors=True)
    else:
        temp.unlink(missing_ok=True)
    _injected(temp, False).unlink(missing_ok=True)


def register(sub: argparse._SubParsersAction) -> None:
    from ..trace.generate import INJECTIONS

    p = sub.add_parser("generate", help="write a large legal trace from the reference model (with --inject: planted violations)")
    p.add_argument("--events", type=whole(1, MAX_EVENTS), required=True, metavar="N",
                   help=f"at least this many events (at most {MAX_EVENTS:,}; and what the disk has room for)")
    p.add_argument("--clients", type=whole(1, MAX_CLIENTS), default=4, metavar="C", help="clients per entity (default 4)")
    p.add_argument("--entities", type=whole(1, MAX_ENTITIES), default=8, metavar="E",
                   help="entities; their shapes cycle through plain, sessions, partitioned, retries (max delivery count 3), pings")
    p.add_argument("--partitions", type=int, default=4, metavar="P", help="partitions of partitioned entities: 1, 2 or 4 (default 4)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random seed: the same seed writes the same trace")
    p.add_argument("--out", required=True, metavar="PATH",
                   help="a directory (by-piece layout, for Spark; no file suffix such as .txt), or a .parquet / .jsonl file "
                        "(events in position order)")
    p.add_argument("--layout", choices=("by-piece", "time"), help="override the layout chosen from --out")
    p.add_argument("--buckets", type=positive, help="bucket files of the by-piece layout (default: about one per 250,000 events)")
    p.add_argument("--inject", metavar="KIND,...", help=f"plant violations: {', '.join(INJECTIONS)} (or all)")
    p.set_defaults(func=run)
