"""Stand-ins for Microsoft's Service Bus emulator and its SQL Server, for testing the orchestration
of ``sbconform.emulator`` where the real images cannot be pulled (no registry here).

They check what the real images need (the environment, the config path, the ports, the order of
readiness) and nothing of what they do: the tests using them grade the wiring, not the stand-ins.

- ``python -m sbconform.standin sql``: refuses to start without ``ACCEPT_EULA=Y`` and a
  ``MSSQL_SA_PASSWORD`` meeting SQL Server's password policy, then listens on 1433 (speaking no
  TDS) and prints the real server's ready line. ``STANDIN_NEVER_READY=1`` makes it never listen.
- ``python -m sbconform.standin emulator``: refuses to start without ``ACCEPT_EULA=Y``,
  ``SQL_SERVER`` and ``MSSQL_SA_PASSWORD`` (the emulator's documented environment); waits until
  ``SQL_SERVER:1433`` accepts connections; reads ``/ServiceBus_Emulator/ConfigFiles/Config.json``
  (the emulator's default entities if absent), refusing a config past the emulator's documented
  quotas; then serves AMQP on 5672 (``sbconform serve`` with the emulator's quotas) and HTTP on
  ``EMULATOR_HTTP_PORT`` (default 5300: ``/health``, and the management API where this sbconform
  has one; ``STANDIN_NO_MANAGEMENT=1``: ``/health`` only, as emulator versions without the
  management API), and prints the real emulator's ready line. Its AMQP port and management API
  enforce the emulator's documented quotas (sbconform.emulator.QUOTAS).
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from pathlib import Path

CONFIG_PATH = "/ServiceBus_Emulator/ConfigFiles/Config.json"
SQL_READY = "SQL Server is now ready for client connections."
EMULATOR_READY = "Emulator Service is Successfully Up!"

#: The emulator's documented usage quotas (sbconform.emulator.QUOTAS, with their source): what a config
#: may not exceed, and what the management API and the AMQP port refuse past them.
from .emulator import QUOTAS  # noqa: E402

DEFAULT_CONFIG = {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
    "Queues": [{"Name": "queue.1", "Properties": {}}],
    "Topics": [{"Name": "topic.1", "Properties": {}, "Subscriptions": [{"Name": "subscription.1", "Properties": {}}]}],
}], "Logging": {"Type": "File"}}}


def fail(message: str) -> None:
    print(message, flush=True)
    sys.exit(1)


def strong_password(password: str) -> bool:
    """SQL Server's policy: at least 8 characters from three of upper, lower, digits, symbols."""
    classes = [r"[A-Z]", r"[a-z]", r"[0-9]", r"[^A-Za-z0-9]"]
    return len(password) >= 8 and sum(bool(re.search(c, password)) for c in classes) >= 3


def check_eula() -> None:
    if os.environ.get("ACCEPT_EULA", "").upper() != "Y":
        fail("ERROR: the license terms must be accepted: set ACCEPT_EULA=Y.")


def sql() -> None:
    check_eula()
    password = os.environ.get("MSSQL_SA_PASSWORD", "")
    if not strong_password(password):
        fail("ERROR: MSSQL_SA_PASSWORD does not meet the password policy (8 characters, three of: upper, lower, digits, symbols).")
    if os.environ.get("STANDIN_NEVER_READY") == "1":
        print("stand-in SQL Server told never to become ready", flush=True)
        while True:
            time.sleep(3600)
    listener = socket.create_server(("0.0.0.0", 1433))
    print(SQL_READY, flush=True)
    while True:
        conn, _ = listener.accept()
        conn.close()


def wait_for_sql(host: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, 1433), timeout=2).close()
            return
        except OSError as error:
            if time.monotonic() > deadline:
                fail(f"ERROR: SQL Server {host}:1433 did not accept connections within {timeout:.0f} s ({error}).")
            time.sleep(0.5)


def check_quotas(config: dict) -> None:
    from .server.config import iso_duration_ms as parse_duration

    namespaces = (config.get("UserConfig") or {}).get("Namespaces") or []
    if len(namespaces) > QUOTAS["namespaces"].value:
        fail(f"ERROR: {len(namespaces)} namespaces configured; the emulator supports {QUOTAS['namespaces'].value}.")
    for ns in namespaces:
        entities = len(ns.get("Queues") or []) + len(ns.get("Topics") or [])
        if entities > QUOTAS["entities"].value:
            fail(f"ERROR: {entities} queues and topics configured; the emulator supports {QUOTAS['entities'].value} per namespace.")
        for topic in ns.get("Topics") or []:
            subs = len(topic.get("Subscriptions") or [])
            if subs > QUOTAS["subscriptions_per_topic"].value:
                fail(f"ERROR: topic {topic.get('Name')!r} has {subs} subscriptions; the emulator supports {QUOTAS['subscriptions_per_topic'].value}.")
        for entity in [*(ns.get("Queues") or []), *(ns.get("Topics") or [])]:
            props = entity.get("Properties") or {}
            if props.get("EnablePartitioning"):
                fail(f"ERROR: {entity.get('Name')!r}: partitioned entities aren't supported by the emulator.")
            ttl = props.get("DefaultMessageTimeToLive")
            if isinstance(ttl, str):
                try:
                    too_long = parse_duration(ttl) > QUOTAS["message_time_to_live"].value
                except Exception:
                    too_long = False  # the config parser names a bad duration
                if too_long:
                    fail(f"ERROR: {entity.get('Name')!r}: DefaultMessageTimeToLive {ttl} is past the emulator's maximum of 1 hour.")


