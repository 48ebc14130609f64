"""The reference namespace behind an AMQP 1.0 listener, for the real azure-servicebus SDK.

One thread runs everything: a ``selectors`` loop drives one proton engine (transport,
connection, collector) per client connection, and every model call happens on that
thread, so the model needs no lock. Incoming bytes pass through ``wire.FrameScanner``
first, which records each transfer's message format (proton's Python API hides it):
a transfer in format ``0x80013700`` is a batch, whatever its content looks like.

The model runs on wall-clock milliseconds since the server started (``WallClock``);
times on the wire are epoch milliseconds. Receivers waiting with credit are served
again whenever their entity changes, and at the next instant time alone changes it
(a lock expiring, a scheduled message falling due): ``_next_timer``.

Locks belong to AMQP connections: an abrupt disconnect (no CLOSE frame) loses every lock
the connection held (SETTLE-LOCK-009); a clean close keeps them until they expire, as
the in-process reference target does.

Under attack (SECURITY.md): authorization is a property of the link (``sb_role``: granted
at attach under a token, checked again for every transfer and management request and every
second against the token's expiry, ``_admit`` / ``_tick``); every message passes the door
(``_check_storable``) before it is stored; each connection's work runs in its own fault
boundary (``_guard``); and every resource is bounded by ``Limits`` (sizes, output, time,
connections, links, tokens, credit).
"""

from __future__ import annotations

import errno
import logging
import os
import selectors
import socket
import time
import uuid
from collections import defaultdict
from typing import Any, Callable
from urllib.parse import urlparse

from cproton import bytes2pybytes
from cproton_ffi import lib as _lib
from proton import (
    Array,
    Collector,
    Condition,
    Connection,
    Data,
    Delivery,
    Described,
    Endpoint,
    Event,
    Link,
    Message,
    SASL,
    Terminus,
    Transport,
    symbol,
    timestamp,
    ulong,
)
from proton import UNDESCRIBED
from proton import int32

from reference import NEVER, PEEK_LOCK, RECEIVE_AND_DELETE, ErrorCode, Namespace, ServiceBusError
from reference import Message as ModelMessage
from reference.message import Delivery as ModelDelivery
from reference.message import State, StoredMessage
from reference.entity import Topic
from reference.partitioning import PartitionedTopic

from ..amqp import codec
from . import coordinator
from .config import Config
from .limits import Limits, Refused, check_message, plain
from .rules import rule_operation
from .sas import TokenError, check_grant, check_token, normalise
from .wire import BATCH_FORMAT, FrameScanner, WireError, data_sections, skip

log = logging.getLogger("sbconform.serve")

#: the one mapping of errors, in sbconform/amqp/codec.py
CONDITIONS = codec.CONDITIONS
STATUS = codec.STATUS

A = symbol
#: update-disposition's disposition-status -> the model's settlement
DISPOSITIONS = {"completed": "complete", "abandoned": "abandon", "defered": "defer", "deferred": "defer", "suspended": "dead_letter"}
X_SEQ = A("x-opt-sequence-number")
X_ENQ = A("x-opt-enqueued-time")
X_LOCKED = A("x-opt-locked-until")
X_PKEY = A("x-opt-partition-key")
X_SCHED = A("x-opt-scheduled-enqueue-time")
X_STATE = A("x-opt-message-state")
X_DLSOURCE = A("x-opt-deadletter-source")
SESSION_FILTER = A("com.microsoft:session-filter")
LOCKED_UNTIL_UTC = A("com.microsoft:locked-until-utc")
ATTACH_TIMEOUT = A("com.microsoft:timeout")
RECEIVER_NAME = A("com.microsoft:receiver-name")
TRACKING_ID = A("com.microsoft:tracking-id")
ENTITY_TYPE = A("com.microsoft:entity-type")
#: .NET's MessagingEntityType: Queue 0, Topic 1, Subscriber 2
ENTITY_TYPES = {"queue": 0, "topic": 1, "subscription": 2}
#: how long a next-available-session attach waits when the client names no timeout: the
#: service's default operation timeout (the Python SDK itself waits 65 s for the ATTACH)
SESSION_WAIT_MS = 60_000
DOTNET_EPOCH_TICKS = 621_355_968_000_000_000

TRACKING = A("com.microsoft:tracking-id")


class WallClock:
    """The model's clock on a server: milliseconds since the server started, plus whatever the
    ``$sbconform`` node was asked to move it forward (``shift``: virtual time on a real endpoint,
    so a test waits for a lock, a TTL or a schedule without sleeping)."""

    __slots__ = ("start", "epoch_ms", "offset")

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.epoch_ms = int(time.time() * 1000)
        self.offset = 0

    @property
    def now(self) -> int:
        return int((time.monotonic() - self.start) * 1000) + self.offset

    def advance(self, duration: int) -> int:  # the model never advances a wall clock
        return self.now

    def advance_to(self, instant: int) -> int:
        return self.now

    def shift(self, duration: int) -> int:
        """Move the clock ``duration`` ms forward at once (never back)."""
        self.offset += max(0, int(duration))
        return self.now

    def monotonic_of(self, instant: int) -> float:
        """The ``time.monotonic()`` value at which the clock reads ``instant``."""
        return self.start + (instant - self.offset) / 1000


def lock_uuid(token: int) -> uuid.UUID:
    return uuid.UUID(int=token)


def _entity_path(address: str | None) -> str:
    """'amqps://localhost:5672/q1/$DeadLetterQueue' -> 'q1/$DeadLetterQueue'."""
    if not address:
        return ""
    if "://" in address:
        return urlparse(address).path.lstrip("/")
    return address.lstrip("/")


def _values(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, Array):
        return list(value.elements)
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _tag(delivery: Delivery) -> bytes:
    return bytes2pybytes(_lib.pn_delivery_tag(delivery._impl))


class ConnState:
    """What the server knows about one client connection."""

    def __init__(self, sock: socket.socket, model_conn: int, limits: Limits = Limits()) -> None:
        self.sock = sock
        self.scanner = FrameScanner()
        self.transport = Transport(Transport.SERVER)
        self.transport.max_frame_size = 1024 * 1024
        # advertised in OPEN (proton says half); enforced by the server (_tick), which checks
        # before proton would (proton's deadline starts at a tick after the last input)
        self.transport.idle_timeout = limits.idle_timeout
        self.last_input = time.monotonic()
        sasl = self.transport.sasl()
        sasl.allow_insecure_mechs = True
        sasl.allowed_mechs("ANONYMOUS PLAIN")
        self.connection = Connection()
        self.collector = Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self.model_conn = model_conn
        self.audiences: dict[str, int] = {}  # entity path (lower case) -> expiry (epoch s) of the token for it
        self.granted: set[Link] = set()  # entity links opened on a grant (checked again at every tick)
        self.open_deadline = time.monotonic() + limits.open_timeout
        self.opened = False  # the client's OPEN arrived
        self.closing = False  # we closed the connection: its input is read and dropped
        self.close_by = 0.0  # when closing: the socket is closed at this instant at the latest
        self.throttled = False  # its output is over the cap: neither read from nor served
        self.registered = True
        self.unpushed = memoryview(b"")  # bytes read that proton could not take yet
        self.links = 0  # links the client has open
        self.sessions: set[Any] = set()  # its sessions (for the bytes queued in them)
        self.fed: set[Link] = set()  # links that received transfers in this read (credit top-up)
        self.reply_links: dict[str, Link] = {}  # node address ($cbs, q/$management) -> our sender
        self.receivers: list["Receiving"] = []
        self.pending_sessions: list["Receiving"] = []
        self.events = selectors.EVENT_READ  # what the selector watches for on its socket
        self.closed = False
        self.clean_close = False
        self.tag = 0

    def queued_output(self) -> int:
        """Bytes of deliveries queued in its sessions, not yet framed for the transport."""
        return sum(session.outgoing_bytes for session in self.sessions)

    def buffered(self) -> int:
        """Output held for this peer: framed bytes not yet written, and queued deliveries."""
        return max(self.transport.pending(), 0) + self.queued_output()


