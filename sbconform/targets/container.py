"""The container target: a broker image started through testcontainers, driven through the SDK.

``--sb-target container`` starts one container per test process (shared by its tests, like
``sdk serve=true`` shares one server), maps its AMQP port and hands the SDK target an
emulator connection string for it. Options (``--sb-option KEY=VALUE``):

- ``image``: the image (default ``localhost/sbconform-serve:<version>-<digest>``, ``sbconform serve``
  in a container, built on first use if the engine lacks it: ``sbconform container build``).
- ``config``: a Config.json in the schema of Microsoft's emulator, mounted read-only at
  ``/ServiceBus_Emulator/ConfigFiles/Config.json`` (where Microsoft's emulator reads it; our
  image is told to read it there too).
- ``port`` (default 5672), ``ready`` (the log line that says the broker is up; ours prints
  ``listening on``, Microsoft's emulator ``Emulator Service is Successfully Up``), ``env``
  (``NAME=VALUE,NAME=VALUE`` for the container).
- ``control``, ``prefix``: as for the sdk target. The default is ``auto`` for our image (its
  ``$sbconform`` node provisions entities and injects faults) and ``none`` for any other
  (entities come from ``config``; scenarios that create entities are skipped, with that reason).

The engine is found or started by ``sbconform.containers.engine()`` (Docker, or podman's
Docker-compatible API); without one the target cannot be made, and says why.
"""

from __future__ import annotations

import atexit
import threading
from pathlib import Path
from typing import Any

from ..server.config import DEFAULT_KEY as KEY, DEFAULT_KEY_NAME as KEY_NAME  # Microsoft's emulator's defaults, and ours
from .sdk import SdkTarget
from .sdk_clock import OPEN_POLL_MS

CONFIG_IN_CONTAINER = "/ServiceBus_Emulator/ConfigFiles/Config.json"

_RUNNING: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def _ours(image: str) -> bool:
    return "sbconform-serve" in image


def shared_container(image: str, config: str | None, port: int, ready: str, env: tuple[tuple[str, str], ...]) -> Any:
    """The running container for these settings in this process, started on first use."""
    key = (image, config, port, ready, env)
    with _LOCK:
        container = _RUNNING.get(key)
        if container is not None:
            return container
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.wait_strategies import LogMessageWaitStrategy

        from ..containers import kit_labels, sweep

        try:
            sweep()  # what killed runs left behind (containers whose owner process is gone)
        except Exception:
            pass
        ready_within = 120
        container = DockerContainer(image, labels=kit_labels()).with_exposed_ports(port).waiting_for(
            LogMessageWaitStrategy(ready).with_startup_timeout(ready_within))
        for name, value in env:
            container = container.with_env(name, value)
        if config is not None:
            container = container.with_volume_mapping(str(Path(config).resolve()), CONFIG_IN_CONTAINER, mode="ro")
            if _ours(image):
                container = container.with_command(f"--config {CONFIG_IN_CONTAINER}")
        try:
            container.start()
        except Exception as error:
            text = ""
            try:
                text = b"".join(part or b"" for part in container.get_logs()).decode(errors="replace")[-2000:]
                container.stop()
            except Exception:
                pass
            raise RuntimeError(f"{image} did not start, or did not say {ready!r} within {ready_within} s: {error}\n{text}") from None
        atexit.register(container.stop)
        _RUNNING[key] = container
        return container


class ContainerTarget(SdkTarget):
    name = "container"

    def __init__(
        self,
        image: str | None = None,
        config: str | None = None,
        port: str | int = 5672,
        ready: str | None = None,
        env: str = "",
        control: str | None = None,
        prefix: str = "",
        open_poll_ms: str | float = OPEN_POLL_MS,
    ) -> None:
        from ..containers import SERVE_IMAGE

        self.image = image or SERVE_IMAGE
        if config is not None and not Path(config).is_file():
            raise ValueError(f"config={config!r}: no such file")
        self.config = config
        try:
            self.container_port = int(port)
        except ValueError:
            raise ValueError(f"port={port!r}: expected the broker's AMQP port in the container, a number (default 5672)") from None
        if not 0 < self.container_port < 65536:
            raise ValueError(f"port={port!r}: expected a port number from 1 to 65535")
        self.ready = ready or ("listening on" if _ours(self.image) else "Emulator Service is Successfully Up")
        pairs = [item.partition("=") for item in env.split(",") if item.strip()]
        if any(not sep for _, sep, _ in pairs):
            raise ValueError(f"env={env!r}: expected NAME=VALUE,NAME=VALUE")
        self.container_env = tuple((name.strip(), value) for name, _, value in pairs)
        placeholder = f"Endpoint=sb://localhost;SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY};UseDevelopmentEmulator=true;"
        super().__init__(connection_string=placeholder, control=control or ("auto" if _ours(self.image) else "none"), prefix=prefix,
                         open_poll_ms=open_poll_ms)
        self.connection_string = None  # known once the container runs

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(name=self.name, image=self.image, endpoint=f"a container of {self.image} (testcontainers)")
        if self.config:
            out["config"] = str(self.config)
        return out

    def open(self) -> None:
        if self._opened:
            return
        from ..containers import engine, ensure_serve_image

        engine()
        if _ours(self.image):
            ensure_serve_image(self.image)
        container = shared_container(self.image, self.config, self.container_port, self.ready, self.container_env)
        host, port = container.get_container_host_ip(), container.get_exposed_port(self.container_port)
        self.connection_string = (f"Endpoint=sb://{host}:{port};SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY};"
                                  "UseDevelopmentEmulator=true;")
        super().open()
