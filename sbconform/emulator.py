"""Microsoft's Service Bus emulator as a testcontainers module (issue: the emulator as a target).

``ServiceBusEmulatorContainer`` starts the emulator with the SQL Server it stores its state in, on a
private network, the way Microsoft's docker compose file does it
(github.com/Azure/azure-service-bus-emulator-installer, Docker-Compose-Template/docker-compose-default.yml):

- the SQL container (``mcr.microsoft.com/mssql/server``) with ``ACCEPT_EULA=Y`` and
  ``MSSQL_SA_PASSWORD``, reachable on the network under the alias ``sqlserver``;
- the emulator (``mcr.microsoft.com/azure-messaging/servicebus-emulator``) with ``ACCEPT_EULA=Y``,
  ``SQL_SERVER=sqlserver``, the same ``MSSQL_SA_PASSWORD``, the config file mounted at
  ``/ServiceBus_Emulator/ConfigFiles/Config.json``, AMQP on 5672 and HTTP (management and health)
  on 5300 (``EMULATOR_HTTP_PORT``), both mapped to free host ports.

Readiness in order: the SQL container says it is ready, the emulator says it is up, its health
endpoint answers 200, then an AMQP round trip (a CBS put-token with the emulator's key) succeeds.
Any failure removes both containers and the network and raises ``EmulatorError`` with one line
naming the cause (and the failing container's last log lines).

Use it like testcontainers' own modules::

    from sbconform.emulator import ServiceBusEmulatorContainer

    with ServiceBusEmulatorContainer(accept_eula=True, config="Config.json") as emulator:
        client = ServiceBusClient.from_connection_string(emulator.get_connection_string())
        admin = emulator.get_management_connection_string()   # ServiceBusAdministrationClient

Without a registry (as on the machines this kit is developed on), ``standin_images()`` builds
stand-ins (sbconform.standin) from the ``sbconform serve`` image: they take the same environment,
mounts and ports and check them, so the wiring is tested; the emulator itself is not.
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .server.config import DEFAULT_KEY, DEFAULT_KEY_NAME

EMULATOR_IMAGE = "mcr.microsoft.com/azure-messaging/servicebus-emulator:latest"
SQL_IMAGE = "mcr.microsoft.com/mssql/server:2022-latest"
CONFIG_IN_CONTAINER = "/ServiceBus_Emulator/ConfigFiles/Config.json"
AMQP_PORT = 5672
HTTP_PORT = 5300
SQL_ALIAS = "sqlserver"
SQL_READY = "SQL Server is now ready for client connections"
EMULATOR_READY = "Emulator Service is Successfully Up"
DEFAULT_SQL_PASSWORD = "Sbconform!Local1"  # meets SQL Server's policy; a local test password, not a secret


class EmulatorError(RuntimeError):
    """The emulator (or its SQL Server) could not be started: the message says why."""


def _last(container: Any, lines: int = 5) -> str:
    """A container's last log lines on one line (the error stays one line)."""
    return " | ".join(line.strip() for line in _tail(container, lines).splitlines() if line.strip()) or "(no output)"


def _tail(container: Any, lines: int = 15) -> str:
    try:
        out, err = container.get_wrapped_container().logs(stdout=True, stderr=True), b""
        text = (out or b"").decode(errors="replace")
    except Exception:
        try:
            out, err = container.get_logs()
            text = ((out or b"") + (err or b"")).decode(errors="replace")
        except Exception:
            return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def _exited(container: Any) -> bool:
    try:
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        return wrapped.status in ("exited", "dead")
    except Exception:
        return False


