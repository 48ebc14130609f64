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

from reference import NEVER, PEEK_LOCK, RECEIVE_AND_DELETE, ErrorCode, Namespace, ServiceBusError
from reference import Message as ModelMessage
from reference.entity import Topic
from reference.partitioning import PartitionedTopic

from . import coordinator
from .config import Config
from .rules import rule_operation
from .sas import TokenError, check_token, normalise
from .wire import BATCH_FORMAT, FrameScanner, WireError, data_sections, skip

log = logging.getLogger("sbconform.serve")

#: model error code -> AMQP error condition (as the SDK maps them back)
CONDITIONS = {
    ErrorCode.ENTITY_NOT_FOUND: "amqp:not-found",
    ErrorCode.ENTITY_ALREADY_EXISTS: "com.microsoft:entity-already-exists",
    ErrorCode.MESSAGE_LOCK_LOST: "com.microsoft:message-lock-lost",
    ErrorCode.SESSION_LOCK_LOST: "com.microsoft:session-lock-lost",
    ErrorCode.SESSION_CANNOT_BE_LOCKED: "com.microsoft:session-cannot-be-locked",
    ErrorCode.MESSAGE_NOT_FOUND: "com.microsoft:message-not-found",
    ErrorCode.MESSAGE_SIZE_EXCEEDED: "amqp:link:message-size-exceeded",
    ErrorCode.QUOTA_EXCEEDED: "amqp:resource-limit-exceeded",
    ErrorCode.INVALID_OPERATION: "amqp:not-allowed",
    ErrorCode.ARGUMENT_ERROR: "com.microsoft:argument-error",
    ErrorCode.TIMEOUT: "com.microsoft:timeout",
    ErrorCode.SERVER_BUSY: "com.microsoft:server-busy",
    ErrorCode.ENTITY_UNAVAILABLE: "com.microsoft:entity-disabled",
    ErrorCode.UNAUTHORIZED: "amqp:unauthorized-access",
    ErrorCode.CONNECTION_LOST: "amqp:connection:forced",
    ErrorCode.TRANSACTION_UNKNOWN: "amqp:transaction:unknown-id",
    ErrorCode.TRANSACTION_ROLLBACK: "amqp:transaction:rollback",
    ErrorCode.TRANSACTION_TIMEOUT: "amqp:transaction:timeout",
}
#: management status codes per error
STATUS = {
    ErrorCode.ENTITY_NOT_FOUND: 404,
    ErrorCode.MESSAGE_NOT_FOUND: 404,
    ErrorCode.MESSAGE_LOCK_LOST: 410,
    ErrorCode.SESSION_LOCK_LOST: 410,
    ErrorCode.SESSION_CANNOT_BE_LOCKED: 409,
    ErrorCode.ENTITY_ALREADY_EXISTS: 409,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.QUOTA_EXCEEDED: 403,
    ErrorCode.TIMEOUT: 408,
    ErrorCode.SERVER_BUSY: 503,
    ErrorCode.ENTITY_UNAVAILABLE: 503,
}

A = symbol
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
DOTNET_EPOCH_TICKS = 621_355_968_000_000_000

