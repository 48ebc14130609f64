"""sbconform serve: the reference namespace behind an AMQP 1.0 listener, for the azure-servicebus SDK."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from ..argtypes import AMQP_MILLIS_MAX_SECONDS, path, port, port_or_none, seconds, whole

#: a duration flag: finite, above 0, and at most what AMQP's milliseconds can carry
SECONDS = seconds(AMQP_MILLIS_MAX_SECONDS)
COUNT = whole(1)
CREDIT = whole(1, 2**31 - 1, " (proton's link credit is a signed 32-bit number)")
#: AMQP 1.0 part 2, 2.7.1: MIN-MAX-FRAME-SIZE is 512 (sbconform/server/limits.py checks it again)
FRAME_SIZE = whole(512, 2**32 - 1, " (max-frame-size is an AMQP uint)")

#: a Config.json lists a namespace's entities (kilobytes); past this it is not one, and is not read
MAX_CONFIG_BYTES = 16 * 1024 * 1024

#: flag -> (Limits field, kind, help); defaults are Limits' own (sbconform/server/limits.py);
#: each kind refuses a bad value when the command line is parsed (sbconform/argtypes.py)
LIMIT_FLAGS = {
    "--max-delivery-size": ("max_delivery_size", COUNT, "largest delivery in bytes, over all its frames (and all of a connection's deliveries in progress together); past it the connection is closed"),
    "--max-output-buffer": ("max_output_buffer", COUNT, "bytes buffered for one connection before the server stops reading from and sending to it (and refuses its $cbs/$management requests: server-busy)"),
    "--open-timeout": ("open_timeout", SECONDS, "seconds a new connection has to send its OPEN"),
    "--idle-timeout": ("idle_timeout", SECONDS, "seconds without a frame before a connection is closed (half of it advertised in OPEN, as proton does)"),
    "--max-connections": ("max_connections", COUNT, "connections served at once; more are closed on accept"),
    "--max-links": ("max_links", COUNT, "links open at once on one connection"),
    "--max-sessions": ("max_sessions", COUNT, "sessions open at once on one connection"),
    "--max-tokens": ("max_tokens", COUNT, "CBS tokens (audiences) one connection may hold"),
    "--link-credit": ("link_credit", CREDIT, "credit granted to each sending link"),
    "--max-frame-size": ("max_frame_size", FRAME_SIZE, "largest AMQP frame in bytes (advertised in OPEN; at least 512)"),
    "--accept-backoff": ("accept_backoff", SECONDS, "seconds the listener pauses when out of file descriptors"),
    "--close-grace": ("close_grace", SECONDS, "seconds a connection the server closes has to read its CLOSE"),
}


def host(text: str) -> str:
    """An address to listen on: an empty one would be every interface, unasked (SECURITY.md)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: name an address (127.0.0.1; 0.0.0.0 for every interface)")
    return text