def _wait_for_log(container: Any, line: str, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if line in _tail(container, 1_000_000):  # the whole log: the line may be followed by many
            return
        if _exited(container):
            raise EmulatorError(f"{what} exited before it was ready; its last lines: {_last(container)}")
        if time.monotonic() > deadline:
            raise EmulatorError(f"{what} did not become ready within {timeout:.0f} s (waiting for {line!r}); its last lines: {_last(container)}")
        time.sleep(0.5)


class ServiceBusEmulatorContainer:
    """Microsoft's Service Bus emulator and its SQL Server, on a private network.

    ``accept_eula`` must be True (the emulator and SQL Server are licensed under their own terms:
    github.com/Azure/azure-service-bus-emulator-installer/blob/main/EMULATOR_EULA.txt).
    ``config``: a Config.json (the emulator's schema) or None for the image's own default.
    """

    def __init__(
        self,
        image: str = EMULATOR_IMAGE,
        sql_image: str = SQL_IMAGE,
        *,
        accept_eula: bool = False,
        config: str | Path | None = None,
        sql_password: str = DEFAULT_SQL_PASSWORD,
        env: dict[str, str] | None = None,
        sql_env: dict[str, str] | None = None,
        startup_timeout: float = 180,
        sql_timeout: float = 120,
        amqp_port: int = AMQP_PORT,
        http_port: int = HTTP_PORT,
    ) -> None:
        self.image, self.sql_image = image, sql_image
        #: the ports the emulator listens on inside its container (mapped to free host ports)
        self.container_amqp_port, self.container_http_port = int(amqp_port), int(http_port)
        self.accept_eula = accept_eula
        self.config = None if config is None else Path(config)
        if self.config is not None and not self.config.is_file():
            raise EmulatorError(f"config {self.config}: no such file")
        self.sql_password = sql_password
        self.env = dict(env or {})
        self.sql_env = dict(sql_env or {})
        self.startup_timeout, self.sql_timeout = startup_timeout, sql_timeout
        self.network: Any = None
        self.sql: Any = None
        self.emulator: Any = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "ServiceBusEmulatorContainer":
        if not self.accept_eula:
            raise EmulatorError(
                "the emulator's license terms must be accepted to start it (accept_eula=True, or --option accept_eula=Y): "
                "github.com/Azure/azure-service-bus-emulator-installer/blob/main/EMULATOR_EULA.txt"
            )
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.network import Network

        from .containers import engine, kit_labels, sweep

        engine()
        try:
            sweep()  # what killed runs left behind (containers whose owner process is gone)
        except Exception:
            pass
        self.labels = labels = kit_labels()  # so that a run killed before stop() is swept by the next (sbconform.containers)
        try:
            self.network = Network(docker_network_kw={"labels": labels})
            self.network.create()
            sql = DockerContainer(self.sql_image, labels=labels).with_network(self.network).with_network_aliases(SQL_ALIAS)
            for name, value in {"ACCEPT_EULA": "Y", "MSSQL_SA_PASSWORD": self.sql_password, **self.sql_env}.items():
                sql = sql.with_env(name, value)
            self.sql = sql
            sql.start()
            _wait_for_log(sql, SQL_READY, self.sql_timeout, f"the SQL Server container ({self.sql_image})")

            self._start_emulator()
        except EmulatorError:
            self.stop()
            raise
        except Exception as error:
            self.stop()
            raise EmulatorError(f"the emulator could not be started: {type(error).__name__}: {error}") from None
        except BaseException:  # Ctrl-C during the waits: nothing is left running
            self.stop()
            raise
        return self

    def environment(self) -> dict[str, str]:
        """The emulator container's environment: the EULA, its SQL Server, the HTTP port when not
        the default (``EMULATOR_HTTP_PORT``), then what the caller added."""
        environment = {"ACCEPT_EULA": "Y", "SQL_SERVER": SQL_ALIAS, "MSSQL_SA_PASSWORD": self.sql_password}
        if self.container_http_port != HTTP_PORT:
            environment["EMULATOR_HTTP_PORT"] = str(self.container_http_port)
        return {**environment, **self.env}

    def _start_emulator(self) -> None:
        from testcontainers.core.container import DockerContainer

        emulator = DockerContainer(self.image, labels=self.labels).with_network(self.network).with_exposed_ports(
            self.container_amqp_port, self.container_http_port)
        for name, value in self.environment().items():
            emulator = emulator.with_env(name, value)
        if self.config is not None:
            emulator = emulator.with_volume_mapping(str(self.config.resolve()), CONFIG_IN_CONTAINER, mode="ro")
        self.emulator = emulator
        emulator.start()
        _wait_for_log(emulator, EMULATOR_READY, self.startup_timeout, f"the emulator ({self.image})")
        self._wait_healthy()
        self._amqp_round_trip()

    def restart(self, config: str | Path) -> None:
        """Restart the emulator (not its SQL Server) reading ``config``: how entities change on an
        emulator without a management API ("Changes aren't honored on the fly. For changes to take
        effect, you must restart the container": the overview page, "Quota configuration changes").
        Its ports change; a failure removes everything, as a failed start does."""
        self.config = Path(config)
        old, self.emulator = self.emulator, None
        try:
            if old is not None:
                old.stop()
            self._start_emulator()
        except EmulatorError:
            self.stop()
            raise
        except Exception as error:
            self.stop()
            raise EmulatorError(f"the emulator could not be restarted: {type(error).__name__}: {error}") from None
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Remove both containers and the network (each step tried even if another fails)."""
        for container in (self.emulator, self.sql):
            if container is not None:
                try:
                    container.stop()
                except Exception:
                    pass
        self.emulator = self.sql = None
        if self.network is not None:
            try:
                self.network.remove()
            except Exception:
                pass
            self.network = None

    def __enter__(self) -> "ServiceBusEmulatorContainer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- readiness
    def _wait_healthy(self) -> None:
        url = f"http://{self.host()}:{self.http_port()}/health"
        deadline = time.monotonic() + 60
        last = ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=3) as answer:
                    if answer.status == 200:
                        return
                    last = f"status {answer.status}"
            except Exception as error:
                last = str(error)
            if _exited(self.emulator):
                raise EmulatorError(f"the emulator ({self.image}) exited; its last lines: {_last(self.emulator)}")
            time.sleep(0.5)
        raise EmulatorError(f"the emulator's health endpoint {url} did not answer 200 ({last})")

    def _amqp_round_trip(self) -> None:
        """A CBS put-token with the emulator's key: the AMQP side takes connections and checks keys."""
        from proton import Message
        from proton.utils import BlockingConnection, SyncRequestResponse

        from .amqp.sas import make_token

        audience = f"sb://{self.host()}/"
        try:
            connection = BlockingConnection(f"amqp://{self.host()}:{self.amqp_port()}", allowed_mechs="ANONYMOUS", timeout=30)
            try:
                reply = SyncRequestResponse(connection, "$cbs").call(Message(
                    body=make_token(audience, DEFAULT_KEY_NAME, DEFAULT_KEY),
                    properties={"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience}))
            finally:
                connection.close()
        except Exception as error:
            raise EmulatorError(f"the emulator's AMQP port did not answer a CBS request: {error}") from None
        status = int((reply.properties or {}).get("status-code", 0))
        if not 200 <= status < 300:
            raise EmulatorError(f"the emulator refused its own default key (CBS status {status})")

    # ------------------------------------------------------------- what users need
    def host(self) -> str:
        return self.emulator.get_container_host_ip()

    def amqp_port(self) -> int:
        return int(self.emulator.get_exposed_port(self.container_amqp_port))

    def http_port(self) -> int:
        return int(self.emulator.get_exposed_port(self.container_http_port))

    def get_connection_string(self) -> str:
        """For ServiceBusClient (AMQP)."""
        return (f"Endpoint=sb://{self.host()}:{self.amqp_port()};SharedAccessKeyName={DEFAULT_KEY_NAME};"
                f"SharedAccessKey={DEFAULT_KEY};UseDevelopmentEmulator=true;")

    def get_management_connection_string(self) -> str:
        """For ServiceBusAdministrationClient (HTTP on the emulator's port 5300, as its README says)."""
        return (f"Endpoint=sb://{self.host()}:{self.http_port()};SharedAccessKeyName={DEFAULT_KEY_NAME};"
                f"SharedAccessKey={DEFAULT_KEY};UseDevelopmentEmulator=true;")


# ---------------------------------------------------------------------- stand-ins
STANDIN_FILE = """\
FROM {serve}
ENTRYPOINT ["/opt/sbconform/bin/python", "-m", "sbconform.standin", "{role}"]
"""


def standin_images(log=print) -> tuple[str, str]:
    """(emulator, SQL) stand-in images, built from the ``sbconform serve`` image if missing."""
    import tempfile

    from .containers import SERVE_IMAGE, EngineUnavailable, engine, ensure_serve_image

    eng = engine()
    serve = ensure_serve_image(SERVE_IMAGE, eng, log=log)
    tag = serve.split(":", 1)[1]
    out = []
    for role in ("emulator", "sql"):
        name = f"localhost/sbconform-standin-{role}:{tag}"
        if not eng.has_image(name):
            with tempfile.TemporaryDirectory(prefix="sbconform-standin-") as ctx:
                (Path(ctx) / "Containerfile").write_text(STANDIN_FILE.format(serve=serve, role=role), encoding="utf-8")
                built = eng.run("build", "-q", "-t", name, "-f", str(Path(ctx) / "Containerfile"), ctx, capture_output=True, text=True)
                if built.returncode != 0:
                    raise EngineUnavailable(f"building {name} failed: {built.stderr[-1500:]}")
        out.append(name)
    return out[0], out[1]


def standin_config(path: Path, queues: int = 1) -> Path:
    """A Config.json in the emulator's schema with ``queues`` queues (for tests)."""
    path.write_text(json.dumps({"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
        {"Name": f"queue.{i}", "Properties": {}} for i in range(1, queues + 1)]}]}}), encoding="utf-8")
    return path


