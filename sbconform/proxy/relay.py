"""The recording proxy: an asyncio TCP relay between AMQP clients and one upstream broker.

Clients connect as to an emulator (plain AMQP, ``UseDevelopmentEmulator=true``); for
each client connection the proxy opens one upstream connection (TLS with SNI on port
5671 for Azure, plain for an emulator) and relays every frame both ways. Bytes pass
unchanged, except:

- the CBS ``put-token`` requests (client -> broker): the client's token is checked
  against the proxy's keys (default: the emulator's well-known key) and replaced by a
  token for the upstream audience signed with the upstream connection string's key; a
  client token the proxy refuses is replaced by one the upstream refuses, so the client
  sees the broker's own authentication failure (CBS, Service Bus docs:
  https://learn.microsoft.com/azure/service-bus-messaging/service-bus-amqp-protocol-guide#claims-based-authorization);
- towards Azure only, the host name the client gave (``localhost``) in SASL init, OPEN
  and link addresses, replaced by the namespace's (Service Bus routes by the OPEN
  host name).

The interpreter (``interpret.py``) sees each frame in the order it passes; anything it
raises is caught here: the frame still passes, unchanged, and the failure is written as
an ``info`` event (or, with ``on_record_error="stop"``, the proxy stops). A stream that
is not AMQP framing is relayed as raw bytes from then on. Buffers are bounded: broker ->
client bytes are relayed as they come (interpreted from a copy); client -> broker bytes
are relayed frame by frame, so at most one incomplete frame (``frames.MAX_FRAME``) is
held until its last byte comes (or the client's stream ends: then it passes as it is);
reading from one side pauses while the other side's write buffer is full (``connection.py``).
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import quote_plus

from proton import Message

from sbreference import ErrorCode, ServiceBusError

from ..amqp.sas import TokenError, check_token, make_token
from .connection import End
from .frames import FrameError
from .interpret import ConnInterp, Recording, entity_path

DEFAULT_KEYS = {"RootManageSharedAccessKey": "SAS_KEY_VALUE"}


class UsageError(ValueError):
    """A bad option or connection string (the user's mistake, said in one line)."""


@dataclass
class Upstream:
    host: str
    port: int
    tls: bool
    key_name: str
    key: str
    emulator: bool
    connection_string: str

    @property
    def authority(self) -> str:
        default = 5671 if self.tls else 5672
        return self.host if self.port == default and not self.emulator else f"{self.host}:{self.port}"


def parse_upstream(text: str) -> Upstream:
    parts = {}
    for part in text.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep:
            parts[key.strip().lower()] = value.strip()
    endpoint = parts.get("endpoint")
    if not endpoint:
        raise UsageError("--upstream: the connection string has no Endpoint=sb://host[:port]")
    if "://" not in endpoint:
        raise UsageError(f"--upstream: Endpoint {endpoint!r} is not a URI (sb://host[:port])")
    hostport = endpoint.split("://", 1)[1].strip("/").split("/", 1)[0]
    host, _, port = hostport.partition(":")
    if not host:
        raise UsageError(f"--upstream: Endpoint {endpoint!r} has no host")
    emulator = parts.get("usedevelopmentemulator", "").lower() == "true"
    try:
        port_n = int(port) if port else (5672 if emulator else 5671)
    except ValueError:
        raise UsageError(f"--upstream: Endpoint port {port!r} is not a number") from None
    if "sharedaccesskeyname" not in parts or "sharedaccesskey" not in parts:
        raise UsageError("--upstream: the connection string needs SharedAccessKeyName and SharedAccessKey")
    return Upstream(host, port_n, not emulator, parts["sharedaccesskeyname"], parts["sharedaccesskey"], emulator, text)


class CbsRewriter:
    """Client put-token -> upstream put-token (see the module docstring)."""

    def __init__(self, upstream: Upstream, keys: dict[str, str]) -> None:
        self.upstream = upstream
        self.keys = keys
        self.refused = 0

    def __call__(self, request: Message) -> Message:
        props = dict(request.properties or {})
        name = str(props.get("name", ""))
        token = str(request.body)
        expiry = None
        for part in token.split("&"):
            if part.startswith("se="):
                try:
                    expiry = int(part[3:])
                except ValueError:
                    pass
        new_name = f"sb://{self.upstream.authority}/{entity_path(name)}"
        try:
            check_token(token, name, self.keys)
            new_token = make_token(new_name, self.upstream.key_name, self.upstream.key, expiry)
        except TokenError:
            self.refused += 1
            se = expiry or int(time.time() + 3600)
            new_token = (f"SharedAccessSignature sr={quote_plus(new_name)}&sig={quote_plus('refused-by-the-recording-proxy')}"
                         f"&se={se}&skn={self.upstream.key_name}")
        props["name"] = new_name
        request.properties = props
        request.body = new_token
        return request


class Describer:
    """Reads an entity's description out of band (first attach to each entity): through
    ``sbconform serve``'s ``$sbconform`` control node for an emulator, through the
    administration client (``ServiceBusAdministrationClient``) for Azure. An entity the
    broker does not describe (not found, not an entity: a refusal about that path) has no
    settings in the trace, and the next entity is asked again; a failure to describe at
    all (no connection, no rights) turns it off (said once): the trace then lacks the
    entities' settings and the replay checker assumes Service Bus defaults."""

    def __init__(self, upstream: Upstream, mode: str = "auto", say: Callable[[str], None] | None = None) -> None:
        self.upstream = upstream
        self.mode = mode
        self.client: Any = None
        self.off = mode == "none"
        self.say = say or (lambda text: print(f"sbconform record: {text}", file=sys.stderr))
        self.lock = threading.Lock()

    def __call__(self, path: str) -> dict | None:
        if self.off:
            return None
        base = path[: -len("/$DeadLetterQueue")] if path.lower().endswith("/$deadletterqueue") else path
        try:
            with self.lock:
                if self.client is None:
                    if self.upstream.emulator and self.mode in ("auto", "control"):
                        from ..targets.sdk import ControlClient

                        self.client = ControlClient(self.upstream.host, self.upstream.port, self.upstream.key_name, self.upstream.key)
                    else:
                        from ..targets.azure_admin import AdminProvisioner

                        self.client = AdminProvisioner(self.upstream.connection_string)
                found = self.client.call("describe", path=base)
            return {str(k): v for k, v in dict(found).items()}
        except ServiceBusError as error:
            if error.code in _ABOUT_THE_PATH:  # this path only: the attach to it will say the rest
                self.say(f"entity {path!r} is not described upstream ({error.code}); its events carry no settings")
                return None
            self.off = True
            self.say(f"cannot describe entities upstream ({error.code}: {str(error)[:200]}); "
                     "the trace will not carry entity settings (lock duration, max delivery count): replay assumes the defaults")
            return None
        except Exception as error:
            self.off = True
            self.say(f"cannot describe entities upstream ({type(error).__name__}: {str(error)[:200]}); "
                     "the trace will not carry entity settings (lock duration, max delivery count): replay assumes the defaults")
            return None

    def close(self) -> None:
        if self.client is not None:
            try:
                self.client.close()
            except Exception:
                pass


#: a describe refused for these codes is about the path asked (not found, not an entity), not the describer
_ABOUT_THE_PATH = frozenset({ErrorCode.ENTITY_NOT_FOUND, ErrorCode.ARGUMENT_ERROR, ErrorCode.INVALID_OPERATION})


@dataclass
class Stats:
    connections: int = 0
    open: int = 0
    frames: int = 0
    interpreter_errors: int = 0
    upstream_failures: int = 0
    refused: int = 0  # client connections closed at accept: past max_connections
    errors: list = field(default_factory=list)


#: client connections relayed at once; more are closed as they are accepted (each may hold one
#: unfinished frame, bounded by the broker's max-frame-size: connection.Pair)
MAX_CONNECTIONS = 256


class Proxy:
    def __init__(self, upstream: Upstream, recording: Recording, listen_host: str = "127.0.0.1", listen_port: int = 5673,
                 describer: Callable[[str], dict | None] | None = None, on_record_error: str = "relay",
                 ssl_context: ssl.SSLContext | None = None, say: Callable[[str], None] | None = None,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.upstream = upstream
        self.max_connections = max_connections
        self.rec = recording
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.describer = describer
        self.on_record_error = on_record_error
        self.ssl_context = ssl_context
        self.say = say or (lambda text: print(f"sbconform record: {text}", file=sys.stderr))
        self.stats = Stats()
        self.server: asyncio.base_events.Server | None = None
        self.tasks: set[asyncio.Task] = set()
        self.pairs: set = set()  # the connections being relayed (``connection.Pair``)
        self._stop_requested: asyncio.Event | None = None
        self.linger = 2.0  # seconds the other direction may go on after one side closed
        self._flushing: asyncio.TimerHandle | None = None  # the sink's flush timer (_flush_parts)
        if upstream.tls:
            self.rec.rewrite_host = upstream.host

    async def start(self) -> int:
        self._stop_requested = asyncio.Event()
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: End(self, None, True), self.listen_host, self.listen_port)
        self.listen_port = self.server.sockets[0].getsockname()[1]
        self._flushing = loop.call_later(self._flush_every(), self._flush_parts)
        return self.listen_port

    def _flush_every(self) -> float:
        return max(0.05, min(getattr(self.rec.sink, "part_seconds", 60.0), 60.0))

    def _flush_parts(self) -> None:
        """Flush the sink now and then, traffic or not: a Parquet part old enough is closed
        (readable), so a recording idle before it is killed keeps what it recorded."""
        try:
            self.rec.sink.flush()
        finally:
            self._flushing = asyncio.get_running_loop().call_later(self._flush_every(), self._flush_parts)

    def request_stop(self) -> None:
        if self._stop_requested is not None:
            self._stop_requested.set()

    async def wait_stopped(self) -> None:
        assert self._stop_requested is not None
        await self._stop_requested.wait()
        await self.close()

    async def close(self) -> None:
        if self._flushing is not None:
            self._flushing.cancel()
        if self.server is not None:
            self.server.close()
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        for pair in list(self.pairs):
            pair.finish()
        self.rec.finish()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # ------------------------------------------------------------------ one connection
    def _record_failure(self, where: str, error: BaseException, interp: ConnInterp | None, frame: Any) -> None:
        self.stats.interpreter_errors += 1
        text = f"{where}: {type(error).__name__}: {error}"
        if len(self.stats.errors) < 20:
            self.stats.errors.append(text)
        if self.on_record_error == "stop":
            self.say(f"recording failed ({text}); stopping (--on-record-error stop)")
            self.request_stop()
            return
        if interp is not None and frame is not None:
            try:
                interp.unrecognised(frame, f"proxy interpreter error {text}"[:300])
            except Exception:
                pass

    def _note_raw(self, interp: ConnInterp, error: FrameError, from_client: bool) -> None:
        try:
            op = interp.sink.op()
            side = "client" if from_client else "broker"
            interp.ev("admin", op, "describe-entity", "invoke")
            interp.ev("admin", op, "describe-entity", "info",
                      result={"unrecognised": f"the {side}'s bytes are not AMQP framing ({error}); relayed raw from here on"})
        except Exception:
            pass

    async def _describe(self, path: str) -> None:
        if not self.rec.needs_description(path):
            return
        loop = asyncio.get_running_loop()
        try:
            found = await asyncio.wait_for(loop.run_in_executor(None, self.describer, path), 30)
        except Exception as error:
            found = None
            self.say(f"describing {path!r} failed: {error}")
        try:
            self.rec.described(path, found)
        except Exception as error:
            self._record_failure("describe", error, None, None)
