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

    def __init__(self, config: dict | None = None, extra: list[str] | None = None) -> None:
        self.dir = tempfile.TemporaryDirectory()
        args = [sys.executable, "-m", "sbconform.cli", "serve", "--port", "0", *(extra or [])]
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


# ------------------------------------------------------------ raw AMQP frames
# Performative codes of AMQP 1.0 (part 2, section 2.7) and SASL (part 5, section 5.3.3).
OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
SASL_INIT, SASL_OUTCOME = 0x41, 0x44
SOURCE, TARGET = 0x28, 0x29
ACCEPTED, REJECTED = 0x24, 0x25


def encode_value(value) -> bytes:
    """One AMQP value, encoded by proton."""
    from proton import Data

    data = Data()
    data.put_object(value)
    return data.encode()


def performative(code: int, *fields) -> bytes:
    from proton import Described, ulong

    return encode_value(Described(ulong(code), list(fields)))


def frame(body: bytes, channel: int = 0, kind: int = 0) -> bytes:
    return (8 + len(body)).to_bytes(4, "big") + bytes([2, kind]) + channel.to_bytes(2, "big") + body


def sasl_anonymous_open(idle_ms: int | None = None) -> bytes:
    """Everything a client sends before its first BEGIN, pipelined: SASL ANONYMOUS, then OPEN."""
    from proton import symbol, uint

    return (
        b"AMQP\x03\x01\x00\x00"
        + frame(performative(SASL_INIT, symbol("ANONYMOUS"), b"", "localhost"), kind=1)
        + b"AMQP\x00\x01\x00\x00"
        + frame(performative(OPEN, "raw-client", "localhost", uint(1024 * 1024), None, None if idle_ms is None else uint(idle_ms)))
    )


def begin(channel: int = 0) -> bytes:
    from proton import uint

    return frame(performative(BEGIN, None, uint(0), uint(5000), uint(5000)), channel)


def attach(name: str, handle: int, address: str, sending: bool, channel: int = 0) -> bytes:
    """ATTACH of a client link: ``sending`` (role sender) targets ``address``, else it is the source."""
    from proton import Described, ubyte, uint, ulong

    source = Described(ulong(SOURCE), [None if sending else address])
    target = Described(ulong(TARGET), [address if sending else None])
    return frame(performative(ATTACH, name, uint(handle), not sending, ubyte(0), ubyte(0), source, target,
                              None, None, None if not sending else None), channel)


def flow(handle: int, credit: int, delivery_count: int = 0, channel: int = 0) -> bytes:
    from proton import uint

    return frame(performative(FLOW, uint(0), uint(5000), uint(0), uint(5000), uint(handle), uint(delivery_count), uint(credit)), channel)


def transfer(handle: int, delivery_id: int, tag: bytes, payload: bytes, more: bool = False, settled: bool = False,
             channel: int = 0, continuation: bool = False, message_format: int = 0) -> bytes:
    """A TRANSFER frame; ``message_format`` 0x80013700: a batch (each message a data section)."""
    from proton import uint

    if continuation:  # only the handle and more
        body = performative(TRANSFER, uint(handle), None, None, None, None, more)
    else:
        body = performative(TRANSFER, uint(handle), uint(delivery_id), tag, uint(message_format), settled, more)
    return frame(body + payload, channel)


def message_bytes(body: bytes = b"x", message_id: str | None = None, properties: dict | None = None, reply_to: str | None = None) -> bytes:
    from proton import Message

    m = Message(body=body, id=message_id, properties=properties, reply_to=reply_to)
    m.inferred = True
    return m.encode()


def put_token_message(port: int, path: str, message_id: str = "tok", expiry: int | None = None, key: str = KEY) -> bytes:
    from proton import Message

    from sbconform.amqp.sas import make_token

    name = f"sb://localhost:{port}/{path}"
    return Message(id=message_id, body=make_token(name, KEY_NAME, key, expiry),
                   properties={"operation": "put-token", "type": "jwt", "name": name}).encode()