def unique_name(prefix: str = "sbconform") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------ expectations
OVERVIEW_URL = "https://learn.microsoft.com/azure/service-bus-messaging/overview-emulator"
#: the same page's source (MicrosoftDocs/azure-docs, articles/service-bus-messaging/overview-emulator.md)
OVERVIEW_SOURCE = "https://github.com/MicrosoftDocs/azure-docs/blob/main/articles/service-bus-messaging/overview-emulator.md"


@dataclass(frozen=True)
class Quota:
    """One row of the emulator's "Usage quotas" table (OVERVIEW_URL): its maximum, the unit, the
    row's words as the page gives them, and whether the page says it is configurable within limits."""

    value: int
    unit: str
    row: str
    configurable: bool

    def text(self) -> str:
        return f"{self.row}: {self.value}{' ' + self.unit if self.unit else ''}"


#: The emulator's documented usage quotas ("Usage quotas", OVERVIEW_URL): what the stand-in's
#: emulator profile enforces (sbconform.standin) and what the emulator target skips a scenario for
#: when it needs more (sbconform.targets.emulator), the reason naming the row and the page.
QUOTAS = {
    "namespaces": Quota(1, "", "Number of supported namespaces", False),
    "entities": Quota(50, "", "Number of entities(queues/topics) in a namespace", True),
    "subscriptions_per_topic": Quota(50, "", "Number of Subscriptions per topic", True),
    "correlation_filters_per_topic": Quota(1000, "", "Number of correlation filters per topic", True),
    "connections": Quota(10, "", "Number of concurrent connections to namespace", True),
    "concurrent_receives": Quota(200, "", "Number of concurrent receive requests on entity (queue/Topic) or subscription entity", True),
    "message_size": Quota(256 * 1024, "bytes", "Message size (256 KB)", False),
    "entity_size": Quota(100, "MB", "Queue or topic size", False),
    "message_time_to_live": Quota(3600 * 1000, "ms", "Message Time to Live (1hr)", True),
}


