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
  has one), and prints the real emulator's ready line.
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

#: The emulator's documented usage quotas (learn.microsoft.com/azure/service-bus-messaging/overview-emulator,
#: "Usage quotas"): what a config may not exceed.
QUOTAS = {
    "namespaces": 1,
    "entities": 50,  # queues and topics in a namespace
    "subscriptions_per_topic": 50,
    "connections": 10,
    "message_size_kb": 256,
    "entity_size_mb": 100,
}

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
    namespaces = (config.get("UserConfig") or {}).get("Namespaces") or []
    if len(namespaces) > QUOTAS["namespaces"]:
        fail(f"ERROR: {len(namespaces)} namespaces configured; the emulator supports {QUOTAS['namespaces']}.")
    for ns in namespaces:
        entities = len(ns.get("Queues") or []) + len(ns.get("Topics") or [])
        if entities > QUOTAS["entities"]:
            fail(f"ERROR: {entities} queues and topics configured; the emulator supports {QUOTAS['entities']} per namespace.")
        for topic in ns.get("Topics") or []:
            subs = len(topic.get("Subscriptions") or [])
            if subs > QUOTAS["subscriptions_per_topic"]:
                fail(f"ERROR: topic {topic.get('Name')!r} has {subs} subscriptions; the emulator supports {QUOTAS['subscriptions_per_topic']}.")
        for queue in ns.get("Queues") or []:
            if (queue.get("Properties") or {}).get("EnablePartitioning"):
                fail(f"ERROR: queue {queue.get('Name')!r}: partitioned entities aren't supported by the emulator.")


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
    server = Server(parsed, host="0.0.0.0", port=5672)
    server.start()
    http_port = int(os.environ.get("EMULATOR_HTTP_PORT", "5300"))
    _http_server(server, http_port).start()
    print(EMULATOR_READY, flush=True)
    server.run()


def _http_server(server, port: int):
    """The emulator's HTTP port: the management API (ServiceBusAdministrationClient) and ``/health``."""
    from .server.admin_http import AdminHttp

    return AdminHttp(server, "0.0.0.0", port)


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