class Frames:
    """Reads and decodes what the server sends on a raw connection."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.frames: list[tuple[int, int, object, bytes]] = []  # (kind, channel, performative, payload)

    def feed(self, data: bytes) -> None:
        from proton import Data

        self.buffer += data
        while True:
            if self.buffer[:4] == b"AMQP":
                del self.buffer[:8]
                continue
            if len(self.buffer) < 8:
                return
            size = int.from_bytes(self.buffer[:4], "big")
            if len(self.buffer) < size:
                return
            doff, kind, channel = self.buffer[4], self.buffer[5], int.from_bytes(self.buffer[6:8], "big")
            body = bytes(self.buffer[doff * 4:size])
            del self.buffer[:size]
            if not body:
                continue  # an empty (heartbeat) frame
            data = Data()
            used = data.decode(body)
            data.rewind()
            data.next()
            self.frames.append((kind, channel, data.get_object(), body[used:]))

    def of(self, code: int) -> list:
        return [f for f in self.frames if int(f[2].descriptor) == code]


def condition_of(perf) -> str | None:
    """The error condition of a DETACH, END or CLOSE (None if it carries none)."""
    fields = list(perf.value)
    error = {DETACH: 2, END: 0, CLOSE: 0}.get(int(perf.descriptor))
    if error is None or len(fields) <= error or fields[error] is None:
        return None
    return str(list(fields[error].value)[0])


class RawClient:
    """A socket speaking AMQP frames built by hand (to do what no client library would)."""

    def __init__(self, port: int, timeout: float = 5.0, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket()
        if rcvbuf is not None:  # a small receive buffer: a peer that reads little fills up at once
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.port = port
        self.frames = Frames()
        self.closed = False
        self.delivery_id = 0

    def transfer(self, handle: int, payload: bytes, **kwargs) -> bytes:
        """A TRANSFER frame with the session's next delivery id (and a tag made of it)."""
        self.delivery_id += 1
        return transfer(handle, self.delivery_id - 1, f"d{self.delivery_id}".encode(), payload, **kwargs)

    def send(self, *chunks: bytes) -> bool:
        if self.closed:
            return False
        try:
            self.sock.settimeout(10)  # not what read() left: a timeout mid-sendall would cut a frame
            self.sock.sendall(b"".join(chunks))
            return True
        except OSError:
            self.closed = True
            return False

    def read(self, wait: float = 0.5, until=None) -> Frames:
        """Read for ``wait`` seconds, or until ``until(frames)`` holds or the server closes."""
        deadline = time.monotonic() + wait
        while not self.closed:
            if until is not None and until(self.frames):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                break
            self.frames.feed(chunk)
        return self.frames

    def open_session(self) -> None:
        self.send(sasl_anonymous_open(), begin())
        self.read(5, until=lambda f: f.of(BEGIN))
        assert self.frames.of(BEGIN), f"no BEGIN from the server: {self.frames.frames}"

    def put_token(self, path: str, handle: int = 0, expiry: int | None = None, key: str = KEY) -> int:
        """Authenticate for ``path`` on $cbs (links on handles ``handle`` and ``handle+1``); the status code."""
        self.send(attach(f"cbs-{handle}", handle, "$cbs", True), attach(f"cbs-reply-{handle}", handle + 1, "$cbs", False),
                  flow(handle + 1, 10))
        self.read(5, until=lambda f: len(f.of(ATTACH)) >= 2 and f.of(FLOW))
        before = len(self.frames.of(TRANSFER))
        self.send(self.transfer(handle, put_token_message(self.port, path, expiry=expiry, key=key)))
        self.read(5, until=lambda f: len(f.of(TRANSFER)) > before)
        from proton import Message

        replies = self.frames.of(TRANSFER)[before:]
        assert replies, "no reply to put-token"
        reply = Message()
        reply.decode(replies[-1][3])
        return int(reply.properties["status-code"])

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (Linux)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def strand_via(port: int, admin, via: str, dest: str, message_id: str = "m1") -> None:
    """A message in ``via``'s transfer dead-letter queue, as Service Bus puts it there (TXN-VIA-002): sent
    via ``via`` to ``dest`` in a transaction, ``dest`` made SendDisabled (through ``admin``) before the commit."""
    from sbreference import Message

    from sbconform.targets.proton_txn import ProtonTransactionalClient
    from sbconform.targets.sdk import _code_of_condition

    client = ProtonTransactionalClient("127.0.0.1", port, KEY_NAME, KEY, timeout=10, condition_code=_code_of_condition)
    try:
        txn = client.declare()
        client.send(txn, dest, [Message(body=b"stranded", message_id=message_id)], via=via)
        queue = admin.get_queue(dest)
        queue.status = "SendDisabled"
        admin.update_queue(queue)
        client.discharge(txn, True)
    finally:
        client.close()
