"""sbconform diff: compare two traces of the same scenario, after normalising what may differ."""

from __future__ import annotations

import argparse
import sys

from ..argtypes import whole


def run(args: argparse.Namespace) -> int:
    from ..trace.diff import diff_paths
    from ..trace.io import TraceFormatError

    try:
        result = diff_paths(args.a, args.b)
    except TraceFormatError as error:
        print(f"sbconform diff: unreadable input: {error}", file=sys.stderr)
        return 2
    except (ImportError, OSError) as error:
        print(f"sbconform diff: unreadable input: {error}", file=sys.stderr)
        return 2
    except RecursionError:  # json.loads of a line like [[[[...: not a trace, and no difference found
        print(f"sbconform diff: unreadable input: {args.a} or {args.b}: a line nests its JSON too deeply for a trace "
              f"event", file=sys.stderr)
        return 2
    except Exception as error:  # never a traceback: its exit 1 would read as 'different'
        print(f"sbconform diff: the comparison failed, no answer: {type(error).__name__}: "
              f"{(str(error).splitlines() or [''])[0][:300]}", file=sys.stderr)
        return 2
    total = 0
    for trace in result.only_a:
        print(f"trace only in A: {trace}")
    for trace in result.only_b:
        print(f"trace only in B: {trace}")
    for trace, differences in result.differences.items():
        if not differences:
            continue
        print(f"{trace}: {len(differences)} difference(s)")
        shown = differences if args.limit <= 0 else differences[: args.limit]
        for difference in shown:
            print(f"  {difference}")
        if len(shown) < len(differences):
            print(f"  ... and {len(differences) - len(shown)} more")
        total += len(differences)
    compared = len(result.differences)
    if result.same:
        print(f"sbconform diff: same ({compared} trace(s) compared)")
        return 0
    print(f"sbconform diff: different: {total} difference(s) in {sum(1 for d in result.differences.values() if d)} of "
          f"{compared} trace(s) compared; {len(result.only_a)} only in A, {len(result.only_b)} only in B")
    return 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diff",
        help="compare two traces of the same scenario (files, or directories matched by trace id); exit 0 same, 1 different, 2 unreadable",
    )
    p.add_argument("a", help="trace file or directory of traces (A)")
    p.add_argument("b", help="trace file or directory of traces (B)")
    p.add_argument("--limit", type=whole(0), default=50, help="differences shown per trace (0: all)")
    p.set_defaults(func=run)
