"""The recording proxy's bounds against a hostile or broken local client: how many connections it
relays at once, and how much of one unfinished client frame it holds (the broker's OPEN says the
largest frame it takes: the proxy holds no more than that, where it held up to 64 MiB)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

pytest.importorskip("proton")

from proton import uint  # noqa: E402

from sbconform.proxy.frames import OPEN  # noqa: E402
from sbconform.proxy.run import ProxyThread  # noqa: E402
from test_proxy_units import frame  # noqa: E402

HEADER_AMQP = b"AMQP\x00\x01\x00\x00"


class Upstream:
    """Accepts every connection, keeps it open, sends ``greeting`` on it and records what arrives."""

    def __init__(self, greeting: bytes = b"") -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.greeting = greeting
        self.received: list[bytearray] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            got = bytearray()
            self.received.append(got)
            threading.Thread(target=self._serve, args=(sock, got), daemon=True).start()

    def _serve(self, sock: socket.socket, got: bytearray) -> None:
        with sock:
            if self.greeting:
                sock.sendall(self.greeting)
            while chunk := sock.recv(65536):
                got += chunk

    def close(self) -> None:
        self.listener.close()


def proxy(upstream: Upstream, tmp_path, **options) -> ProxyThread:
    text = f"Endpoint=sb://127.0.0.1:{upstream.port};SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;"
    return ProxyThread(text, tmp_path / "rec", describe="none", **options)


def closed_by_peer(sock: socket.socket, within: float = 3.0) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def test_connections_past_the_limit_are_closed_and_the_others_relayed(tmp_path) -> None:
    upstream = Upstream()
    relay = proxy(upstream, tmp_path, max_connections=3)
    port = relay.start()
    try:
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
        time.sleep(0.5)
        assert [closed_by_peer(c, 1.0) for c in clients] == [False, False, False, True, True]
        clients[0].sendall(HEADER_AMQP)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(bytes(r).startswith(HEADER_AMQP) for r in upstream.received):
            time.sleep(0.05)
        assert any(bytes(r).startswith(HEADER_AMQP) for r in upstream.received)  # the first ones still relay
        assert relay.proxy.stats.refused == 2
        for c in clients:
            c.close()
    finally:
        relay.stop()
        upstream.close()


def test_an_unfinished_client_frame_larger_than_the_broker_takes_is_not_held(tmp_path) -> None:
    # the broker's OPEN: container-id, hostname, max-frame-size 4096
    upstream = Upstream(HEADER_AMQP + frame(OPEN, ["broker", None, uint(4096)]).raw)
    relay = proxy(upstream, tmp_path)
    port = relay.start()
    try:
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(HEADER_AMQP)
        client.recv(8 + 64)  # the broker's header and OPEN came through: the proxy has seen its max-frame-size
        time.sleep(0.3)
        start = struct.pack(">IBBH", 10 * 1024 * 1024, 2, 0, 0)  # a 10 MiB frame, barely begun
        client.sendall(start + b"x" * 100_000)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and sum(len(r) for r in upstream.received) < 100_000:
            time.sleep(0.05)
        assert sum(len(r) for r in upstream.received) >= 100_000, "the proxy held the frame's bytes, waiting for 10 MiB"
        client.close()
    finally:
        relay.stop()
        upstream.close()