class Receiving:
    """A client's receiver: our sending link on an entity."""

    __slots__ = ("link", "conn", "path", "key", "mode", "session_id", "wants_session", "deadline", "address")

    def __init__(self, link: Link, conn: ConnState, path: str, mode: str) -> None:
        self.link = link
        self.conn = conn
        self.path = path
        self.key = path.split("/", 1)[0].lower()
        self.mode = mode
        self.session_id: str | None = None
        self.wants_session = False
        self.deadline = 0.0
        self.address = ""


class Server:
    """``Server(config).start()`` binds and returns the port; ``run()`` serves until ``stop()``."""

    def __init__(self, config: Config | None = None, host: str = "127.0.0.1", port: int = 5672, namespace: Namespace | None = None,
                 limits: Limits | None = None) -> None:
        self.config = config or Config()
        self.limits = limits or Limits()
        self._accept_paused_until = 0.0  # out of file descriptors: the listener rests until then
        self._warned: set[str] = set()  # conditions logged once per episode
        self.clock = WallClock()
        self.namespace = namespace if namespace is not None else self.config.build()
        self.namespace.clock = self.clock  # type: ignore[assignment]
        self.keys = dict(self.config.keys)
        self.host = host
        self.port = port
        self.selector = selectors.DefaultSelector()
        self.listener: socket.socket | None = None
        self.conns: dict[int, ConnState] = {}  # fileno -> state
        self.waiting: dict[str, set[Receiving]] = defaultdict(set)  # entity key -> receivers with credit
        self.dirty: set[str] = set()
        self._stop = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._next_tick = 0.0
        self.calls: list[Callable[[], None]] = []  # run on the loop thread (thread-safe hand-over)

    # ----------------------------------------------------------------- loop
    def start(self) -> int:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(512)
        sock.setblocking(False)
        self.listener = sock
        self.port = sock.getsockname()[1]
        self.selector.register(sock, selectors.EVENT_READ, None)
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        return self.port

    def stop(self) -> None:
        self._stop = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop thread (for in-process control)."""
        self.calls.append(fn)
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def run(self) -> None:
        if self.listener is None:
            self.start()
        try:
            while not self._stop:
                timeout = self._next_timer()
                for key, mask in self.selector.select(timeout):
                    if key.data is None:
                        self._accept()
                    elif key.data == "wake":
                        try:
                            self._wake_r.recv(4096)
                        except OSError:
                            pass
                    else:
                        self._guard(key.data, self._io, key.data, mask)
                while self.calls:
                    call = self.calls.pop(0)
                    try:
                        call()
                    except Exception:  # an in-process caller's mistake is logged, never fatal
                        log.exception("error in a call handed to the server loop")
                self._on_time()
                self._serve_dirty()
                self._flush_all()
        finally:
            for state in list(self.conns.values()):
                self._close_socket(state)
            if self.listener is not None:
                self._listen(False)
                self.listener.close()

    # ---------------------------------------------------------- fault boundary
    def _guard(self, state: ConnState, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one connection's work inside its own fault boundary: whatever fails closes
        that connection (amqp:internal-error, with the info map the SDKs read), never the
        process. Its locks are lost as on any dropped connection."""
        try:
            return fn(*args)
        except Exception:
            log.exception("connection %s failed; closing it", state.model_conn)
            self._fail(state)
            return None

    def _fail(self, state: ConnState) -> None:
        try:
            self._shut(state, "amqp:internal-error", "The server failed to handle this connection's work; the connection is closed.")
            self._flush(state)
        except Exception:
            pass
        try:
            self._lost(state)
        except Exception:
            self._close_socket(state)

    def _shut(self, state: ConnState, condition: str, text: str) -> None:
        """Close the connection with ``condition``; its further input is read and dropped."""
        if state.closing or state.closed:
            return
        state.closing = True
        state.close_by = time.monotonic() + 2.0
        try:
            state.connection.condition = _error(condition, text)
            if state.connection.state & Endpoint.LOCAL_UNINIT:
                state.connection.open()
            state.connection.close()
        except Exception:
            pass

    def _warn_once(self, what: str, text: str, *args: Any) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning(text, *args)

    # ------------------------------------------------------------ accepting
    def _listen(self, on: bool) -> None:
        try:
            if on:
                self.selector.register(self.listener, selectors.EVENT_READ, None)  # type: ignore[arg-type]
            else:
                self.selector.unregister(self.listener)  # type: ignore[arg-type]
        except (KeyError, ValueError):
            pass

    def _accept(self) -> None:
        for _ in range(64):
            try:
                sock, _addr = self.listener.accept()  # type: ignore[union-attr]
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                if error.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # back off: the listener rests (no busy loop), one line per episode
                    self._warn_once("fds", "out of file descriptors (%s): not accepting connections for now; %d open",
                                    error.strerror, len(self.conns))
                    self._listen(False)
                    self._accept_paused_until = time.monotonic() + self.limits.accept_backoff
                return
            if "fds" in self._warned:
                self._warned.discard("fds")
                log.warning("accepting connections again")
            if len(self.conns) >= self.limits.max_connections:
                self._warn_once("limit", "connection limit reached (%d, --max-connections): refusing new connections", self.limits.max_connections)
                sock.close()
                continue
            self._warned.discard("limit")
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                state = ConnState(sock, self.namespace.connect(), self.limits)
            except Exception:
                log.exception("cannot set up an accepted connection")
                sock.close()
                continue
            self.conns[sock.fileno()] = state
            log.info("connection %d from %s:%s", state.model_conn, *_addr[:2])
            self.selector.register(sock, selectors.EVENT_READ, state)

    def _io(self, state: ConnState, mask: int) -> None:
        if mask & selectors.EVENT_READ and not state.throttled and not state.unpushed:
            try:
                data = state.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                data = b""
            if data == b"":
                self._lost(state)
                return
            state.last_input = time.monotonic()
            if data and not state.closing:  # once we close, the peer's input is dropped
                state.scanner.feed(data)
                state.unpushed = memoryview(data)
                self._push(state)
                if state.closed:
                    return
        self._events(state)
        self._flush(state)

    def _push(self, state: ConnState) -> None:
        """Hand the bytes read to proton, as much as it takes now. What it cannot take yet
        is kept (one read at most: the socket is not read again until it is all in)."""
        t = state.transport
        view = state.unpushed
        while view and not state.closing:
            capacity = t.capacity()
            if capacity < 0:
                view = memoryview(b"")  # the transport gave up on this input (framing error): it says why, then closes
                break
            if capacity == 0:
                break
            t.push(bytes(view[:capacity]))
            view = view[capacity:]
            self._events(state)
        state.unpushed = view if view and not state.closing else memoryview(b"")
        if not state.closed:
            self._top_up(state)

    def _flush(self, state: ConnState) -> None:
        if state.closed:
            return
        t = state.transport
        while True:
            pending = t.pending()
            if pending <= 0:
                break
            try:
                sent = state.sock.send(t.peek(pending))
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._lost(state)
                return
            if sent <= 0:
                break
            t.pop(sent)
        if pending < 0 and t.closed:
            self._close_socket(state)
            return
        if state.closing and pending <= 0:
            try:
                state.sock.shutdown(socket.SHUT_WR)  # our CLOSE is out: end of our stream
            except OSError:
                pass
        want_write = pending > 0
        # the output cap: a peer that does not read is neither read from nor served (with
        # nothing framed left, only _serve queues much, and it checks the cap itself)
        buffered = max(pending, 0) + state.queued_output() if want_write or state.throttled else 0
        cap = self.limits.max_output_buffer
        if not state.throttled and buffered > cap:
            state.throttled = True
        elif state.throttled and buffered <= cap // 2:
            state.throttled = False
            self.dirty.update(r.key for r in state.receivers)
        reading = not state.throttled and not state.unpushed  # (unpushed: proton takes it first)
        events = (selectors.EVENT_READ if reading else 0) | (selectors.EVENT_WRITE if want_write else 0)
        if events != state.events:
            self._register(state, events)

    def _register(self, state: ConnState, events: int) -> None:
        try:
            if events == 0:
                if state.registered:
                    self.selector.unregister(state.sock)
                    state.registered = False
            elif state.registered:
                self.selector.modify(state.sock, events, state)
            else:
                self.selector.register(state.sock, events, state)
                state.registered = True
        except (KeyError, ValueError, OSError):
            pass
        state.events = events

    def _flush_all(self) -> None:
        for state in list(self.conns.values()):
            if state.unpushed:
                self._guard(state, self._push, state)
            self._guard(state, self._events, state)
            self._guard(state, self._flush, state)

    def _lost(self, state: ConnState) -> None:
        """The socket is gone. Without a CLOSE first, that is a dropped connection."""
        if state.closed:
            return
        if not state.clean_close:
            try:
                self.namespace.drop_connection(state.model_conn)
            except ServiceBusError:
                pass
            self._mark_all_dirty()
        self._close_socket(state)

    def _close_socket(self, state: ConnState) -> None:
        if state.closed:
            return
        state.closed = True
        log.info("connection %d closed%s", state.model_conn, "" if state.clean_close else " without CLOSE (its locks are lost)")
        self.namespace.close_connection(state.model_conn)
        for r in state.receivers:
            self.waiting[r.key].discard(r)
        state.receivers.clear()
        state.pending_sessions.clear()
        state.granted.clear()
        try:
            self.selector.unregister(state.sock)
        except (KeyError, ValueError):
            pass
        self.conns.pop(state.sock.fileno(), None)
        try:
            state.sock.close()
        except OSError:
            pass
        try:
            state.connection.collect(None)
        except Exception:
            pass

    # ----------------------------------------------------------------- time
    def _next_timer(self) -> float | None:
        if self.calls:
            return 0
        now = time.monotonic()
        deadlines = []
        if any(self.waiting.values()):
            due = self._due_for_waiting()
            if due is not None:
                deadlines.append(self.clock.monotonic_of(due))
        for state in self.conns.values():
            for r in state.pending_sessions:
                deadlines.append(r.deadline)
        if self.conns:
            deadlines.append(now + 1.0)  # transports' idle-timeout ticks, open deadlines, token expiries
        if self._accept_paused_until:
            deadlines.append(self._accept_paused_until)
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - now)

    def _due_for_waiting(self) -> int | None:
        best = None
        for key, receivers in self.waiting.items():
            if not receivers:
                continue
            entity = self.namespace.entities.get(key)
            if entity is None:
                continue
            due = entity.next_due()
            if due is not None and (best is None or due < best):
                best = due
        return best

    def _on_time(self) -> None:
        now_ms = self.clock.now
        if any(self.waiting.values()):
            for key, receivers in self.waiting.items():
                if not receivers:
                    continue
                entity = self.namespace.entities.get(key)
                if entity is None:
                    continue
                due = entity.next_due()
                if due is not None and due <= now_ms:
                    entity.tick(now_ms)
                    for store in entity.stores:
                        store.tick(now_ms)
                        store.dead_letter_queue.tick(now_ms)
                    self.dirty.add(key)
        mono = time.monotonic()
        for state in list(self.conns.values()):
            if state.pending_sessions:
                self._guard(state, self._retry_sessions, state, mono)
        if self._accept_paused_until and mono >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self._listen(True)  # try again (a failed accept pauses it anew, without a new line)
        if mono >= self._next_tick:
            self._next_tick = mono + 1.0
            now_s = time.time()
            for state in list(self.conns.values()):
                self._guard(state, self._tick, state, mono, now_s)

    def _tick(self, state: ConnState, mono: float, now_s: float) -> None:
        """Once a second per connection: deadlines, the idle timeout, token expiries."""
        if state.closing:
            if mono >= state.close_by:
                self._lost(state)
            return
        if not state.opened and mono >= state.open_deadline:
            log.info("connection %s: no OPEN within %.1f s (--open-timeout): closed", state.model_conn, self.limits.open_timeout)
            self._lost(state)
            return
        if mono - state.last_input >= self.limits.idle_timeout:
            # ours, not proton's (whose CLOSE would lack the info map the SDKs read)
            self._shut(state, "amqp:resource-limit-exceeded",
                       f"No frame for {self.limits.idle_timeout:g} s (--idle-timeout); the connection is closed.")
            self._flush(state)
            return
        state.transport.tick(mono)  # heartbeats (empty frames) the client asked for
        for link in list(state.granted):
            if link.state & Endpoint.LOCAL_CLOSED:  # (a session receiver still waiting is LOCAL_UNINIT: checked too)
                state.granted.discard(link)
                continue
            try:
                self._authorize(state, link.sb_path, now_s)
            except ServiceBusError as error:  # the token expired: Service Bus detaches the link
                self._detach_with(state, link, _condition(error))
        self._flush(state)

    def _mark_all_dirty(self) -> None:
        self.dirty.update(k for k, v in self.waiting.items() if v)

    def _serve_dirty(self) -> None:
        while self.dirty:
            key = self.dirty.pop()
            for r in list(self.waiting.get(key, ())):
                self._guard(r.conn, self._serve, r)
        for state in list(self.conns.values()):
            if state.pending_sessions:
                self._guard(state, self._retry_sessions, state, time.monotonic())

    # --------------------------------------------------------------- events
    def _events(self, state: ConnState) -> None:
        collector = state.collector
        while True:
            event = collector.peek()
            if event is None:
                return
            if state.closing and event.type != Event.TRANSPORT_CLOSED:
                collector.pop()  # we closed this connection: what it still says is not acted on
                continue
            try:
                self._event(state, event)
            except Exception:  # never let one client's input stop the server
                log.exception("error handling %s", event.type)
                self._shut(state, "amqp:internal-error", "The server failed to handle a frame; the connection is closed.")
            collector.pop()
            if state.closed:
                return

    def _event(self, state: ConnState, event: Event) -> None:
        kind = event.type
        if kind == Event.DELIVERY:
            delivery = event.delivery
            link = delivery.link
            if link.is_receiver:
                self._incoming(state, link, delivery)
            elif delivery.updated:
                self._settled_by_client(state, link, delivery)
        elif kind == Event.LINK_FLOW:
            link = event.link
            r = getattr(link, "receiving", None)
            if r is not None:
                self._serve(r)
        elif kind == Event.LINK_REMOTE_OPEN:
            state.links += 1
            if state.links > self.limits.max_links:
                self._shut(state, "amqp:resource-limit-exceeded",
                           f"More than {self.limits.max_links} links open on one connection (--max-links).")
                return
            self._attach(state, event.link)
        elif kind == Event.LINK_REMOTE_CLOSE:
            state.links -= 1
            self._detach(state, event.link)
            self._release(state, event.link)
        elif kind == Event.SESSION_REMOTE_OPEN:
            session = event.session
            if session.state & Endpoint.LOCAL_UNINIT:
                session.open()
                state.sessions.add(session)
        elif kind == Event.SESSION_REMOTE_CLOSE:
            self._end_session(state, event.session)
        elif kind == Event.CONNECTION_REMOTE_OPEN:
            c = event.connection
            state.opened = True
            if c.state & Endpoint.LOCAL_UNINIT:
                c.container = "sbconform"
                c.open()
        elif kind == Event.CONNECTION_REMOTE_CLOSE:
            state.clean_close = True
            c = event.connection
            if c.state & Endpoint.LOCAL_ACTIVE:
                c.close()
        elif kind == Event.TRANSPORT_CLOSED:
            self._flush(state)
            self._lost(state)

    # ---------------------------------------------------------------- links
    def _attach(self, state: ConnState, link: Link) -> None:
        if not link.state & Endpoint.LOCAL_UNINIT:
            return
        remote_source, remote_target = link.remote_source, link.remote_target
        link.source.copy(remote_source)
        link.target.copy(remote_target)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        if link.is_receiver and coordinator.is_coordinator(link):  # a transaction controller (TXN-*)
            if not any(expiry > time.time() for expiry in state.audiences.values()):
                self._refuse(link, ServiceBusError(ErrorCode.UNAUTHORIZED, "Put a token on $cbs before declaring transactions."))
                return
            link.sb_role = "node"  # each declare and discharge stands on its own
            coordinator.open_coordinator(link)
            self._grant(link, self.limits.link_credit)
            return
        if link.is_receiver:  # the client sends: to an entity, $cbs, or a management node
            address = _entity_path(remote_target.address)
            if address == "$cbs" or address.endswith("$management") or address == "$sbconform":
                link.sb_role = "node"  # requests: each one is authorized on its own
                link.open()
                self._grant(link, self.limits.link_credit)
                return
            try:
                self._authorize(state, address)
                self.namespace.sending_entity(address)
                destination = coordinator.destination_of(link)
                if destination is not None:  # send via (TXN-VIA-001): both entities are authorised
                    self._authorize(state, _entity_path(destination))
                    self.namespace.sending_entity(_entity_path(destination))
                    link.properties = {coordinator.TRANSFER_DESTINATION: destination}
            except ServiceBusError as error:
                self._refuse(link, error)
                return
            self._link_properties(link, address)
            link.sb_role, link.sb_path = "entity", address
            state.granted.add(link)
            link.open()
            self._grant(link, self.limits.link_credit)
            return
        # the client receives
        source_address = remote_source.address
        if remote_source.dynamic:
            source_address = f"$reply/{uuid.uuid4()}"
            link.source.address = source_address
            link.source.dynamic = False
        address = _entity_path(source_address)
        if address == "$cbs" or address.endswith("$management") or address == "$sbconform" or address.startswith("$reply/"):
            if address.startswith("$reply/"):
                state.reply_links[source_address] = link
            target_address = remote_target.address
            state.reply_links[address] = link
            if target_address:
                state.reply_links[target_address] = link
            link.open()
            return
        mode = RECEIVE_AND_DELETE if link.remote_snd_settle_mode == Link.SND_SETTLED else PEEK_LOCK
        try:
            self._authorize(state, address)
            store = self.namespace.receiving_store(address)
        except ServiceBusError as error:
            self._refuse(link, error)
            return
        r = Receiving(link, state, address, mode)
        r.address = source_address or ""
        link.receiving = r
        self._link_properties(link, address)
        link.sb_role, link.sb_path = "entity", address
        state.granted.add(link)
        wants, session_id = self._session_filter(remote_source)
        if wants or store.requires_session and wants:
            r.wants_session = True
            # The client's operation timeout, else the service's default (spec/wire.md 4)
            timeout_ms = SESSION_WAIT_MS
            props = link.remote_properties or {}
            if props.get(ATTACH_TIMEOUT) is not None:
                timeout_ms = int(props[ATTACH_TIMEOUT])
            r.deadline = time.monotonic() + max(timeout_ms, 0) / 1000
            if self._try_session(r, session_id, final=session_id is not None or timeout_ms <= 0):
                return
            r.session_id = None
            state.pending_sessions.append(r)
            r.link.pending_session_id = session_id  # type: ignore[attr-defined]
            return
        link.open()
        state.receivers.append(r)

    @staticmethod
    def _session_filter(source: Terminus) -> tuple[bool, str | None]:
        data = source.filter
        try:
            data.rewind()
            if not data.next():
                return False, None
            filters = data.get_object()
        except Exception:
            return False, None
        if not isinstance(filters, dict):
            return False, None
        for key, value in filters.items():
            if str(key) == SESSION_FILTER:
                if isinstance(value, Described):
                    value = value.value
                return True, (None if value is None else str(value))
        return False, None

    def _try_session(self, r: Receiving, session_id: str | None, final: bool) -> bool:
        """Accept the session now; True if the attach was answered (accepted or refused)."""
        ns = self.namespace
        try:
            sid, locked_until = ns.accept_session(r.conn.model_conn, r.path, session_id)
        except ServiceBusError as error:
            if error.code is ErrorCode.TIMEOUT and not final:
                return False
            self._refuse(r.link, error)
            return True
        r.session_id = sid
        link = r.link
        link.source.filter.clear()
        link.source.filter.put_map()
        link.source.filter.enter()
        link.source.filter.put_symbol(SESSION_FILTER)
        link.source.filter.put_string(sid)
        link.source.filter.exit()
        link.properties = {**(link.properties or {}), LOCKED_UNTIL_UTC: (self.clock.epoch_ms + locked_until) * 10_000 + DOTNET_EPOCH_TICKS}
        link.open()
        r.conn.receivers.append(r)
        return True

    def _retry_sessions(self, state: ConnState, now: float) -> None:
        still = []
        for r in state.pending_sessions:
            sid = getattr(r.link, "pending_session_id", None)
            if not self._try_session(r, sid, final=now >= r.deadline):
                still.append(r)
        state.pending_sessions = still
        self._flush(state)

    def _link_properties(self, link: Link, path: str) -> None:
        """What Service Bus says on an entity link's ATTACH (spec/wire.md 4): the entity's
        max-message-size (256 KB Standard, the entity's own up to 100 MB on Premium), a
        tracking id, and the entity type."""
        entity = self.namespace.entities.get(path.split("/", 1)[0].lower())
        if entity is None:
            return
        link.max_message_size = entity.description.max_message_size
        kind = "subscription" if "/subscriptions/" in path.lower() else entity.kind
        link.properties = {
            TRACKING_ID: str(uuid.uuid4()),
            ENTITY_TYPE: int32(ENTITY_TYPES.get(kind, 0)),
        }

    def _refuse(self, link: Link, error: ServiceBusError) -> None:
        """ATTACH with a null terminus, then DETACH with the error. Nothing is ever granted
        on it: a transfer on it closes the connection (``_incoming``)."""
        link.sb_role = "refused"
        if link.is_sender:
            link.source.type = Terminus.UNSPECIFIED  # encoded as a null source
        else:
            link.target.type = Terminus.UNSPECIFIED
        link.open()
        link.condition = _condition(error)
        link.close()

    def _authorize(self, state: ConnState, path: str, now: float | None = None) -> None:
        """A token covering ``path`` and not expired, or UNAUTHORIZED. Called at attach, for
        every transfer and management request, and every second for open links."""
        want = path.lower()
        now = time.time() if now is None else now
        expired = False
        parts = want.split("/")
        for audience in ["", *("/".join(parts[:i]) for i in range(1, len(parts) + 1))]:  # the path and its parents
            expiry = state.audiences.get(audience)
            if expiry is not None:
                if expiry > now:
                    return
                expired = True
        if expired:
            raise ServiceBusError(ErrorCode.UNAUTHORIZED, f"The token for '{path}' has expired: put a new one on $cbs.")
        raise ServiceBusError(ErrorCode.UNAUTHORIZED, f"Unauthorized access to '{path}': put a token for it on $cbs first.")

    def _grant(self, link: Link, credit: int) -> None:
        """Issue ``credit`` more; ``sb_granted`` counts every credit ever issued on the link."""
        link.sb_granted = getattr(link, "sb_granted", 0) + credit
        link.flow(credit)

    def _top_up(self, state: ConnState) -> None:
        """After a read: give the links that received transfers their credit back (below half of it)."""
        limit = self.limits.link_credit
        for link in state.fed:
            if link.state & Endpoint.LOCAL_ACTIVE and getattr(link, "sb_role", None) in ("node", "entity"):
                outstanding = link.sb_granted - getattr(link, "sb_received", 0)
                if outstanding < limit // 2:
                    self._grant(link, limit - outstanding)
        state.fed.clear()

    def _detach_with(self, state: ConnState, link: Link, condition: Condition) -> None:
        """Detach one of our links with ``error``; transfers still in flight on it are dropped."""
        link.sb_role = "detached"
        state.granted.discard(link)
        r = getattr(link, "receiving", None)
        if r is not None:
            self._detach(state, link, close=False)
        if r in state.pending_sessions:
            state.pending_sessions.remove(r)
        if link.state & Endpoint.LOCAL_UNINIT:
            link.open()
        if not link.state & Endpoint.LOCAL_CLOSED:
            link.condition = condition
            link.close()

    def _detach(self, state: ConnState, link: Link, close: bool = True) -> None:
        state.granted.discard(link)
        r = getattr(link, "receiving", None)
        if r is not None:
            self.waiting[r.key].discard(r)
            if r in state.receivers:
                state.receivers.remove(r)
            if r.session_id is not None:
                try:
                    self.namespace.release_session(state.model_conn, r.path, r.session_id)
                except ServiceBusError:
                    pass
                self.dirty.add(r.key)
            link.receiving = None
        if close and link.state & Endpoint.LOCAL_ACTIVE:
            link.close()

    def _end_session(self, state: ConnState, session: Any) -> None:
        """The client ended a session (its links with it): forget them, then free it (else
        proton keeps it for the whole connection, and BEGIN/END loops grew without bound)."""
        for r in list(state.receivers) + list(state.pending_sessions):
            if r.link.session == session:
                self._detach(state, r.link)
                if r in state.pending_sessions:
                    state.pending_sessions.remove(r)
        for address, link in list(state.reply_links.items()):
            if link.session == session:
                del state.reply_links[address]
        for link in list(state.granted) + list(state.fed):
            if link.session == session:
                state.granted.discard(link)
                state.fed.discard(link)
        session.close()
        state.sessions.discard(session)
        session.free()

    @staticmethod
    def _release(state: ConnState, link: Link) -> None:
        """Free a link closed on both sides (proton keeps it otherwise, for the whole
        connection: attach and detach in a loop would grow without bound)."""
        if not (link.state & Endpoint.LOCAL_CLOSED and link.state & Endpoint.REMOTE_CLOSED):
            return
        for address, reply in list(state.reply_links.items()):
            if reply == link:
                del state.reply_links[address]
        if any(r.link == link for r in state.pending_sessions):
            return
        link.free()

    # -------------------------------------------------------------- receive
    def _serve(self, r: Receiving) -> None:
        link = r.link
        if r.conn.closed or not link.state & Endpoint.LOCAL_ACTIVE:
            self.waiting[r.key].discard(r)
            return
        credit = link.credit
        if credit <= 0:
            self.waiting[r.key].discard(r)
            return
        if r.conn.throttled or r.conn.closing:
            self.waiting[r.key].add(r)  # served again once the peer reads (``_flush``)
            return
        settled = r.mode == RECEIVE_AND_DELETE
        cap = self.limits.max_output_buffer
        found: list = []
        asked = 0
        while asked < credit:  # in slices: a peer that does not read gets the cap, one slice and one frame at most
            if r.conn.buffered() > cap:
                r.conn.throttled = True
                self.waiting[r.key].add(r)
                return
            want = min(credit - asked, 16)
            try:
                part = self.namespace.receive(r.conn.model_conn, r.path, want, r.mode, r.session_id)
            except ServiceBusError as error:
                self.waiting[r.key].discard(r)
                link.condition = _condition(error)
                link.close()
                return
            for d in part:
                token = d.lock_token
                tag = lock_uuid(token).bytes_le if token is not None else self._next_tag(r.conn)
                dlv = link.delivery(tag)
                link.send(self._encode(d))
                link.advance()
                if settled:
                    dlv.settle()
                else:
                    dlv.token = token  # type: ignore[attr-defined]
            found += part
            asked += want
            if len(part) < want:
                break
        if len(found) < credit:
            if link.drain_mode:
                link.drained()
                self.waiting[r.key].discard(r)
            else:
                self.waiting[r.key].add(r)
        else:
            self.waiting[r.key].discard(r)

    @staticmethod
    def _next_tag(state: ConnState) -> bytes:
        state.tag += 1
        return state.tag.to_bytes(8, "big")

    def _settled_by_client(self, state: ConnState, link: Link, dlv: Delivery) -> None:
        token = getattr(dlv, "token", None)
        r = getattr(link, "receiving", None)
        if token is None or r is None:
            if not dlv.settled:
                dlv.settle()
            return
        txn = coordinator.transactional(dlv)
        if txn is not None:  # TXN-VIS-002: enlisted, applied at commit; the lock stays meanwhile
            try:
                kind, reason, description = coordinator.settlement_of(txn[1])
                self.namespace.transactions.settle(state.model_conn, txn[0], kind, r.path, token, reason, description)
            except ServiceBusError as error:
                dlv.local.condition = _condition(error)
                dlv.update(Delivery.REJECTED)
                dlv.settle()
                return
            dlv.token = None  # type: ignore[attr-defined]
            coordinator.answer_transactional(dlv, txn[0])
            return
        outcome = dlv.remote_state
        remote = dlv.remote
        ns = self.namespace
        reply = outcome
        error: ServiceBusError | None = None
        try:
            if outcome == Delivery.ACCEPTED:
                ns.complete(state.model_conn, r.path, token)
            elif outcome == Delivery.RELEASED:
                ns.release(state.model_conn, r.path, token)
            elif outcome == Delivery.MODIFIED:
                if remote.undeliverable:
                    ns.defer(state.model_conn, r.path, token)
                else:
                    ns.abandon(state.model_conn, r.path, token)
            elif outcome == Delivery.REJECTED:
                cond = remote.condition
                info = (cond.info if cond is not None else None) or {}
                reason = info.get("DeadLetterReason", info.get(A("DeadLetterReason")))
                desc = info.get("DeadLetterErrorDescription", info.get(A("DeadLetterErrorDescription")))
                ns.dead_letter(state.model_conn, r.path, token, reason, desc)
            else:
                return  # not a terminal outcome yet
        except ServiceBusError as e:
            error = e
        dlv.token = None  # type: ignore[attr-defined]
        self.dirty.add(r.key)
        if dlv.settled:
            return  # the client settled first (older SDKs): it expects no answer
        if error is not None:
            dlv.local.condition = _condition(error)
            dlv.update(Delivery.REJECTED)
        elif reply == Delivery.REJECTED:
            dlv.update(Delivery.REJECTED)
        elif reply == Delivery.MODIFIED:
            dlv.local.failed = remote.failed
            dlv.local.undeliverable = remote.undeliverable
            dlv.update(Delivery.MODIFIED)
        else:
            dlv.update(reply)
        dlv.settle()

    def _encode(self, d: Any, lock_token: bool = True) -> bytes:
        return codec.encode(d, self.clock.epoch_ms, lock_token)

    # ---------------------------------------------------------------- send
    def _admit(self, state: ConnState, link: Link, dlv: Delivery) -> bool:
        """The door for every transfer: on a link we granted, within its credit and the
        delivery size limit, under a token still valid. False: drop it (already answered)."""
        role = getattr(link, "sb_role", None)
        if not getattr(dlv, "sb_seen", False):
            dlv.sb_seen = True
            if role in (None, "refused"):  # refused or never granted: store nothing, close
                self._shut(state, "amqp:unauthorized-access", "A transfer on a link the server refused or never granted.")
                return False
            if role == "detached":
                return self._drop(link, dlv)
            link.sb_received = getattr(link, "sb_received", 0) + 1
            state.fed.add(link)
            if link.sb_received > link.sb_granted:  # AMQP 1.0 part 2, 2.6.7: no transfer without credit
                self._detach_with(state, link, _error(
                    "amqp:link:transfer-limit-exceeded", f"A transfer beyond the {link.sb_granted} credits granted on this link."))
                return self._drop(link, dlv)
        elif role not in ("node", "entity"):
            return self._drop(link, dlv)
        limit = self.limits.max_delivery_size
        if dlv.pending > limit:  # across continuation frames: the connection goes, with its input
            self._shut(state, "amqp:link:message-size-exceeded",
                       f"A delivery over {limit} bytes (--max-delivery-size); the connection is closed.")
            return False
        if dlv.partial:
            return False
        if role == "entity":
            try:
                self._authorize(state, link.sb_path)
            except ServiceBusError as error:  # the token expired since the attach
                self._detach_with(state, link, _condition(error))
                return self._drop(link, dlv)
        return True

    @staticmethod
    def _drop(link: Link, dlv: Delivery) -> bool:
        """Read and forget a transfer arriving on a link we detached."""
        if dlv.pending > 0:
            link.recv(dlv.pending)
        if not dlv.partial:
            link.advance()  # transfers on a link arrive one after the other: this is the current one
            dlv.settle()
        return False

    def _incoming(self, state: ConnState, link: Link, dlv: Delivery) -> None:
        if not self._admit(state, link, dlv):
            return
        if not dlv.readable:
            return
        data = link.recv(dlv.pending)
        fmt = state.scanner.message_format(link.name, _tag(dlv))
        link.advance()
        if coordinator.is_coordinator(link):
            coordinator.control(self.namespace, state.model_conn, data, dlv, _condition)
            self._mark_all_dirty()  # a commit's sends and abandons reach waiting receivers now
            return
        address = _entity_path(link.remote_target.address)
        if address == "$cbs":
            try:
                self._cbs(state, data)
            except Refused as refused:  # not a message at all: the client's mistake, not ours
                dlv.local.condition = _error("amqp:decode-error", str(refused))
                dlv.update(Delivery.REJECTED)
            else:
                dlv.update(Delivery.ACCEPTED)
            dlv.settle()
            return
        if address.endswith("$management") or address == "$sbconform":
            txn = coordinator.transactional(dlv)
            self._management(state, address, data, None if txn is None else txn[0])
            if txn is not None:
                coordinator.answer_transactional(dlv, txn[0])
                return
            dlv.update(Delivery.ACCEPTED)
            dlv.settle()
            return
        error: ServiceBusError | None = None
        txn = coordinator.transactional(dlv)
        destination = coordinator.destination_of(link)
        try:
            if fmt == BATCH_FORMAT:
                messages = [self._decode(part) for part in data_sections(data)]
            else:
                messages = [self._decode(data)]
            for m in messages:
                self._check_storable(m)
            if txn is not None:  # TXN-VIS-001: enlisted, committed at discharge
                via = address if destination is not None else None
                self.namespace.transactions.send(state.model_conn, txn[0], _entity_path(destination) if via else address, messages, via=via)
            else:
                self.namespace.send(state.model_conn, _entity_path(destination) if destination else address, messages)
        except ServiceBusError as e:
            error = e
        except Refused as e:  # the broker could not send it back as it came: refused at the door
            error = ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"The message was refused: {e}")
        except (WireError, Exception) as e:  # undecodable: a rejection, not a crash
            error = ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"The message could not be decoded: {e}")
        key = address.split("/", 1)[0].lower()
        entity = self.namespace.entities.get(key)
        if entity is not None and entity.description.forward_to is not None:
            self._mark_all_dirty()
        self.dirty.add(key)
        if dlv.settled:
            dlv.settle()
            return
        if error is not None:
            dlv.local.condition = _condition(error)
            dlv.update(Delivery.REJECTED)
        elif txn is not None:
            coordinator.answer_transactional(dlv, txn[0])
            return
        else:
            dlv.update(Delivery.ACCEPTED)
        dlv.settle()

    def _check_storable(self, m: ModelMessage) -> None:
        """Refuse (``Refused``) a message this server could not deliver again: its
        application properties outside AMQP's rules, or anything ``_encode`` fails on
        (tried on a stand-in record with the broker's fields set to extreme values)."""
        check_message(m)
        if plain(m):
            return
        now = self.clock.now
        stored = StoredMessage(m, 2**62, now, NEVER, 0, State.SCHEDULED if m.scheduled_enqueue_time is not None else State.ACTIVE, 0, 0)
        stored.lock_token, stored.locked_until = 2**128 - 1, now + 3_600_000
        stored.dead_letter_reason = stored.dead_letter_description = stored.dead_letter_source = "x"
        try:
            self._encode(ModelDelivery(stored))
        except Exception as error:  # noqa: BLE001 - whatever the encoder objects to
            raise Refused(f"it could not be delivered again ({type(error).__name__}: {error})") from None

    def _decode(self, data: bytes) -> ModelMessage:
        return codec.decode(data, self.clock.epoch_ms)

    # ------------------------------------------------------------------ CBS
    def _cbs(self, state: ConnState, data: bytes) -> None:
        request = Message()
        try:
            request.decode(data)
        except Exception as error:  # noqa: BLE001 - whatever proton cannot decode
            raise Refused(f"The put-token request could not be decoded: {error}") from None
        props = request.properties or {}
        status, description = 200, "OK"
        try:
            if props.get("operation") != "put-token":
                raise TokenError(f"unsupported CBS operation {props.get('operation')!r}")
            name = str(props.get("name", ""))
            _audience, expiry = check_grant(str(request.body), name, self.keys)
            path = (urlparse(name).path.strip("/") if "://" in name else name.strip("/")).lower()
            if len(state.audiences) >= self.limits.max_tokens and path not in state.audiences:
                raise TokenError(f"more than {self.limits.max_tokens} tokens on one connection (--max-tokens)")
            state.audiences[path] = max(expiry, state.audiences.get(path, 0))
        except TokenError as error:
            status, description = 401, str(error)
            log.info("connection %d: token refused for %s: %s", state.model_conn, props.get("name", "?"), error)
        self._reply(state, "$cbs", request, {"status-code": status, "status-description": description}, None)

    def _reply(self, state: ConnState, node: str, request: Message, props: dict, body: Any) -> None:
        link = state.reply_links.get(request.reply_to or "") or state.reply_links.get(node)
        if link is None:
            return  # nowhere to answer: the client will time out
        response = Message()
        response.correlation_id = request.id if request.id is not None else request.correlation_id
        response.properties = props
        response.body = body
        dlv = link.delivery(self._next_tag(state))
        link.send(response.encode())
        link.advance()
        dlv.settle()

    # ----------------------------------------------------------- management
    def _management(self, state: ConnState, address: str, data: bytes, txn: int | None = None) -> None:
        """A request to an entity's ``$management`` node or ours; ``txn``: the transaction its
        transfer named (transactional-state), for the operations a transaction may hold."""
        request = Message()
        try:
            request.decode(data)
        except Exception:
            return
        props = request.properties or {}
        operation = str(props.get("operation", ""))
        body = request.body if isinstance(request.body, dict) else {}
        body = {str(k): v for k, v in body.items()}
        path = address[: -len("/$management")] if address.endswith("/$management") else address
        try:
            if address == "$sbconform":
                check_token(str(props.get("authorization", "")), "sb://sbconform/$sbconform", self.keys)
                status, result = 200, self._control(operation, body)
            else:
                # a token for the entity or for its management node ('q/$management', the
                # JavaScript SDK's audience for management requests) authorizes them
                self._authorize(state, address)
                status, result = self._entity_operation(state, path, operation, body, txn)
            reply = {"statusCode": status, "statusDescription": "OK" if status == 200 else "No Content"}
        except ServiceBusError as error:
            result = None
            reply = {
                "statusCode": codec.status_of(error.code),
                "statusDescription": error.text,
                "errorCondition": A(codec.condition_of(error.code)),
            }
        except TokenError as error:
            result = None
            reply = {"statusCode": 401, "statusDescription": str(error), "errorCondition": A("amqp:unauthorized-access")}
        except (KeyError, TypeError, ValueError) as error:
            result = None
            reply = {"statusCode": 400, "statusDescription": f"bad request: {error}", "errorCondition": A("com.microsoft:argument-error")}
        self._reply(state, address, request, reply, result)

    def _entity_operation(self, state: ConnState, path: str, operation: str, body: dict, txn: int | None = None) -> tuple[int, Any]:
        ns = self.namespace
        conn = state.model_conn
        epoch = self.clock.epoch_ms
        sid = body.get("session-id")
        sid = None if sid is None else str(sid)
        key = path.split("/", 1)[0].lower()
        if txn is not None:  # TXN-OPS-001: settlements by lock token and renewals; nothing else
            return self._transactional_operation(conn, txn, path, operation, body)
        if operation == "com.microsoft:renew-lock":
            expirations = [ns.renew_lock(conn, path, u.int) for u in map(_uuid, _values(body["lock-tokens"]))]
            return 200, {"expirations": Array(UNDESCRIBED, Data.TIMESTAMP, *[timestamp(epoch + t) for t in expirations])}
        if operation == "com.microsoft:peek-message":
            start = int(body.get("from-sequence-number", 1))
            count = int(body.get("message-count", 1))
            found = ns.peek(path, start, count, sid)
            if not found:
                return 204, {}
            # one reply holds at most --max-delivery-size of messages (at least one): a peek
            # may return fewer messages than asked, and the client asks again from the next
            messages, total = [], 0
            for d in found:
                encoded = self._encode(d, lock_token=False)
                if messages and total + len(encoded) > self.limits.max_delivery_size:
                    break
                messages.append({"message": encoded})
                total += len(encoded)
            return 200, {"messages": messages}
        if operation == "com.microsoft:schedule-message":
            by_time: dict[int, list[ModelMessage]] = defaultdict(list)
            order = []
            for entry in _values(body["messages"]):
                m = self._decode(bytes(entry["message"]))
                when = m.scheduled_enqueue_time if m.scheduled_enqueue_time is not None else self.clock.now
                by_time[when].append(m.with_changes(scheduled_enqueue_time=None))
                order.append(when)
            numbers: list[int] = []
            for when in dict.fromkeys(order):
                numbers += ns.schedule(conn, path, by_time[when], when)
            self.dirty.add(key)
            return 200, {"sequence-numbers": Array(UNDESCRIBED, Data.LONG, *numbers)}
        if operation == "com.microsoft:cancel-scheduled-message":
            ns.cancel_scheduled(conn, path, [int(n) for n in _values(body["sequence-numbers"])])
            return 200, {}
        if operation == "com.microsoft:receive-by-sequence-number":
            mode = PEEK_LOCK if int(body.get("receiver-settle-mode", 1)) == 1 else RECEIVE_AND_DELETE
            found = ns.receive_deferred(conn, path, [int(n) for n in _values(body["sequence-numbers"])], mode, sid)
            out = []
            for d in found:
                entry = {"message": self._encode(d)}
                if d.lock_token is not None:
                    entry["lock-token"] = lock_uuid(d.lock_token)
                out.append(entry)
            return 200, {"messages": out}
        if operation == "com.microsoft:update-disposition":
            status = str(body["disposition-status"])
            tokens = [u.int for u in map(_uuid, _values(body["lock-tokens"]))]
            for token in tokens:
                if status == "completed":
                    ns.complete(conn, path, token)
                elif status == "abandoned":
                    ns.abandon(conn, path, token)
                elif status in ("defered", "deferred"):
                    ns.defer(conn, path, token)
                elif status == "suspended":
                    ns.dead_letter(conn, path, token, _str(body.get("deadletter-reason")), _str(body.get("deadletter-description")))
                else:
                    raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"unknown disposition-status {status!r}")
            self.dirty.add(key)
            return 200, {}
        if operation == "com.microsoft:renew-session-lock":
            until = ns.renew_session_lock(conn, path, str(sid))
            return 200, {"expiration": timestamp(epoch + until)}
        if operation == "com.microsoft:get-session-state":
            value = ns.get_session_state(conn, path, str(sid))
            return 200, {"session-state": value}
        if operation == "com.microsoft:set-session-state":
            value = body.get("session-state")
            ns.set_session_state(conn, path, str(sid), None if value is None else bytes(value))
            return 200, {}
        ruled = rule_operation(ns, path, operation, body)  # add-rule, remove-rule, enumerate-rules
        if ruled is not None:
            return ruled
        raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"unsupported management operation {operation!r}")

    # -------------------------------------------------------------- control
    def _transactional_operation(self, conn: int, txn: int, path: str, operation: str, body: dict) -> tuple[int, Any]:
        """A management request inside a transaction (its transfer carried transactional-state, as
        the request-response page allows "for operations that support transactions"): a
        disposition by lock token is enlisted (applied at commit, TXN-VIS-002), a lock renewal
        takes effect at once (TXN-OPS-001); any other operation cannot be part of a transaction."""
        ns = self.namespace
        if operation == "com.microsoft:update-disposition":
            kind = DISPOSITIONS.get(str(body["disposition-status"]))
            if kind is None:
                raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"unknown disposition-status {body['disposition-status']!r}")
            tokens = [u.int for u in map(_uuid, _values(body["lock-tokens"]))]
            ns.transactions.settle_all(conn, txn, kind, path, tokens,
                                       _str(body.get("deadletter-reason")), _str(body.get("deadletter-description")))
            return 200, {}
        if operation == "com.microsoft:renew-lock":
            expirations = [ns.transactions.renew_lock(conn, txn, path, u.int) for u in map(_uuid, _values(body["lock-tokens"]))]
            return 200, {"expirations": Array(UNDESCRIBED, Data.TIMESTAMP, *[timestamp(self.clock.epoch_ms + t) for t in expirations])}
        raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"{operation} cannot be part of a transaction (send, complete, abandon, "
                                                           "dead-letter, defer and renew lock can)")

    def _control(self, operation: str, body: dict) -> Any:
        """The ``$sbconform`` node: what the SDK target needs that no SDK call does."""
        ns = self.namespace
        props = {str(k): v for k, v in (body.get("properties") or {}).items()}
        if operation in ("create-queue", "create-topic", "create-subscription", "delete", "update"):
            log.info("entity %s: %s", operation, body.get("path") or "/".join(str(body[k]) for k in ("topic", "name") if k in body))
        if operation == "create-queue":
            return {"path": ns.create_queue(str(body["name"]), **props).path}
        if operation == "create-topic":
            return {"path": ns.create_topic(str(body["name"]), **props).path}
        if operation == "create-subscription":
            return {"path": ns.create_subscription(str(body["topic"]), str(body["name"]), **props).path}
        if operation == "delete":
            ns.delete(str(body["path"]))
            return {}
        if operation == "update":
            ns.update(str(body["path"]), **props)
            self._mark_all_dirty()
            return {}
        if operation == "describe":
            from dataclasses import asdict

            return {k: v for k, v in asdict(ns.describe(str(body["path"]))).items()}
        if operation == "runtime-info":
            return ns.runtime_info(str(body["path"]))
        if operation == "partition":
            path, index = str(body["path"]), int(body["partition"])
            if body.get("available"):
                ns.make_partition_available(path, index)
            else:
                ns.make_partition_unavailable(path, index)
            self._mark_all_dirty()
            return {}
        if operation == "entity-availability":
            path = str(body["path"])
            if body.get("available"):
                ns.make_available(path)
            else:
                ns.make_unavailable(path, ErrorCode(str(body.get("code", "entity-unavailable"))), body.get("transient"))
            self._mark_all_dirty()
            return {}
        if operation == "cpu":
            return {"cpu": time.process_time()}
        if operation == "now":
            return {"now": self.clock.now, "epoch": self.clock.epoch_ms}
        if operation == "advance-time":  # virtual time (capability virtual-time through the SDK target)
            ms = int(body.get("ms", 0))
            if ms < 0 or ms > 10 * 365 * 86_400_000:
                raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"advance-time takes 0 to ten years of milliseconds, not {ms}")
            self.clock.shift(ms)
            for state in self.conns.values():  # a session wait ends as much sooner
                for r in state.pending_sessions:
                    r.deadline -= ms / 1000
            self._mark_all_dirty()
            self._on_time()
            return {"now": self.clock.now}
        if operation == "next-due":  # how long until time alone changes something, or None
            due = ns.next_due()
            return {"in": None if due is None else max(0, due - self.clock.now)}
        raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"unknown control operation {operation!r}")


def _condition(error: ServiceBusError) -> Condition:
    """The AMQP error for a model error. The info map is always present (with the
    tracking id): the SDK reads the error's third field and fails on a shorter list."""
    return Condition(codec.condition_of(error.code), error.text, {TRACKING: error.tracking_id})


def _error(condition: str, text: str) -> Condition:
    """An AMQP error the server raises itself, with the same info map as ``_condition``."""
    return Condition(condition, text, {TRACKING: f"sbconform-{uuid.uuid4()}"})


def _uuid(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, (bytes, bytearray)) and len(value) == 16:
        return uuid.UUID(bytes=bytes(value))
    return uuid.UUID(str(value))


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def serve_in_thread(config: Config | None = None, host: str = "127.0.0.1", port: int = 0, limits: Limits | None = None):
    """Start a server on a background thread; returns (server, thread)."""
    import threading

    server = Server(config, host, port, limits=limits)
    server.start()
    thread = threading.Thread(target=server.run, name="sbconform-serve", daemon=True)
    thread.start()
    return server, thread
