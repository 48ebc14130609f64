"""``sbconform serve`` in a child process: the SDK target's own endpoint (moved verbatim
from ``targets/sdk.py``, which still exports these names)."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
import threading
from typing import Sequence

from ..processes import stop_process


# ------------------------------------------------------------ our own server
class ServeProcess:
    """``sbconform serve`` in a child process on a free port."""

    def __init__(self, extra: Sequence[str] = ()) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sbconform.cli", "serve", "--port", "0", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )
        first = self.process.stdout.readline()  # type: ignore[union-attr]
        match = re.search(r"listening on [^:]+:(\d+)", first)
        if not match:
            rest = self.process.stdout.read() if self.process.poll() is not None else ""  # type: ignore[union-attr]
            raise RuntimeError(f"sbconform serve did not start: {first}{rest}")
        self.port = int(match[1])
        # the management REST API's port, on the same line ("management API on http://host:port")
        http = re.search(r"management API on http://[^:\s]+:(\d+)", first)
        self.http_port = int(http[1]) if http else None
        self.connection_string = self.process.stdout.readline().strip()  # type: ignore[union-attr]
        # keep draining the output so the child never blocks on a full pipe
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        for _ in self.process.stdout:  # type: ignore[union-attr]
            pass

    def stop(self) -> None:
        stop_process(self.process)


_SERVE: ServeProcess | None = None
_SERVE_LOCK = threading.Lock()


def shared_server() -> ServeProcess:
    global _SERVE
    with _SERVE_LOCK:
        if _SERVE is None or _SERVE.process.poll() is not None:
            _SERVE = ServeProcess()
            atexit.register(_SERVE.stop)
        return _SERVE


_TIERS: dict[tuple[str, int | None], ServeProcess] = {}


def premium_server(partition_count: int) -> ServeProcess:
    """``sbconform serve`` for a partitioned Premium namespace (one per partition count, per process)."""
    return tier_server("Premium", partition_count)


def tier_server(sku: str, partition_count: int | None = None) -> ServeProcess:
    """``sbconform serve`` for a namespace of tier ``sku`` (Basic, Standard, Premium; Premium with
    ``partition_count`` partitions): one per kind, per process."""
    with _SERVE_LOCK:
        server = _TIERS.get((sku, partition_count))
        if server is None or server.process.poll() is not None:
            import json
            import tempfile

            folder = tempfile.mkdtemp(prefix=f"sbconform-{sku.lower()}-")
            config = os.path.join(folder, "Config.json")
            namespace: dict = {"Name": "sbemulatorns", "Sku": sku, "Queues": [], "Topics": []}
            if partition_count is not None:
                namespace["PartitionCount"] = partition_count
            with open(config, "w", encoding="utf-8") as out:
                json.dump({"UserConfig": {"Namespaces": [namespace]}}, out)
            server = _TIERS[(sku, partition_count)] = ServeProcess(["--config", config])
            atexit.register(shutil.rmtree, folder, True)  # runs after the stop registered next (atexit is LIFO)
            atexit.register(server.stop)
        return server
