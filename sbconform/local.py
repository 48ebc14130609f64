"""A local Service Bus for an application's own tests: ``sbconform serve`` in a child process.

    from azure.servicebus import ServiceBusClient, ServiceBusMessage
    from sbconform.local import LocalServiceBus

    with LocalServiceBus(config="Config.json") as bus:     # or a dict in the same schema; None: queue.1, topic.1
        with ServiceBusClient.from_connection_string(bus.connection_string) as client:
            ...
        bus.advance(seconds=60)          # the broker's clock moves on: locks expire, TTLs, schedules
        bus.take_down("orders")          # every operation on it fails until bring_back("orders")
        admin = bus.admin_client()       # ServiceBusAdministrationClient on the management port

One server per instance, on free ports of ``host`` (AMQP and the management REST API), with the
entities of its ``Config.json`` (Microsoft's emulator's schema, README "sbconform serve"). What
goes wrong is one ``LocalServiceBusError`` line: the config's error with its JSON path, or the
server's exit code when it stopped under a test. The pytest plugin offers it per test as the
``local_service_bus`` fixture (``sbconform.pytest_plugin``).

``advance`` and ``take_down`` go through the server's ``$sbconform`` node: they are the kit's,
not Service Bus operations, so an application's code under test never needs them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Any

from .processes import stop_process

START_TIMEOUT = 30.0  # seconds for the server's first line
_LISTENING = re.compile(r"listening on [^:]+:(\d+).*?management API on http://[^:\s]+:(\d+)")
_KEY = re.compile(r"SharedAccessKeyName=([^;]*);SharedAccessKey=([^;]*)")


# The server's process reads its stdin, a pipe only this process writes to: at end of file (this
# process has ended, even killed outright, with no cleanup run) it stops itself as on SIGTERM.
_WATCHED = """
import os, signal, sys, threading
def watch():
    while os.read(0, 4096):  # the raw descriptor: a buffered reader's lock would hold up the exit a second
        pass
    os.kill(os.getpid(), signal.SIGTERM)
