"""``--target emulator``: Microsoft's Service Bus emulator, started by testcontainers with its SQL
Server (sbconform.emulator.ServiceBusEmulatorContainer), driven through the azure-servicebus SDK.

Options (``--option KEY=VALUE``):

- ``accept_eula=Y``: required; the emulator and SQL Server are licensed under their own terms.
- ``image``, ``sql_image``: default Microsoft's (``mcr.microsoft.com/azure-messaging/servicebus-emulator:latest``,
  ``mcr.microsoft.com/mssql/server:2022-latest``).
- ``standin=true``: use sbconform's stand-ins instead (sbconform.standin: they take the emulator's
  environment, ports and config, for testing the orchestration where the images cannot be pulled).
- ``config``: a Config.json for the emulator to start with.
- ``sql_password``; ``env``: ``NAME=VALUE,...`` for the emulator's container; ``prefix``.
- ``amqp_port``, ``http_port``: the ports the emulator listens on in its container (5672 and 5300,
  as documented); a different HTTP port is also given to it as ``EMULATOR_HTTP_PORT``. Both are
  mapped to free host ports.
- ``control``: ``auto`` or ``admin`` (the default): entities created per test and deleted after,
  through the emulator's management API on its HTTP port (ServiceBusAdministrationClient);
  ``config``: for emulator versions without that API, entities written into a generated
  Config.json and the emulator restarted, in batches from a ``plan`` recorded on the reference
  target (sbconform.emulator_plan); ``none``: entities come from ``config`` only, and scenarios
  that manage entities are skipped.

One emulator per test process, shared by its tests; ``--jobs N`` starts N. What the emulator
documents it does not support is declared as lacking capabilities, with the source, so those
scenarios are skipped with that reason; a scenario needing more than one of its documented usage
quotas (sbconform.emulator.QUOTAS) is skipped naming the quota. ``expectations/microsoft-emulator.toml``
lists both, with their source.
"""

from __future__ import annotations

import atexit
import threading
from pathlib import Path
from typing import Any

from ..emulator import DOCUMENTED_LIMITATIONS, OVERVIEW_URL
from .base import PEEK_LOCK
from .sdk import CAPABILITIES, LACKING, SdkTarget
from .sdk_clock import OPEN_POLL_MS

#: what the emulator documents it lacks (one table: sbconform.emulator.DOCUMENTED_LIMITATIONS, which
#: also writes expectations/microsoft-emulator.toml), and what no emulator offers a test (fault injection)
EMULATOR_LACKING = {
    **{capability: f"{reason} ({OVERVIEW_URL})" for capability, reason in DOCUMENTED_LIMITATIONS.items()},
    "entity-outage": "the emulator cannot make an entity unavailable on request",
}

_RUNNING: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def shared_emulator(image: str, sql_image: str, config: str | None, sql_password: str, env: tuple[tuple[str, str], ...] = (),
                    ports: tuple[int, int] | None = None) -> Any:
    from ..emulator import AMQP_PORT, HTTP_PORT, ServiceBusEmulatorContainer

    amqp_port, http_port = ports or (AMQP_PORT, HTTP_PORT)
    key = (image, sql_image, config, sql_password, env, amqp_port, http_port)
    with _LOCK:
        if key not in _RUNNING:
            emulator = ServiceBusEmulatorContainer(image, sql_image, accept_eula=True, config=config, sql_password=sql_password,
                                                   env=dict(env), amqp_port=amqp_port, http_port=http_port)
            emulator.start()
            atexit.register(emulator.stop)
            _RUNNING[key] = emulator
        return _RUNNING[key]


def _config_entities(config: str | None) -> int:
    import json

    if config is None:
        return 2
    try:
        namespaces = json.loads(Path(config).read_text(encoding="utf-8"))["UserConfig"]["Namespaces"]
        return sum(len(ns.get("Queues") or []) + len(ns.get("Topics") or []) for ns in namespaces)
    except (OSError, ValueError, KeyError, TypeError):
        return 0  # the emulator refuses such a config itself, saying why