def enforce_quotas(namespace) -> None:
    """The management API's side of the quotas: creating past them is refused (quota-exceeded),
    as the emulator documents ("Usage quotas"); wraps the namespace's create operations."""
    from sbreference import ErrorCode, ServiceBusError

    ttl_max = QUOTAS["message_time_to_live"].value

    def check(path: str, properties: dict) -> None:
        ttl = properties.get("default_message_time_to_live")
        if ttl is not None and ttl > ttl_max:
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"'{path}': DefaultMessageTimeToLive past the emulator's maximum of 1 hour.")
        if properties.get("enable_partitioning"):
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"'{path}': partitioned entities aren't supported by the emulator.")

    def entities() -> int:
        return sum(1 for e in namespace.entities.values() if getattr(e, "kind", "") in ("queue", "topic"))

    create_queue, create_topic, create_subscription = namespace.create_queue, namespace.create_topic, namespace.create_subscription

    def guarded(create):
        def create_entity(path, description=None, **properties):
            check(path, properties)
            if entities() >= QUOTAS["entities"].value:
                raise ServiceBusError(ErrorCode.QUOTA_EXCEEDED, f"'{path}': the namespace has {QUOTAS['entities'].value} queues and topics, "
                                      "the emulator's maximum.")
            return create(path, description, **properties)
        return create_entity

    def subscription(topic, name, *args, **properties):
        check(f"{topic}/Subscriptions/{name}", properties)
        entity = namespace.entities.get(str(topic).lower())
        if entity is not None and len(getattr(entity, "subscriptions", ())) >= QUOTAS["subscriptions_per_topic"].value:
            raise ServiceBusError(ErrorCode.QUOTA_EXCEEDED, f"'{topic}': {QUOTAS['subscriptions_per_topic'].value} subscriptions, "
                                  "the emulator's maximum per topic.")
        return create_subscription(topic, name, *args, **properties)

    namespace.create_queue, namespace.create_topic = guarded(create_queue), guarded(create_topic)
    namespace.create_subscription = subscription


def emulator() -> None:
    check_eula()
    sql_host = os.environ.get("SQL_SERVER", "")
    if not sql_host:
        fail("ERROR: SQL_SERVER (the host of the SQL Server the emulator stores its state in) is not set.")
    if not os.environ.get("MSSQL_SA_PASSWORD"):
        fail("ERROR: MSSQL_SA_PASSWORD (the SQL Server's sa password) is not set.")
    wait_for_sql(sql_host, float(os.environ.get("SQL_WAIT_INTERVAL", "60")))
    path = Path(CONFIG_PATH)
    try:
        config = json.loads(path.read_text(encoding="utf-8")) if path.exists() else DEFAULT_CONFIG
    except (OSError, ValueError) as error:
        fail(f"ERROR: {CONFIG_PATH}: {error}")
    check_quotas(config)

    from .server import ConfigError, Server, parse_config

    try:
        parsed = parse_config(config, CONFIG_PATH)
    except ConfigError as error:  # names the JSON path
        fail(f"ERROR: {error}")
    from .server.limits import Limits

    # the emulator's connection quota: an eleventh connection is refused ("Usage quotas")
    server = Server(parsed, host="0.0.0.0", port=5672, limits=Limits(max_connections=QUOTAS["connections"].value))
    enforce_quotas(server.namespace)
    server.start()
    http_port = int(os.environ.get("EMULATOR_HTTP_PORT", "5300"))
    _http_server(server, http_port).start()
    print(EMULATOR_READY, flush=True)
    server.run()


def _http_server(server, port: int):
    """The emulator's HTTP port: the management API (ServiceBusAdministrationClient) and ``/health``;
    with ``STANDIN_NO_MANAGEMENT=1``, ``/health`` alone, as emulator versions before the management
    API (entities then come from Config.json only)."""
    if os.environ.get("STANDIN_NO_MANAGEMENT") == "1":
        return _HealthOnly(port)
    from .server.admin_http import AdminHttp

    return AdminHttp(server, "0.0.0.0", port)


class _HealthOnly:
    def __init__(self, port: int) -> None:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                status = 200 if self.path.split("?")[0] == "/health" else 404
                body = b"Healthy" if status == 200 else b"no management API in this emulator version"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_DELETE = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> None:
        self.thread.start()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args == ["sql"]:
        sql()
    elif args == ["emulator"]:
        emulator()
    else:
        fail("usage: python -m sbconform.standin sql|emulator")


if __name__ == "__main__":
    main()