def quota_reason(name: str, needs: str) -> str:
    """Why a scenario is skipped on the emulator: it needs more than a documented quota."""
    return f"needs {needs}, past the emulator's documented quota ({QUOTAS[name].text()}; Usage quotas, {OVERVIEW_URL})"
#: capability a clause needs -> the documented limitation that keeps the emulator from it
DOCUMENTED_LIMITATIONS = {
    "partitions": "partitioned entities aren't compatible with the emulator (Known limitations)",
    "partition-outage": "partitioned entities aren't compatible with the emulator (Known limitations)",
    "premium-namespace": "the emulator supports one namespace (Usage quotas), so no Premium namespace beside it",
    "paired-namespaces": "the emulator supports one namespace (Usage quotas), so no secondary namespace to pair with",
    "small-quota": "the emulator's queue and topic size is fixed at 100 MB (Usage quotas)",
}
EXPECTATIONS_HEADER = """\
# Microsoft's Service Bus emulator: what it documents it does not support, clause by clause.
# Pass with --expectations expectations/microsoft-emulator.toml.
# Each entry names the documentation it rests on, so a report separates "documented limitation"
# (expected here) from "behaves differently than documented" (a failure not listed here).
# Generated by sbconform.emulator.expectations_text() from the catalog; tests/test_emulator.py keeps
# it in step with the clauses.
#
# Source: the emulator's overview page, "Known limitations" and "Usage quotas":
#   {url}
#   "Partitioned entities aren't compatible with emulator."
#   "Number of supported namespaces: 1" (so no Premium namespace beside it, no paired namespace)
#   "Queue or topic size: 100 MB" (not configurable: no small quota to fill)
# Written from the documentation, not from a run of the real emulator (its image cannot be pulled
# where this kit is developed); a run against the real image may refine it.
"""


def expectations_text(catalog: Any) -> str:
    """The expectations file of Microsoft's emulator: every clause needing a capability the emulator
    documents it lacks, expected skipped, with the documented reason and its source."""
    out = [EXPECTATIONS_HEADER.format(url=OVERVIEW_URL)]
    for cid, clause in sorted(catalog.clauses.items()):
        reasons = [DOCUMENTED_LIMITATIONS[n] for n in DOCUMENTED_LIMITATIONS if n in set(clause.needs)]
        if reasons:
            out.append(f'[clauses."{cid}"]\nstatus = "skip"\nreason = "{reasons[0]}"\nsource = "{OVERVIEW_URL}"\n')
    out.append("# The emulator's usage quotas, as its overview page lists them (\"Usage quotas\"; the page's source:\n"
               f"# {OVERVIEW_SOURCE}). The stand-in's emulator profile enforces them; a scenario needing\n"
               "# more is skipped on the emulator target, the reason naming the quota (sbconform.emulator.QUOTAS).\n")
    for name, quota in QUOTAS.items():
        out.append(f'[quotas.{name}]\nvalue = {quota.value}\nunit = "{quota.unit}"\nrow = "{quota.row}"\n'
                   f'configurable = {"true" if quota.configurable else "false"}\nsource = "{OVERVIEW_URL}"\n')
    return "\n".join(out)
