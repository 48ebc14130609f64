"""Helpers for the tests of ``sbconform serve``: a server process, a recording proxy, raw sockets."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from sbconform.processes import stop_process

KEY_NAME, KEY = "RootManageSharedAccessKey", "SAS_KEY_VALUE"


class Serve:
    """``sbconform serve --port 0 --config <generated>`` in a child process."""

    def __init__(self, config: dict | None = None) -> None:
        self.dir = tempfile.TemporaryDirectory()
        args = [sys.executable, "-m", "sbconform.cli", "serve", "--port", "0"]
        if config is not None:
            path = Path(self.dir.name) / "Config.json"
            path.write_text(json.dumps(config), encoding="utf-8")
            args += ["--config", str(path)]
        started = time.monotonic()
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first = self.process.stdout.readline()
        self.ready_after = time.monotonic() - started
        match = re.search(r"listening on [^:]+:(\d+)", first)
        assert match, f"sbconform serve did not start: {first}{self.process.stdout.read()}"
        self.port = int(match[1])
        self.connection_string = self.process.stdout.readline().strip()
        self.output: list[str] = []
        threading.Thread(target=lambda: self.output.extend(self.process.stdout), daemon=True).start()

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        stop_process(self.process)
        self.dir.cleanup()


def connection_string(port: int, key_name: str = KEY_NAME, key: str = KEY) -> str:
    return f"Endpoint=sb://localhost:{port};SharedAccessKeyName={key_name};SharedAccessKey={key};UseDevelopmentEmulator=true;"


class Recorder:
    """A TCP proxy recording what a client sends to the server (to replay and mutate it)."""

    def __init__(self, server_port: int) -> None:
        self.server_port = server_port
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.port = self.listener.getsockname()[1]
        self.sent = bytearray()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        client, _ = self.listener.accept()
        upstream = socket.create_connection(("127.0.0.1", self.server_port))

        def pump(src: socket.socket, dst: socket.socket, record: bool) -> None:
            try:
                while True:
                    data = src.recv(65536)
                    if not data:
                        break
                    if record:
                        self.sent += data
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        back = threading.Thread(target=pump, args=(upstream, client, False), daemon=True)
        back.start()
        pump(client, upstream, True)
        back.join(5)
        self.listener.close()


def raw_exchange(port: int, data: bytes, wait: float = 0.3) -> bytes:
    """Send bytes on a fresh connection; what the server answered before closing or ``wait``."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            sock.sendall(data)
        except OSError:
            return b""
        sock.settimeout(wait)
        answer = bytearray()
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except (socket.timeout, OSError):
            pass
        return bytes(answer)
