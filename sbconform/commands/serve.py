"""sbconform serve: the reference namespace behind an AMQP 1.0 listener, for the azure-servicebus SDK."""

from __future__ import annotations

import argparse
import signal
import sys


def run(args: argparse.Namespace) -> int:
    try:
        from ..server import ConfigError, Server, load_config
    except ImportError as error:  # the sdk extra is missing
        print(f"sbconform serve needs python-qpid-proton (pip install 'sbconform[sdk]'): {error}", file=sys.stderr)
        return 2
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(f"sbconform serve: {error}", file=sys.stderr)
        return 2
    server = Server(config, args.host, args.port)
    try:
        port = server.start()
    except OSError as error:
        print(f"sbconform serve: cannot listen on {args.host}:{args.port}: {error.strerror}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    signal.signal(signal.SIGINT, lambda *_: server.stop())
    key_name, key = next(iter(config.keys.items()))
    print(
        f"sbconform serve: listening on {args.host}:{port} "
        f"(namespace {config.namespace_name}, {len(config.queues)} queues, {len(config.topics)} topics)\n"
        f"  Endpoint=sb://localhost:{port};SharedAccessKeyName={key_name};SharedAccessKey={key};UseDevelopmentEmulator=true;",
        flush=True,
    )
    server.run()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the reference namespace over AMQP 1.0 (for the azure-servicebus SDK)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5672, help="0 picks a free port (printed on the first line)")
    p.add_argument("--config", default=None, help="entities, in the schema of Microsoft's emulator (Config.json)")
    p.set_defaults(func=run)