#: credit the server keeps granted to each sending client
SEND_CREDIT = 1000
#: largest transfer accepted at all (the entity's max message size is checked by the model)
HARD_LIMIT = 4 * 1024 * 1024


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

    def __init__(self, sock: socket.socket, model_conn: int) -> None:
        self.sock = sock
        self.scanner = FrameScanner()
        self.transport = Transport(Transport.SERVER)
        self.transport.max_frame_size = 1024 * 1024
        sasl = self.transport.sasl()
        sasl.allow_insecure_mechs = True
        sasl.allowed_mechs("ANONYMOUS PLAIN")
        self.connection = Connection()
        self.collector = Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self.model_conn = model_conn
        self.audiences: set[str] = set()  # entity paths (lower case) the client holds tokens for
        self.reply_links: dict[str, Link] = {}  # node address ($cbs, q/$management) -> our sender
        self.receivers: list["Receiving"] = []
        self.pending_sessions: list["Receiving"] = []
        self.want_write = False
        self.closed = False
        self.clean_close = False
        self.tag = 0


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

    def __init__(self, config: Config | None = None, host: str = "127.0.0.1", port: int = 5672, namespace: Namespace | None = None) -> None:
        self.config = config or Config()
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
                        self._io(key.data, mask)
                while self.calls:
                    self.calls.pop(0)()
                self._on_time()
                self._serve_dirty()
                self._flush_all()
        finally:
            for state in list(self.conns.values()):
                self._close_socket(state)
            if self.listener is not None:
                self.selector.unregister(self.listener)
                self.listener.close()

    def _accept(self) -> None:
        for _ in range(64):
            try:
                sock, _addr = self.listener.accept()  # type: ignore[union-attr]
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                if error.errno in (errno.EMFILE, errno.ENFILE):
                    log.warning("out of file descriptors: %s", error)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            state = ConnState(sock, self.namespace.connect())
            self.conns[sock.fileno()] = state
            self.selector.register(sock, selectors.EVENT_READ, state)

    def _io(self, state: ConnState, mask: int) -> None:
        t = state.transport
        if mask & selectors.EVENT_READ:
            try:
                data = state.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                data = b""
            if data == b"":
                self._lost(state)
                return
            if data:
                state.scanner.feed(data)
                view = memoryview(data)
                while view:
                    capacity = t.capacity()
                    if capacity < 0:
                        break  # the transport gave up on this input (framing error): it says why, then closes
                    if capacity == 0:
                        break
                    t.push(bytes(view[:capacity]))
                    view = view[capacity:]
                    self._events(state)
                if state.closed:
                    return
        self._events(state)
        self._flush(state)

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
        want_write = t.pending() > 0
        if want_write != state.want_write:
            state.want_write = want_write
            self.selector.modify(state.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if want_write else 0), state)
        if pending < 0 and t.closed:
            self._close_socket(state)

    def _flush_all(self) -> None:
        for state in list(self.conns.values()):
            self._events(state)
            self._flush(state)

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
        self.namespace.open_connections.discard(state.model_conn)
        self.namespace.transactions.drop_connection(state.model_conn)  # TXN-CONN-001: undischarged work is gone
        for r in state.receivers:
            self.waiting[r.key].discard(r)
        state.receivers.clear()
        state.pending_sessions.clear()
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
            deadlines.append(now + 1.0)  # transports' idle-timeout ticks
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
                self._retry_sessions(state, mono)
        if mono >= self._next_tick:
            self._next_tick = mono + 1.0
            for state in list(self.conns.values()):
                try:
                    state.transport.tick(mono)
                except Exception:
                    pass

    def _mark_all_dirty(self) -> None:
        self.dirty.update(k for k, v in self.waiting.items() if v)

    def _serve_dirty(self) -> None:
        while self.dirty:
            key = self.dirty.pop()
            for r in list(self.waiting.get(key, ())):
                self._serve(r)
        for state in list(self.conns.values()):
            if state.pending_sessions:
                self._retry_sessions(state, time.monotonic())

    # --------------------------------------------------------------- events
    def _events(self, state: ConnState) -> None:
        collector = state.collector
        while True:
            event = collector.peek()
            if event is None:
                return
            try:
                self._event(state, event)
            except Exception:  # never let one client's input stop the server
                log.exception("error handling %s", event.type)
                try:
                    state.connection.condition = Condition("amqp:internal-error", "the server failed to handle a frame")
                    state.connection.close()
                except Exception:
                    pass
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
            self._attach(state, event.link)
        elif kind == Event.LINK_REMOTE_CLOSE:
            self._detach(state, event.link)
        elif kind == Event.SESSION_REMOTE_OPEN:
            session = event.session
            if session.state & Endpoint.LOCAL_UNINIT:
                session.open()
        elif kind == Event.SESSION_REMOTE_CLOSE:
            event.session.close()
        elif kind == Event.CONNECTION_REMOTE_OPEN:
            c = event.connection
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
            if not state.audiences:
                self._refuse(link, ServiceBusError(ErrorCode.UNAUTHORIZED, "Put a token on $cbs before declaring transactions."))
                return
            coordinator.open_coordinator(link)
            return
        if link.is_receiver:  # the client sends: to an entity, $cbs, or a management node
            address = _entity_path(remote_target.address)
            if address == "$cbs" or address.endswith("$management") or address == "$sbconform":
                link.open()
                link.flow(100)
                return
            try:
                self._authorize(state, address)
                self.namespace._sending_entity(address)
                destination = coordinator.destination_of(link)
                if destination is not None:  # send via (TXN-VIA-001): both entities are authorised
                    self._authorize(state, _entity_path(destination))
                    self.namespace._sending_entity(_entity_path(destination))
                    link.properties = {coordinator.TRANSFER_DESTINATION: destination}
            except ServiceBusError as error:
                self._refuse(link, error)
                return
            # No max-message-size on the link (the SDK then allows 1 MiB): the entity's own
            # limit is the model's, and a message over it is rejected with
            # amqp:link:message-size-exceeded, details and tracking id included.
            link.open()
            link.flow(SEND_CREDIT)
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
            store = self.namespace._receiving_store(address)
        except ServiceBusError as error:
            self._refuse(link, error)
            return
        r = Receiving(link, state, address, mode)
        r.address = source_address or ""
        link.receiving = r
        wants, session_id = self._session_filter(remote_source)
        if wants or store.requires_session and wants:
            r.wants_session = True
            timeout_ms = 0
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
        link.properties = {LOCKED_UNTIL_UTC: (self.clock.epoch_ms + locked_until) * 10_000 + DOTNET_EPOCH_TICKS}
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

    def _refuse(self, link: Link, error: ServiceBusError) -> None:
        """ATTACH with a null terminus, then DETACH with the error."""
        if link.is_sender:
            link.source.type = Terminus.UNSPECIFIED  # encoded as a null source
        else:
            link.target.type = Terminus.UNSPECIFIED
        link.open()
        link.condition = _condition(error)
        link.close()

    def _authorize(self, state: ConnState, path: str) -> None:
        want = path.lower()
        for audience in state.audiences:
            if audience == "" or want == audience or want.startswith(audience + "/"):
                return
        raise ServiceBusError(ErrorCode.UNAUTHORIZED, f"Unauthorized access to '{path}': put a token for it on $cbs first.")

    def _detach(self, state: ConnState, link: Link) -> None:
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
        if link.state & Endpoint.LOCAL_ACTIVE:
            link.close()

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
        try:
            found = self.namespace.receive(r.conn.model_conn, r.path, credit, r.mode, r.session_id)
        except ServiceBusError as error:
            self.waiting[r.key].discard(r)
            link.condition = _condition(error)
            link.close()
            return
        settled = r.mode == RECEIVE_AND_DELETE
        for d in found:
            token = d.lock_token
            tag = lock_uuid(token).bytes_le if token is not None else self._next_tag(r.conn)
            dlv = link.delivery(tag)
            link.send(self._encode(d))
            link.advance()
            if settled:
                dlv.settle()
            else:
                dlv.token = token  # type: ignore[attr-defined]
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
        m = d.message
        epoch = self.clock.epoch_ms
        msg = Message()
        msg.inferred = True
        msg.body = m.body
        if m.message_id is not None:
            msg.id = m.message_id
        if m.session_id is not None:
            msg.group_id = m.session_id
        if m.content_type is not None:
            msg.content_type = A(m.content_type)
        if m.correlation_id is not None:
            msg.correlation_id = m.correlation_id
        if m.subject is not None:
            msg.subject = m.subject
        if m.to is not None:
            msg.address = m.to
        if m.reply_to is not None:
            msg.reply_to = m.reply_to
        if m.reply_to_session_id is not None:
            msg.reply_to_group_id = m.reply_to_session_id
        # the effective time to live (the entity default caps the message's: SETTLE-TTL-001)
        ttl = d.expires_at - d.enqueued_time if d.expires_at < NEVER else None
        annotations = {
            X_SEQ: d.sequence_number,
            X_ENQ: timestamp(epoch + d.enqueued_time),
        }
        if d.locked_until is not None and lock_token:
            annotations[X_LOCKED] = timestamp(epoch + d.locked_until)
        if m.partition_key is not None:
            annotations[X_PKEY] = m.partition_key
        if m.scheduled_enqueue_time is not None:
            annotations[X_SCHED] = timestamp(epoch + m.scheduled_enqueue_time)
        state = str(d.state)
        if state == "deferred":
            annotations[X_STATE] = 1
        elif state == "scheduled":
            annotations[X_STATE] = 2
        if d.dead_letter_source is not None:
            annotations[X_DLSOURCE] = d.dead_letter_source
        msg.annotations = annotations
        props = d.application_properties
        if props:
            msg.properties = props
        encoded = msg.encode()
        if encoded[:3] == b"\x00\x53\x70":  # proton's own (empty) header: ours replaces it
            encoded = encoded[skip(encoded, 3):]
        return _header(ttl, max(d.delivery_count - 1, 0)) + encoded

    # ---------------------------------------------------------------- send
    def _incoming(self, state: ConnState, link: Link, dlv: Delivery) -> None:
        if dlv.partial:
            if dlv.pending > HARD_LIMIT:
                link.condition = Condition("amqp:link:message-size-exceeded", f"A transfer over {HARD_LIMIT} bytes.")
                link.close()
            return
        if not dlv.readable:
            return
        data = link.recv(dlv.pending)
        fmt = state.scanner.message_format(link.name, _tag(dlv))
        link.advance()
        if link.credit < SEND_CREDIT // 2:
            link.flow(SEND_CREDIT - link.credit)
        if coordinator.is_coordinator(link):
            coordinator.control(self.namespace, state.model_conn, data, dlv, _condition)
            return
        address = _entity_path(link.remote_target.address)
        if address == "$cbs":
            self._cbs(state, data)
            dlv.update(Delivery.ACCEPTED)
            dlv.settle()
            return
        if address.endswith("$management") or address == "$sbconform":
            self._management(state, address, data)
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
            if txn is not None:  # TXN-VIS-001: enlisted, committed at discharge
                via = address if destination is not None else None
                self.namespace.transactions.send(state.model_conn, txn[0], _entity_path(destination) if via else address, messages, via=via)
            else:
                self.namespace.send(state.model_conn, _entity_path(destination) if destination else address, messages)
        except ServiceBusError as e:
            error = e
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

    def _decode(self, data: bytes) -> ModelMessage:
        msg = Message()
        msg.decode(data)
        return self._model_message(msg)

    def _model_message(self, msg: Message) -> ModelMessage:
        body = msg.body
        if body is None:
            body = b""
        elif isinstance(body, str):
            body = body.encode("utf-8")
        elif isinstance(body, memoryview):
            body = bytes(body)
        elif not isinstance(body, bytes):
            body = repr(body).encode()
        ann = msg.annotations or {}
        scheduled = ann.get(X_SCHED)
        if scheduled is not None:
            scheduled = int(scheduled.timestamp() * 1000) if hasattr(scheduled, "timestamp") else int(scheduled)
            scheduled -= self.clock.epoch_ms
        pkey = ann.get(X_PKEY)
        ttl = msg.ttl
        mid = msg.id
        corr = msg.correlation_id
        return ModelMessage(
            body=body,
            message_id=None if mid is None else str(mid),
            session_id=msg.group_id or None,
            partition_key=None if pkey is None else str(pkey),
            time_to_live=round(ttl * 1000) if ttl else None,
            scheduled_enqueue_time=scheduled,
            content_type=None if msg.content_type is None else str(msg.content_type) or None,
            correlation_id=None if corr is None else str(corr),
            subject=msg.subject,
            to=msg.address,
            reply_to=msg.reply_to,
            reply_to_session_id=msg.reply_to_group_id or None,
            application_properties=dict(msg.properties or {}),
        )

    # ------------------------------------------------------------------ CBS
    def _cbs(self, state: ConnState, data: bytes) -> None:
        request = Message()
        request.decode(data)
        props = request.properties or {}
        status, description = 200, "OK"
        try:
            if props.get("operation") != "put-token":
                raise TokenError(f"unsupported CBS operation {props.get('operation')!r}")
            name = str(props.get("name", ""))
            check_token(str(request.body), name, self.keys)
            path = urlparse(name).path.strip("/") if "://" in name else name.strip("/")
            state.audiences.add(path.lower())
        except TokenError as error:
            status, description = 401, str(error)
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
    def _management(self, state: ConnState, address: str, data: bytes) -> None:
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
                self._authorize(state, path)
                status, result = self._entity_operation(state, path, operation, body)
            reply = {"statusCode": status, "statusDescription": "OK" if status == 200 else "No Content"}
        except ServiceBusError as error:
            result = None
            reply = {
                "statusCode": STATUS.get(error.code, 400),
                "statusDescription": error.text,
                "errorCondition": A(CONDITIONS.get(error.code, "amqp:internal-error")),
            }
        except TokenError as error:
            result = None
            reply = {"statusCode": 401, "statusDescription": str(error), "errorCondition": A("amqp:unauthorized-access")}
        except (KeyError, TypeError, ValueError) as error:
            result = None
            reply = {"statusCode": 400, "statusDescription": f"bad request: {error}", "errorCondition": A("com.microsoft:argument-error")}
        self._reply(state, address, request, reply, result)

    def _entity_operation(self, state: ConnState, path: str, operation: str, body: dict) -> tuple[int, Any]:
        ns = self.namespace
        conn = state.model_conn
        epoch = self.clock.epoch_ms
        sid = body.get("session-id")
        sid = None if sid is None else str(sid)
        key = path.split("/", 1)[0].lower()
        if operation == "com.microsoft:renew-lock":
            expirations = [ns.renew_lock(conn, path, u.int) for u in map(_uuid, _values(body["lock-tokens"]))]
            return 200, {"expirations": Array(UNDESCRIBED, Data.TIMESTAMP, *[timestamp(epoch + t) for t in expirations])}
        if operation == "com.microsoft:peek-message":
            start = int(body.get("from-sequence-number", 1))
            count = int(body.get("message-count", 1))
            found = ns.peek(path, start, count, sid)
            if not found:
                return 204, {}
            return 200, {"messages": [{"message": self._encode(d, lock_token=False)} for d in found]}
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
    def _control(self, operation: str, body: dict) -> Any:
        """The ``$sbconform`` node: what the SDK target needs that no SDK call does."""
        ns = self.namespace
        props = {str(k): v for k, v in (body.get("properties") or {}).items()}
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
    return Condition(CONDITIONS.get(error.code, "amqp:internal-error"), error.text, {A("com.microsoft:tracking-id"): error.tracking_id})


def _header(ttl: int | None, delivery_count: int) -> bytes:
    """The header section, every field written out. Proton drops a header holding only
    defaults, and the SDK then shows delivery_count None instead of 0."""
    fields = b"\x42\x40"  # durable false, priority null
    fields += b"\x40" if ttl is None else b"\x70" + min(ttl, 0xFFFFFFFF).to_bytes(4, "big")
    fields += b"\x42\x70" + min(delivery_count, 0xFFFFFFFF).to_bytes(4, "big")  # first-acquirer false, delivery-count
    return b"\x00\x53\x70\xc0" + bytes([len(fields) + 1, 5]) + fields


def _uuid(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, (bytes, bytearray)) and len(value) == 16:
        return uuid.UUID(bytes=bytes(value))
    return uuid.UUID(str(value))


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def serve_in_thread(config: Config | None = None, host: str = "127.0.0.1", port: int = 0):
    """Start a server on a background thread; returns (server, thread)."""
    import threading

    server = Server(config, host, port)
    server.start()
    thread = threading.Thread(target=server.run, name="sbconform-serve", daemon=True)
    thread.start()
    return server, thread