class EmulatorTarget(SdkTarget):
    name = "emulator"

    def __init__(
        self,
        accept_eula: str = "",
        image: str | None = None,
        sql_image: str | None = None,
        standin: str | bool = False,
        config: str | None = None,
        sql_password: str | None = None,
        control: str = "auto",
        prefix: str = "",
        plan: str | None = None,
        env: str = "",
        amqp_port: str | int | None = None,
        http_port: str | int | None = None,
        open_poll_ms: str | float = OPEN_POLL_MS,
    ) -> None:
        from ..emulator import AMQP_PORT, DEFAULT_SQL_PASSWORD, EMULATOR_IMAGE, HTTP_PORT, SQL_IMAGE

        try:  # the ports the emulator listens on in its container (documented defaults 5672 and 5300)
            self.ports = (int(amqp_port or AMQP_PORT), int(http_port or HTTP_PORT))
        except ValueError:
            raise ValueError(f"amqp_port={amqp_port!r}, http_port={http_port!r}: port numbers") from None
        if not all(0 < port < 65536 for port in self.ports):
            raise ValueError(f"amqp_port={self.ports[0]}, http_port={self.ports[1]}: expected 1 to 65535")

        if str(accept_eula).upper() not in ("Y", "YES", "TRUE", "1"):
            raise ValueError(  # an option the user must give: one line, exit 2 (not the broker's failure)
                "the emulator's license terms must be accepted: --option accept_eula=Y "
                "(github.com/Azure/azure-service-bus-emulator-installer/blob/main/EMULATOR_EULA.txt)"
            )
        if config is not None and not Path(config).is_file():
            raise ValueError(f"config={config!r}: no such file")
        from . import boolean_option

        self.standin = boolean_option("standin", standin)
        self.image, self.sql_image = image or EMULATOR_IMAGE, sql_image or SQL_IMAGE
        self.config = config
        self.sql_password = sql_password or DEFAULT_SQL_PASSWORD
        placeholder = "Endpoint=sb://localhost;SharedAccessKeyName=x;SharedAccessKey=x;UseDevelopmentEmulator=true;"
        if control not in ("auto", "admin", "none", "config"):
            raise ValueError(f"control={control!r}: auto or admin (the emulator's management API on its HTTP port), config "
                             "(no management API: entities written into Config.json, the emulator restarted), or none")
        if plan is not None and not Path(plan).is_file():
            raise ValueError(f"plan={plan!r}: no such file (record one with: python -m sbconform.emulator_plan record FILE ...)")
        if plan is not None and control != "config":
            raise ValueError("plan= is for control=config (entities written into Config.json)")
        try:
            self.env = tuple((k.strip(), v) for k, _, v in (item.partition("=") for item in env.split(",") if item.strip()))
        except AttributeError:
            raise ValueError(f"env={env!r}: NAME=VALUE,...") from None
        if any(not k for k, _ in self.env):
            raise ValueError(f"env={env!r}: NAME=VALUE,...")
        # the emulator has no $sbconform node: the SDK target provisions through its management API
        super().__init__(connection_string=placeholder, control="none", prefix=prefix, open_poll_ms=open_poll_ms)
        self.management = control in ("auto", "admin")
        self.config_mode = control == "config"
        self.plan_path = plan
        self.connection_string = None
        base = CAPABILITIES - set(EMULATOR_LACKING) - {"paired-namespaces"}
        self.capabilities = base if self.management else base - {"entity-management"}
        self.lacking = {**LACKING, **EMULATOR_LACKING}
        if control == "none":
            self.lacking["entity-management"] = "control=none: entities come from the emulator's config file"
        if self.config_mode:
            self.lacking["entity-management"] = ("control=config: without a management API entities are written into the "
                                                 "emulator's Config.json before a restart; none is updated, deleted or counted at run time")
        self.emulator: Any = None
        self.subscriptions: dict[str, int] = {}  # topic -> subscriptions this target created on it
        # entities the emulator starts with: the config's, else the image's default (queue.1, topic.1)
        self.config_entities = _config_entities(config)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(name=self.name, image=self.image, sql_image=self.sql_image, standin=self.standin,
                   endpoint=f"{'stand-ins of ' if self.standin else ''}Microsoft's emulator (testcontainers)")
        if self.config:
            out["config"] = str(self.config)
        return out

    def open(self) -> None:
        if self._opened:
            return
        if self.standin:
            from ..emulator import standin_images

            self.image, self.sql_image = standin_images(log=lambda *_: None)
        self.emulator = shared_emulator(self.image, self.sql_image, self.config, self.sql_password, self.env, self.ports)
        self.connection_string = self.emulator.get_connection_string()
        super().open()
        if self.config_mode:
            from ..emulator_plan import Plan

            self.plan = Plan.load(self.plan_path)
            self.mine: list[tuple[str, str, str | None, dict[str, Any]]] = []  # this test's entities
            if not hasattr(self.emulator, "sbconform_config"):
                self.emulator.sbconform_config = _base_config(self.config)
                self.emulator.sbconform_restarts = 0
        if self.management:  # ServiceBusAdministrationClient on the HTTP port, as the emulator's README says
            from azure.servicebus.management import ServiceBusAdministrationClient

            from ..server.admin_http import plain_http_transport
            from .azure_admin import AdminProvisioner

            management = self.emulator.get_management_connection_string()
            self.control = AdminProvisioner(management, client=ServiceBusAdministrationClient.from_connection_string(
                management, transport=plain_http_transport()))
            self.control_mode = "admin"
            self._count_on_broker_clock()  # now that a probe queue can be created (sdk_offset)

    # ------------------------------------------------- the emulator's documented quotas
    # A scenario that needs more than a quota of "Usage quotas" (sbconform.emulator.QUOTAS) is
    # skipped, the reason naming the quota and its source: past it the emulator refuses by design,
    # which grades nothing about the clause the scenario checks.
    def _skip_past(self, quota: str, needs: str) -> None:
        import pytest

        from ..emulator import quota_reason

        pytest.skip(quota_reason(quota, needs))

    def _check_entity(self, properties: dict[str, Any]) -> None:
        from ..emulator import QUOTAS

        ttl = properties.get("default_message_time_to_live")
        if ttl is not None and ttl > QUOTAS["message_time_to_live"].value:
            self._skip_past("message_time_to_live", f"a default message time to live of {ttl} ms")
        if not self.config_mode and self.config_entities + len(self.created) >= QUOTAS["entities"].value:
            self._skip_past("entities", f"more than {QUOTAS['entities'].value} queues and topics at once")

    def create_queue(self, name: str, **properties: Any) -> str:
        self._check_entity(properties)
        if self.config_mode:
            return self._config_create("queue", name, None, properties)
        return super().create_queue(name, **properties)

    def create_topic(self, name: str, **properties: Any) -> str:
        self._check_entity(properties)
        if self.config_mode:
            return self._config_create("topic", name, None, properties)
        return super().create_topic(name, **properties)

    def create_subscription(self, topic_path: str, name: str, **properties: Any) -> str:
        from ..emulator import QUOTAS

        ttl = properties.get("default_message_time_to_live")
        if ttl is not None and ttl > QUOTAS["message_time_to_live"].value:
            self._skip_past("message_time_to_live", f"a default message time to live of {ttl} ms")
        count = self.subscriptions.get(topic_path.lower(), 0)
        if count >= QUOTAS["subscriptions_per_topic"].value:
            self._skip_past("subscriptions_per_topic", f"more than {count} subscriptions on one topic")
        if self.config_mode:
            path = self._config_create("subscription", name, topic_path, properties)
        else:
            path = super().create_subscription(topic_path, name, **properties)
        self.subscriptions[topic_path.lower()] = count + 1
        return path

    def _check_connection(self) -> None:
        from ..emulator import QUOTAS

        # the Python SDK opens one AMQP connection per sender or receiver
        if len(self.handles) >= QUOTAS["connections"].value:
            self._skip_past("connections", f"more than {QUOTAS['connections'].value} senders and receivers open at once")

    def sender(self, path: str) -> Any:
        self._check_connection()
        return super().sender(path)

    def receiver(self, path: str, mode: str = PEEK_LOCK) -> Any:
        self._check_connection()
        return super().receiver(path, mode)

    def accept_session(self, path: str, session_id: str | None = None, mode: str = PEEK_LOCK, max_wait: int | None = None) -> Any:
        self._check_connection()
        return super().accept_session(path, session_id, mode, max_wait)

    def _check_messages(self, messages: Any) -> None:
        from ..emulator import QUOTAS

        for message in messages:
            ttl = getattr(message, "time_to_live", None)
            if ttl is not None and ttl > QUOTAS["message_time_to_live"].value:
                self._skip_past("message_time_to_live", f"a message time to live of {ttl} ms")

    def send(self, sender: Any, messages: Any, batch: bool = False) -> Any:
        self._check_messages(messages)
        return super().send(sender, messages, batch)

    def schedule(self, sender: Any, messages: Any, enqueue_time: int) -> Any:
        self._check_messages(messages)
        return super().schedule(sender, messages, enqueue_time)

    # ------------------------------------------- control=config: Config.json and restarts
    def _config_create(self, kind: str, name: str, topic: str | None, properties: dict[str, Any]) -> str:
        """The entity, from the running emulator's Config.json, or after a restart with a
        Config.json holding it (and, from the plan, the entities of the tests that follow)."""
        import pytest

        from ..emulator import QUOTAS, quota_reason
        from ..emulator_plan import current_test, entity_name, unsupported

        cannot = unsupported(properties)
        if cannot:
            pytest.skip(f"control=config: the emulator's Config.json cannot set {', '.join(cannot)}")
        test = current_test() or f"outside-a-test-{self._suffix}"
        entity = name if kind == "subscription" else entity_name(name, test)
        wanted = (kind, entity, topic, dict(properties))
        self.mine.append(wanted)
        if not self.emulator.sbconform_config.has(kind, entity, topic):
            self._restart_for(test, wanted)
            if self.emulator.sbconform_config.count() > QUOTAS["entities"].value:
                pytest.skip(quota_reason("entities", f"more than {QUOTAS['entities'].value} queues and topics"))
        return f"{topic}/Subscriptions/{entity}" if kind == "subscription" else entity

    def _restart_for(self, test: str, wanted: tuple[str, str, str | None, dict[str, Any]]) -> None:
        import json
        import tempfile

        from ..emulator import QUOTAS
        from ..emulator_plan import translate

        builder = _base_config(self.config)
        for entry in [*self.mine, wanted]:  # this test's entities first: they must survive the restart
            builder.add(*entry)
        for following in self.plan.following(test):  # then whole tests of the plan, within the quota
            entries = [translate(e, following) for e in self.plan.entities.get(following, [])]
            adding = {(k, n) for k, n, _, _ in entries if k != "subscription" and not builder.has(k, n)}
            if builder.count() + len(adding) > QUOTAS["entities"].value:
                break
            for entry in entries:
                builder.add(*entry)
        self.emulator.sbconform_restarts += 1
        directory = Path(tempfile.mkdtemp(prefix="sbconform-emulator-config-"))
        path = directory / "Config.json"
        path.write_text(json.dumps(builder.document(), indent=1), encoding="utf-8")
        path.chmod(0o644)
        directory.chmod(0o755)
        for handle in self.handles:  # the restarted emulator has other ports and none of their links
            try:
                handle.private.close()
            except Exception:
                pass
        self.handles.clear()
        self.emulator.restart(path)
        self.emulator.sbconform_config = builder
        import shutil

        previous = getattr(self.emulator, "sbconform_config_dir", None)  # mounted by the container just replaced
        if previous is not None:
            shutil.rmtree(previous, ignore_errors=True)
        self.emulator.sbconform_config_dir = directory
        self.connection_string = self.emulator.get_connection_string()
        from azure.servicebus import ServiceBusClient

        if self.client is not None:
            self.client.close()
        self.client = ServiceBusClient.from_connection_string(self.connection_string, retry_total=1, retry_backoff_factor=0.2)
        if self._low_level is not None:
            self._low_level.close()
            self._low_level = None