def run(args: argparse.Namespace) -> int:
    try:
        from ..server import ConfigError, Server, load_config, parse_config
        from ..server.limits import Limits
    except ImportError as error:  # the sdk extra is missing
        print(f"sbconform serve needs python-qpid-proton (pip install 'sbconform[sdk]'): {error}", file=sys.stderr)
        return 2
    chosen = {}
    for name, _kind, _help in LIMIT_FLAGS.values():
        value = getattr(args, name)
        if value is not None:
            chosen[name] = value
    try:
        limits = Limits(**chosen)
    except ValueError as error:
        print(f"sbconform serve: {error}", file=sys.stderr)
        return 2
    try:
        data, problem = _read_config(args.config)
        if problem is None:
            config = load_config(None) if args.config is None else parse_config(data, args.config)
    except ConfigError as error:
        problem = str(error)
    if problem is not None:
        print(f"sbconform serve: {problem}", file=sys.stderr)
        return 2
    defaults = args.config is None and _default_entities(config)
    try:
        _logging(args, data)
    except ValueError as error:
        print(f"sbconform serve: {args.config}: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"sbconform serve: {args.config}: its Logging Type File logs to {error.filename}, which cannot be opened: "
              f"{error.strerror}", file=sys.stderr)
        return 2
    server = Server(config, args.host, args.port, limits=limits)
    try:
        port = server.start()
    except (OSError, OverflowError) as error:
        print(f"sbconform serve: cannot listen on {args.host}:{args.port}: {getattr(error, 'strerror', None) or error}", file=sys.stderr)
        return 2
    http_port = args.http_port if args.http_port is not None else (0 if args.port == 0 else 5300)
    management = ""
    if http_port >= 0:
        from ..server.admin_http import AdminHttp

        try:
            admin = AdminHttp(server, args.host, http_port)
        except OSError as error:
            print(f"sbconform serve: cannot serve the management API on {args.host}:{http_port}: {error.strerror}", file=sys.stderr)
            return 2
        management = f"; management API on http://{args.host}:{admin.start()}"
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    signal.signal(signal.SIGINT, lambda *_: server.stop())
    key_name, key = next(iter(config.keys.items()))
    print(
        f"sbconform serve: listening on {args.host}:{port} "
        f"(namespace {config.namespace_name}, {len(config.queues)} queues, {len(config.topics)} topics"
        f"{' by default: queue.1, topic.1 with subscription.1' if defaults else ''}){management}\n"
        f"  Endpoint=sb://localhost:{port};SharedAccessKeyName={key_name};SharedAccessKey={key};UseDevelopmentEmulator=true;",
        flush=True,
    )
    server.run()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the reference namespace over AMQP 1.0 (for the azure-servicebus SDK)")
    p.add_argument("--host", type=host, default="127.0.0.1", help="address to listen on (0.0.0.0 for every interface: see SECURITY.md)")
    p.add_argument("--port", type=port, default=5672, help="0 picks a free port (printed on the first line)")
    p.add_argument("--config", type=path, default=None, help="entities, in the schema of Microsoft's emulator (Config.json)")
    p.add_argument("--http-port", type=port_or_none, default=None,
                   help="the management REST API (ServiceBusAdministrationClient); default 5300 (0 with --port 0: a free port); -1: none")
    p.add_argument("--log-level", default=None, choices=["debug", "info", "warning", "error"],
                   help="connections, refused tokens and entity changes are logged at info (default: warning, or info when the config's Logging asks for it)")
    try:
        from ..server.limits import Limits

        defaults = Limits()
    except ImportError:  # the sdk extra is missing: run() says so
        defaults = None
    for flag, (name, kind, text) in LIMIT_FLAGS.items():
        default = f" (default {getattr(defaults, name)})" if defaults is not None else ""
        p.add_argument(flag, dest=name, type=kind, default=None, help=text + default)
    p.set_defaults(func=run)


def _read_config(path: str | None):
    """The config file's JSON, read once and at most MAX_CONFIG_BYTES of it (a pipe or /dev/zero
    has no size to stat), as (data, None), or (None, what is wrong with it)."""
    import json

    if path is None:
        return None, None
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        return None, f"{path}: cannot read the config file: {error.strerror}"
    if len(raw) > MAX_CONFIG_BYTES:
        return None, f"{path}: too large for a config file (more than {MAX_CONFIG_BYTES:,} bytes)"
    try:
        return json.loads(raw.decode("utf-8-sig")), None  # a BOM (Windows editors write one) is skipped
    except UnicodeDecodeError:
        return None, f"{path}: not UTF-8 text: not a JSON config file"
    except json.JSONDecodeError as error:
        return None, f"{path}:{error.lineno}:{error.colno}: not valid JSON: {error.msg}"
    except RecursionError:
        return None, f"{path}: JSON nested too deeply for a config file"


def _default_entities(config) -> bool:
    """Without a config, the entities Microsoft's emulator ships with (its default Config.json)."""
    if config.queues or config.topics:
        return False
    config.queues.append(("queue.1", {}))
    config.topics.append(("topic.1", {}, [("subscription.1", {})]))
    return True


def _logging(args: argparse.Namespace, data) -> None:
    """``--log-level``, else the config's ``UserConfig.Logging.Type`` (``Console``: info on stderr;
    ``File``: info in ``sbconform-serve.log`` beside the config), else warnings only. ``data``:
    the config file's JSON (read once: a pipe gives it only once)."""
    from pathlib import Path

    user = data.get("UserConfig") if isinstance(data, dict) else None
    given = user.get("Logging") if isinstance(user, dict) else None
    kind = None
    if isinstance(given, dict) and "Type" in given:  # parse_config has judged the rest of the file
        kind = str(given["Type"]).lower()
        if kind not in ("console", "file"):  # a typo logged as Console did, without a word
            # the emulator's two: File in its installer's Config.json, Console in .NET Aspire's WithConfiguration
            # (learn.microsoft.com/dotnet/api/aspire.hosting.azureservicebusextensions.withconfiguration)
            raise ValueError(f"UserConfig.Logging.Type: expected Console or File, got {given['Type']!r}")
    level = getattr(logging, (args.log_level or ("info" if kind else "warning")).upper())
    handler: logging.Handler = logging.StreamHandler(sys.stderr)
    if kind == "file":
        handler = logging.FileHandler(Path(args.config).resolve().parent / "sbconform-serve.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger = logging.getLogger("sbconform.serve")
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
