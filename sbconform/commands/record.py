"""sbconform record: a recording AMQP proxy between any client and any Service Bus broker."""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from pathlib import Path

from ..argtypes import port
from .cost import positive


def _listen(text: str) -> tuple[str, int]:
    host, sep, number = text.rpartition(":")
    if not sep or not number.isdigit() or not host:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, port(number)


#: the smallest --rotate: files of at least some thousands of events
MIN_ROTATE = 1024 ** 2


def _size(text: str) -> int:
    units = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
    t = text.strip().lower().rstrip("b")
    mult = units.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in units else t
    try:
        value = float(number) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (like 256M)") from None
    if not math.isfinite(value):  # int() of inf is an OverflowError, which argparse does not catch
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (like 256M)")
    value = int(value)
    if value < MIN_ROTATE:  # --rotate 1 made a file of every 16 events (the sink looks every 16)
        raise argparse.ArgumentTypeError(f"{text!r}: a trace file is at least 1M (the default is 256M)")
    return value


def _key(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=KEY")
    return name, value


def _trace_id(text: str) -> str:
    """A trace id begins the name of every file the recording writes in --out (``<id>-00001.jsonl``):
    a file name, not a path, short enough for one (the sink checks it the same way)."""
    from ..proxy.sink import trace_id_problem

    problem = trace_id_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def _upstream_problem(upstream: str) -> str | None:
    """What keeps the proxy from reaching the broker (a name that does not resolve, nothing
    listening, no AMQP, a key it refuses), in one line without the key; else None. The steps a
    client takes, as certify's preflight takes them."""
    from ..secrets import mask
    from ..targets.preflight import PreflightError, check_connection_string

    try:
        check_connection_string(upstream, control="none")
    except PreflightError as error:
        return mask(str(error))
    return None


def run(args: argparse.Namespace) -> int:
    try:
        from ..proxy.relay import UsageError, parse_upstream
        from ..proxy.run import build, finish, serve_until_signal
    except ImportError as error:
        print(f"sbconform record needs python-qpid-proton (pip install 'sbconform[sdk]'): {error}", file=sys.stderr)
        return 2
    host, port = args.listen
    if Path(args.out).exists() and not Path(args.out).is_dir():
        print(f"sbconform record: --out {args.out}: is a file, not a directory", file=sys.stderr)
        return 2
    held = sorted(p.name for p in Path(args.out).glob("*") if p.suffix in (".jsonl", ".ndjson", ".parquet", ".pq"))
    if held:  # a second recording would overwrite the first's files (the same --trace-id) or mix two traces
        print(f"sbconform record: --out {args.out}: already holds a recording ({', '.join(held[:2])}"
              f"{', ...' if len(held) > 2 else ''}): one recording per directory; name a new one", file=sys.stderr)
        return 2
    try:
        parse_upstream(args.upstream)
    except UsageError as error:
        print(f"sbconform record: {error}", file=sys.stderr)
        return 2
    problem = _upstream_problem(args.upstream)
    if problem:  # said now, not by every client connection later (each then refused by the proxy)
        print(f"sbconform record: --upstream: {problem}", file=sys.stderr)
        return 2
    try:
        proxy = build(args.upstream, args.out, host, port, args.format, args.rotate, dict(args.key) if args.key else None,
                      args.describe, args.on_record_error, args.trace_id, args.record_attach,
                      max_connections=args.max_connections)
    except UsageError as error:
        print(f"sbconform record: {error}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as error:
        print(f"sbconform record: --out {args.out}: {getattr(error, 'strerror', None) or error}", file=sys.stderr)
        return 2
    if args.format == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            print("sbconform record: --format parquet needs pyarrow (pip install 'sbconform[spark]')", file=sys.stderr)
            return 2
    up = proxy.upstream
    sink = proxy.rec.sink

    def ready(bound: int) -> None:
        print(f"sbconform record: listening on {host}:{bound}, relaying to {up.host}:{up.port} ({'TLS' if up.tls else 'plain'}), "
              f"trace {sink.trace} in {sink.dir}/\n"
              f"  Endpoint=sb://localhost:{bound};SharedAccessKeyName={next(iter(proxy.rec.cbs.keys))};"
              f"SharedAccessKey={next(iter(proxy.rec.cbs.keys.values()))};UseDevelopmentEmulator=true;", flush=True)

    try:
        asyncio.run(serve_until_signal(proxy, ready))
    except OSError as error:
        print(f"sbconform record: cannot listen on {host}:{port}: {error.strerror or error}", file=sys.stderr)
        return 2
    finally:
        finish(proxy)
    st = proxy.stats
    print(f"sbconform record: stopped; {sink.events} events in {len(sink.files)} file(s) ({', '.join(str(f) for f in sink.files[:3])}"
          f"{'...' if len(sink.files) > 3 else ''}); {st.connections} connections, {st.frames} frames"
          + (f"; {st.interpreter_errors} frames the recorder could not follow (recorded as info)" if st.interpreter_errors else "")
          + (f"; {proxy.rec.cbs.refused} client tokens refused" if proxy.rec.cbs.refused else ""), flush=True)
    if sink.failed:
        print(f"sbconform record: {sink.failed}", file=sys.stderr)
        return 1
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help="record an application's Service Bus traffic through an AMQP proxy, as a trace")
    p.add_argument("--listen", type=_listen, default=("127.0.0.1", 5673), metavar="HOST:PORT",
                   help="where clients connect, as to an emulator (default 127.0.0.1:5673; port 0 picks one)")
    p.add_argument("--upstream", required=True, metavar="CONNECTION_STRING",
                   help="the broker's connection string (Azure: TLS on 5671; UseDevelopmentEmulator=true: plain)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory of the trace files (one recording per directory)")
    p.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl",
                   help="jsonl (default: every event flushed as written) or parquet (each part closed, readable, once a minute old: "
                        "a recorder killed outright loses its last part only)")
    p.add_argument("--rotate", type=_size, default=256 * 1024 * 1024, metavar="SIZE",
                   help="start a new trace file after about SIZE of events (default 256M)")
    p.add_argument("--key", type=_key, action="append", metavar="NAME=KEY",
                   help="a key the clients' CBS tokens may be signed with (repeatable; default the emulator's "
                        "RootManageSharedAccessKey=SAS_KEY_VALUE)")
    p.add_argument("--describe", choices=("auto", "control", "admin", "none"), default="auto",
                   help="read each entity's settings upstream at its first attach (emulator: sbconform's control node; "
                        "Azure: the administration API) so replay knows lock durations (default auto)")
    p.add_argument("--on-record-error", choices=("relay", "stop"), default="relay",
                   help="when recording fails (disk full...): keep relaying unrecorded (default) or stop the proxy")
    p.add_argument("--record-attach", action="store_true",
                   help="write every successful link attach too (by default only failed ones: the replay checker does "
                        "not model attach yet, and a piece holding one replays as unknown)")
    p.add_argument("--trace-id", type=_trace_id, default=None, help="the trace id (default record-<UTC time>)")
    p.add_argument("--max-connections", type=positive, default=256, metavar="N",
                   help="client connections relayed at once; more are closed as they are accepted (default 256)")
    p.set_defaults(func=run)