def _base_config(config: str | None) -> Any:
    """The entities a generated Config.json always keeps: the user's config's, else the image's
    default ones (queue.1, topic.1 with subscription.1)."""
    from ..emulator_plan import ConfigBuilder
    from ..server.config import load_config

    builder = ConfigBuilder()
    if config is None:
        builder.add("queue", "queue.1", None, {})
        builder.add("topic", "topic.1", None, {})
        builder.add("subscription", "subscription.1", "topic.1", {})
        return builder
    loaded = load_config(config)
    for name, props in loaded.queues:
        builder.add("queue", name, None, dict(props))
    for name, props, subs in loaded.topics:
        builder.add("topic", name, None, dict(props))
        for sub, sub_props in subs:
            builder.add("subscription", sub, name, dict(sub_props))
    return builder


def preflight(options: dict[str, Any]) -> None:
    """Before certify starts its test processes: the engine is there, and the emulator and its SQL
    Server start with these options (then are removed). A set-up that cannot start (SQL Server
    never ready, an emulator that exits, a config past the emulator's quotas) is one line and exit
    2, never a failure of every clause. Raises PreflightError."""
    from ..emulator import EmulatorError, ServiceBusEmulatorContainer
    from .preflight import PreflightError, check_engine

    check_engine()
    target = EmulatorTarget(**options)
    if target.standin:
        from ..containers import EngineUnavailable
        from ..emulator import standin_images

        try:
            target.image, target.sql_image = standin_images(log=lambda *_: None)
        except EngineUnavailable as error:
            raise PreflightError(f"the stand-in images cannot be built: {error}") from None
    trial = ServiceBusEmulatorContainer(target.image, target.sql_image, accept_eula=True, config=target.config,
                                        sql_password=target.sql_password, env=dict(target.env),
                                        amqp_port=target.ports[0], http_port=target.ports[1])
    try:
        trial.start()
    except EmulatorError as error:
        raise PreflightError(str(error)) from None
    finally:
        trial.stop()
