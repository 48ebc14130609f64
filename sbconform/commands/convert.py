"""sbconform convert: a trace from JSON Lines to Parquet or back (by the file suffixes)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from ..trace.io import JSONL_SUFFIXES, PARQUET_SUFFIXES, TraceCut, TraceFormatError, convert, convert_dir, trace_files

    cuts: list[TraceCut] = []
    if not Path(args.src).exists():
        print(f"sbconform convert: {args.src}: no such file or directory", file=sys.stderr)
        return 2
    try:
        if Path(args.src).is_dir():
            if not args.to:
                print("sbconform convert: SRC is a directory: say which encoding with --to jsonl|parquet", file=sys.stderr)
                return 2
            if not any(True for _ in trace_files(Path(args.src))):  # "0 events -> DST" and nothing written
                print(f"sbconform convert: {args.src}: no trace files (.jsonl, .parquet) in it", file=sys.stderr)
                return 2
            count = convert_dir(args.src, args.dst, args.to, on_cut=cuts.append)
        else:
            if args.to and Path(args.dst).suffix not in (JSONL_SUFFIXES if args.to == "jsonl" else PARQUET_SUFFIXES):
                print(f"sbconform convert: --to {args.to} but {args.dst} names a {Path(args.dst).suffix or 'suffixless'} "
                      f"file: the suffix of DST chooses a file's encoding", file=sys.stderr)
                return 2
            count = convert(args.src, args.dst, on_cut=cuts.append)
    except TraceFormatError as error:
        print(f"sbconform convert: {error}", file=sys.stderr)
        return 2
    except ImportError as error:
        print(f"sbconform convert: {error} (Parquet needs pyarrow: pip install 'sbconform[spark]')", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"sbconform convert: {getattr(error, 'filename', None) or args.dst}: {error.strerror or error}", file=sys.stderr)
        return 2
    except RecursionError:  # json.loads of a line like [[[[...
        print(f"sbconform convert: {args.src}: a line nests its JSON too deeply for a trace event; "
              + (f"{args.dst} is incomplete" if Path(args.src).is_dir() else "nothing written"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"sbconform convert: interrupted; {args.dst} is incomplete", file=sys.stderr)
        return 130
    for cut in cuts:
        print(f"sbconform convert: warning: {cut}", file=sys.stderr)
    print(f"sbconform convert: {count} events -> {args.dst}" + (f" ({len(cuts)} cut file(s): converted up to the cut)" if cuts else ""))
    return 1 if cuts else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="convert a trace between JSON Lines (.jsonl) and Parquet (.parquet)")
    p.add_argument("src", help="trace file (or directory of traces, with --to)")
    p.add_argument("dst", help="output file (its suffix chooses the encoding) or directory")
    p.add_argument("--to", choices=("jsonl", "parquet"), default=None, help="encoding of the outputs when SRC is a directory")
    p.set_defaults(func=run)
