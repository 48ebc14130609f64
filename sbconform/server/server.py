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

import logging
import selectors
import socket
import time
from typing import Callable, Iterable

from sbreference import ErrorCode, Namespace, ServiceBusError, paths

from ..amqp import codec
from .config import Config
from .connections import ConnectionLoop
from .deliveries import Deliveries
from .limits import Limits
from .links import Links
from .nodes import Nodes
from .state import ConnState, LinkInfo, Receiving, WallClock, Waiting
from . import values as v
from .values import entity_at, lock_uuid

__all__ = ["CONDITIONS", "STATUS", "ConnState", "LinkInfo", "Limits", "Receiving", "Server", "WallClock", "lock_uuid",
           "serve_in_thread"]

log = logging.getLogger("sbconform.serve")

#: no entity changed: ``_retry_sessions`` then tries only the waits whose deadline came
NOTHING_CHANGED: frozenset = frozenset()

#: the one mapping of errors, in sbconform/amqp/codec.py
CONDITIONS = codec.CONDITIONS
STATUS = codec.STATUS


class Server(ConnectionLoop, Links, Deliveries, Nodes):
    """``Server(config).start()`` binds and returns the port; ``run()`` serves until ``stop()``.

    The concerns live in their modules, each a part of this class: the socket loop and proton's
    events (``connections.py``), links (``links.py``), deliveries (``deliveries.py``), the
    request nodes (``nodes.py``, with the operation tables in ``management.py`` and
    ``control.py``); time is here."""

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
        self.waiting = Waiting()  # entity key -> receivers with credit (no key once none waits)
        self.dirty: set[str] = set()
        self.touched: set[ConnState] = set()  # connections to push, handle and flush after this turn (_flush_all)
        self._stop = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._next_tick = 0.0
        self._idle_due: int | None = None  # the model's next deletion on idle (SETTLE-IDLE-001), or earlier (_idle_deadline)
        self._idle_asked = 0.0  # when the model was last asked for it (time.monotonic())
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
                if self.calls:  # an in-process call may act on any connection
                    self._idle_asked = 0.0  # (and make an entity temporary: the idle deadline is asked again)
                    self.touched.update(self.conns.values())
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
        idle = self._idle_deadline(now)  # an entity is deleted then, its links detached
        if idle is not None:
            deadlines.append(self.clock.monotonic_of(idle))
        for state in self.conns.values():
            if state.pending_sessions:
                deadlines.append(state.session_due)  # (never later than its waits' earliest deadline)
        if self.conns:
            deadlines.append(now + 1.0)  # transports' idle-timeout ticks, open deadlines, token expiries
        if self._accept_paused_until:
            deadlines.append(self._accept_paused_until)
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - now)

    def _idle_deadline(self, mono: float) -> int | None:
        """The model's next deletion on idle (``Namespace.next_idle_deadline``). Asking costs a look at every
        temporary entity (1.4 ms for 1,000), so the answer is kept: use only moves a deadline later, and a
        new one is at least five minutes away; it is asked again once passed, when none was, after a call
        handed to the loop (the REST API's creates and updates) or the clock moved on (advance-time), and once
        a second (``$sbconform``'s creates)."""
        if self._idle_due is None or self._idle_due <= self.clock.now or mono >= self._idle_asked + 1.0:
            self._idle_due = self.namespace.next_idle_deadline()
            self._idle_asked = mono
        return self._idle_due

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
        before, idle = self._idle_due, self._idle_deadline(time.monotonic())
        if any(due is not None and due <= self.clock.now for due in (before, idle)):  # SETTLE-IDLE-001
            # (a request may have deleted an entity due meanwhile, reap_idle not naming it: every link is looked at)
            self.entities_deleted(self.namespace.reap_idle(self.clock.now), every_link=True)
            self._idle_asked = 0.0
            self._idle_deadline(time.monotonic())
        waited = [key for key, receivers in self.waiting.items() if receivers]
        if waited:  # time acts on the entities receivers wait on (the others when next asked)
            self.dirty.update(self.namespace.tick_due(self.clock.now, waited))
        mono = time.monotonic()
        every_second = mono >= self._next_tick
        for state in list(self.conns.values()):  # sessions waited for: at their deadline; all of them once a second
            if state.pending_sessions:
                self._guard(state, self._retry_sessions, state, mono, None if every_second else NOTHING_CHANGED)
        if self._accept_paused_until and mono >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self._listen(True)  # try again (a failed accept pauses it anew, without a new line)
        if mono >= self._next_tick:
            self._next_tick = mono + 1.0
            now_s = time.time()
            for state in list(self.conns.values()):
                self._guard(state, self._tick, state, mono, now_s)
            self.touched.update(self.conns.values())  # and each one's events and output looked at (_flush_all)

    def entities_deleted(self, keys: Iterable[str], every_link: bool = False) -> None:
        """The queues and topics keyed ``keys`` were deleted, or lost a subscription (through management, or
        on idle: ``Namespace.reap_idle``): the links attached to what is gone are detached with
        ``amqp:not-found``, as an unknown entity's attach is refused (sbspec/wire.md 4), and the receivers
        waiting on them served again. ``every_link``: the links of every entity are looked at."""
        keys = set(keys)
        if not keys and not every_link:
            return
        self.dirty.update(keys)
        for state in list(self.conns.values()):
            for link, info in list(state.link_info.items()):
                if info.role != "entity" or not (every_link or paths.entity_key(info.path) in keys):
                    continue
                if entity_at(self.namespace, info.path) is not None:
                    continue
                error = ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, f"The messaging entity '{info.path}' could not be found: it was deleted.")
                self._guard(state, self._detach_with, state, link, v.condition(error))
                self.touched.add(state)

    def _mark_all_dirty(self) -> None:
        self.dirty.update(k for k, v in self.waiting.items() if v)

    def _serve_dirty(self) -> None:
        changed = set()
        while self.dirty:
            key = self.dirty.pop()
            changed.add(key)
            for r in list(self.waiting.get(key, ())):
                self._guard(r.conn, self._serve, r)
        if changed:  # the receivers waiting for a session of an entity that changed (not every one, every turn)
            for state in list(self.conns.values()):
                if state.pending_sessions:
                    self._guard(state, self._retry_sessions, state, time.monotonic(), changed)


def serve_in_thread(config: Config | None = None, host: str = "127.0.0.1", port: int = 0, limits: Limits | None = None):
    """Start a server on a background thread; returns (server, thread)."""
    import threading

    server = Server(config, host, port, limits=limits)
    server.start()
    thread = threading.Thread(target=server.run, name="sbconform-serve", daemon=True)
    thread.start()
    return server, thread