threading.Thread(target=watch, daemon=True).start()
from sbconform.cli import main
sys.exit(main(sys.argv[1:]))
"""


class LocalServiceBusError(RuntimeError):
    """The local Service Bus could not start, or stopped: one line saying why."""


class _KitControls:
    """What both holders of a ``sbconform serve`` below share: the config (a path, or a dict written
    to a file of their own), the life of a context manager, the connection strings, and the kit's
    controls (its ``$sbconform`` node)."""

    _control: Any = None
    admin_connection_string: str

    def __init__(self, config: str | os.PathLike | dict | None) -> None:
        if config is not None and not isinstance(config, (str, os.PathLike, dict)):
            raise TypeError(f"config: a Config.json path or a dict in its schema, not {type(config).__name__}")
        self.config = config
        self._folder: str | None = None  # where a dict config was written

    def start(self) -> Any:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _config_path(self) -> str | None:
        """The config as a file (a dict is written to a folder of its own, removed by ``_forget_config``)."""
        path, self._folder = _config_file(self.config)
        return path

    def _config_problem(self, problem: str, path: str | None) -> str:
        """A config error naming the dict given, not the file written for it."""
        return problem.replace(path, "config (the dict given)") if isinstance(self.config, dict) and path else problem

    def _forget_config(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def _control_address(self) -> tuple[str, int, str, str]:
        """Host, AMQP port, key name and key of the running server (an error if it is not running)."""
        raise NotImplementedError

    def admin_client(self, **kwargs: Any) -> Any:
        """A ``ServiceBusAdministrationClient`` on this server (plain HTTP, as the emulator's)."""
        from azure.servicebus.management import ServiceBusAdministrationClient

        from .server.admin_http import plain_http_transport

        return ServiceBusAdministrationClient.from_connection_string(
            self.admin_connection_string, transport=kwargs.pop("transport", None) or plain_http_transport(), **kwargs)

    # ------------------------------------------------------------ the kit's controls
    def advance(self, seconds: float | dt.timedelta = 0.0) -> None:
        """Move the broker's clock ``seconds`` forward at once (never back): locks expire, messages
        reach their time to live, scheduled messages are enqueued, as if that time had passed."""
        if isinstance(seconds, dt.timedelta):
            seconds = seconds.total_seconds()
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < float("inf"):
            raise ValueError(f"advance: a number of seconds of 0 or more (or a timedelta), not {seconds!r}")
        self._call("advance-time", ms=round(seconds * 1000))

    def take_down(self, entity: str) -> None:
        """Take a queue, topic or subscription down: every operation on it fails, as on an entity
        Service Bus cannot reach (the SDK raises ServiceBusError), until ``bring_back``."""
        self._call("entity-availability", path=_path(entity), available=False)

    def bring_back(self, entity: str) -> None:
        """Undo ``take_down``: the entity answers again, with what it held."""
        self._call("entity-availability", path=_path(entity), available=True)

    # ------------------------------------------------------------ inside
    def _call(self, operation: str, **body: Any) -> Any:
        host, port, key_name, key = self._control_address()
        if self._control is None:
            from .targets.proton_client import ControlClient

            self._control = ControlClient(host, port, key_name, key)
        try:
            return self._control.call(operation, **body)
        except Exception as error:  # a refused request (not-found...) or a server gone under the call
            self._control_address()
            raise LocalServiceBusError(f"{operation}: {getattr(error, 'text', None) or error}") from None

    def _close_control(self) -> None:
        control, self._control = self._control, None
        if control is not None:
            control.close()


class LocalServiceBus(_KitControls):
    """``sbconform serve`` for one test, one module or one session of an application's tests."""

    def __init__(self, config: str | os.PathLike | dict | None = None, *, host: str = "127.0.0.1", port: int = 0,
                 http_port: int = 0) -> None:
        """``port`` and ``http_port``: 0 (the default) picks free ones; 5672 and 5300 are the emulator's,
        for an application whose connection string names them."""
        super().__init__(config)
        for name, value in (("port", port), ("http_port", http_port)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
                raise ValueError(f"{name}: a port number from 0 (any free port) to 65535, not {value!r}")
        self.host = host
        self.asked = (port, http_port)
        self.port: int | None = None
        self.http_port: int | None = None
        self.connection_string: str | None = None
        self._process: subprocess.Popen | None = None
        self._drainer: threading.Thread | None = None
        self._output: deque[str] = deque(maxlen=20)  # the server's last lines, for an error

    # ------------------------------------------------------------ life
    def start(self) -> "LocalServiceBus":
        if self._process is not None:
            raise LocalServiceBusError("this LocalServiceBus is already started (one server per instance)")
        args = [sys.executable, "-c", _WATCHED, "serve", "--host", self.host, "--port", str(self.asked[0]),
                "--http-port", str(self.asked[1])]
        config = self._config_path()
        if config is not None:
            args += ["--config", config]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         text=True, env=env)
        first = self._read_line()
        match = _LISTENING.search(first)
        if not match:
            # a crash prints "Traceback (most recent call last):" first: its last line, the
            # exception, comes once the server has exited (a server still running is stopped)
            try:
                self._process.wait(timeout=START_TIMEOUT)
            except subprocess.TimeoutExpired:
                stop_process(self._process)
            rest = self._process.stdout.read()  # type: ignore[union-attr]
            problem = self._config_problem(_one_line(first + rest) or "sbconform serve did not start", config)
            self.stop()
            raise LocalServiceBusError(problem)
        self.port, self.http_port = int(match[1]), int(match[2])
        self.connection_string = self._read_line().strip()
        self._drainer = threading.Thread(target=self._drain, daemon=True)  # the child never blocks on a full pipe
        self._drainer.start()
        return self

    def stop(self) -> None:
        """Stop the server (its messages go with it) and remove what ``start`` wrote. Idempotent."""
        self._close_control()
        process, drainer = self._process, self._drainer
        stop_process(process)
        if drainer is not None:
            drainer.join(5)  # the server's output ends with it
        if process is not None and (drainer is None or not drainer.is_alive()):
            for pipe in (process.stdin, process.stdout):
                if pipe is not None and not pipe.closed:
                    pipe.close()
        self._forget_config()

    # ------------------------------------------------------------ endpoints
    @property
    def key(self) -> tuple[str, str]:
        """The key name and key of the connection strings (the config's first key)."""
        match = _KEY.search(self._started().connection_string or "")
        assert match is not None, self.connection_string
        return match[1], match[2]

    @property
    def admin_connection_string(self) -> str:
        """For ``ServiceBusAdministrationClient``: the management REST API's port (5300 on the emulator)."""
        name, key = self._started().key
        return _emulator_string("localhost", self.http_port, name, key)  # type: ignore[arg-type]

    def _control_address(self) -> tuple[str, int, str, str]:
        self._started()
        return (self.host if self.host not in ("0.0.0.0", "::") else "127.0.0.1", self.port, *self.key)  # type: ignore[return-value]

    def _started(self) -> "LocalServiceBus":
        if self._process is None or self.connection_string is None:
            raise LocalServiceBusError("the LocalServiceBus is not started (use start() or `with LocalServiceBus(...)`)")
        if self._exited():
            code = self._process.returncode
            last = _one_line("".join(self._output))
            raise LocalServiceBusError(f"sbconform serve (pid {self._process.pid}) stopped, exit code {code}"
                                       + (f": {last}" if last else ""))
        return self

    def _exited(self) -> bool:
        return self._process is not None and self._process.poll() is not None

    def _read_line(self) -> str:
        """The server's next line, or '' if it does not come within START_TIMEOUT."""
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.append(self._process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(START_TIMEOUT)
        if not out:
            stop_process(self._process)
            return f"sbconform serve printed nothing in {START_TIMEOUT:.0f} s"
        return out[0]

    def _drain(self) -> None:
        for line in self._process.stdout:  # type: ignore[union-attr]
            self._output.append(line)


def _config_file(config: str | os.PathLike | dict | None) -> tuple[str | None, str | None]:
    """The config as a file: (its path, the folder written for a dict, to remove afterwards)."""
    if not isinstance(config, dict):
        return (None if config is None else os.fspath(config)), None
    folder = tempfile.mkdtemp(prefix="sbconform-local-")
    path = os.path.join(folder, "Config.json")
    with open(path, "w", encoding="utf-8") as out:
        json.dump(config, out)
    return path, folder


class ServeContainer(_KitControls):
    """``sbconform serve`` in a container, through testcontainers, for tests that run their services
    as containers (as ``sbconform.emulator.ServiceBusEmulatorContainer`` runs Microsoft's emulator):
    our image (``sbconform container build``; built on first use), AMQP and the management REST API
    mapped to free ports, the config mounted read-only, the kit's labels on it (``sbconform
    container sweep`` finds it if this process is killed)."""

    AMQP_PORT, HTTP_PORT = 5672, 5300

    def __init__(self, config: str | os.PathLike | dict | None = None, *, image: str | None = None) -> None:
        super().__init__(config)
        self.image = image
        self.container: Any = None
        self._key: tuple[str, str] = ("", "")

    def start(self) -> "ServeContainer":
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.wait_strategies import LogMessageWaitStrategy

        from .containers import SERVE_IMAGE, ensure_serve_image, kit_labels
        from .server.config import ConfigError, load_config
        from .targets.container import CONFIG_IN_CONTAINER

        if self.container is not None:
            raise LocalServiceBusError("this ServeContainer is already started (one container per instance)")
        path = self._config_path()
        try:
            config = load_config(path)  # its errors here, in one line, rather than a container that never says it is up
        except ConfigError as error:
            problem = self._config_problem(str(error), path)
            self.stop()
            raise LocalServiceBusError(problem) from None
        self._key = next(iter(config.keys.items()))
        self.image = ensure_serve_image(self.image or SERVE_IMAGE)
        container = DockerContainer(self.image, labels=kit_labels()).with_exposed_ports(self.AMQP_PORT, self.HTTP_PORT)
        container = container.waiting_for(LogMessageWaitStrategy("listening on").with_startup_timeout(120))
        if path is not None:
            container = container.with_volume_mapping(str(Path(path).resolve()), CONFIG_IN_CONTAINER, mode="ro")
            container = container.with_command(f"--config {CONFIG_IN_CONTAINER}")
        self.container = container
        try:
            container.start()
        except Exception as error:
            self.stop()
            raise LocalServiceBusError(f"{self.image} did not start: {error}") from None
        return self

    def stop(self) -> None:
        self._close_control()
        container, self.container = self.container, None
        if container is not None:
            try:
                container.stop()
            except Exception:
                pass
        self._forget_config()

    def get_connection_string(self) -> str:
        """For ServiceBusClient (AMQP)."""
        return self._connection_string(self.AMQP_PORT)

    def get_management_connection_string(self) -> str:
        """For ServiceBusAdministrationClient (the management REST API, plain HTTP)."""
        return self._connection_string(self.HTTP_PORT)

    @property
    def admin_connection_string(self) -> str:  # type: ignore[override]
        return self.get_management_connection_string()

    def _connection_string(self, port: int) -> str:
        return _emulator_string(*self._endpoint(port))

    def _endpoint(self, port: int) -> tuple[str, int, str, str]:
        if self.container is None:
            raise LocalServiceBusError("the ServeContainer is not started (use start() or `with ServeContainer(...)`)")
        return (self.container.get_container_host_ip(), int(self.container.get_exposed_port(port)), *self._key)

    def _control_address(self) -> tuple[str, int, str, str]:
        return self._endpoint(self.AMQP_PORT)


def _emulator_string(host: str, port: int, key_name: str, key: str) -> str:
    """A connection string the SDKs take for a local endpoint (plain AMQP or HTTP, as the emulator's)."""
    return f"Endpoint=sb://{host}:{port};SharedAccessKeyName={key_name};SharedAccessKey={key};UseDevelopmentEmulator=true;"


def _path(entity: str) -> str:
    if not isinstance(entity, str) or not entity.strip("/"):
        raise ValueError(f"an entity path (a queue, a topic or topic/Subscriptions/name), not {entity!r}")
    return entity


def _one_line(text: str) -> str:
    """The server's error as one line, without the program's prefix."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1]
    return line[len("sbconform serve: "):] if line.startswith("sbconform serve: ") else line


__all__ = ["LocalServiceBus", "LocalServiceBusError", "ServeContainer"]
