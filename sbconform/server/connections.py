"""The connection loop of ``sbconform serve``: accepting sockets (within ``--max-connections``,
resting the listener when out of file descriptors), feeding bytes to proton and back
(``_io``, ``_push``, ``_flush``: the output cap throttles a peer that does not read), the
fault boundary around each connection's work (``_guard``), proton's events dispatched to the
links and deliveries (``_event``), and each connection's deadlines once a second (``_tick``:
OPEN, idle timeout, token expiries)."""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import time
from typing import Any, Callable

from cproton import (PN_EOS, addressof, pn_collector_peek, pn_collector_pop, pn_delivery_link, pn_delivery_updated,
                     pn_event_delivery, pn_event_link, pn_event_type, pn_event_type_name, pn_link_is_receiver,
                     pn_transport_capacity, pn_transport_pending, pn_transport_pop)
from cproton_ffi import ffi as _ffi, lib as _lib
from proton import Delivery, Endpoint, Event

from sbreference import ServiceBusError

from . import values as v
from .state import ConnState

log = logging.getLogger("sbconform.serve")

#: the proton event types ``_event`` acts on (by number); every other one is popped unread
_HANDLED = frozenset(e.number for e in (
    Event.DELIVERY, Event.LINK_FLOW, Event.LINK_REMOTE_OPEN, Event.LINK_REMOTE_CLOSE, Event.LINK_REMOTE_DETACH,
    Event.SESSION_REMOTE_OPEN, Event.SESSION_REMOTE_CLOSE, Event.CONNECTION_REMOTE_OPEN,
    Event.CONNECTION_REMOTE_CLOSE, Event.TRANSPORT_CLOSED))
_TRANSPORT_CLOSED = Event.TRANSPORT_CLOSED.number
_DELIVERY = Event.DELIVERY.number
_LINK_FLOW = Event.LINK_FLOW.number


class ConnectionLoop:
    """The socket and proton side of ``Server`` (a mixin: the server's state is on ``self``)."""

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
        state.close_by = time.monotonic() + self.limits.close_grace
        try:
            state.connection.condition = v.error(condition, text)
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
        if state.unpushed or state.throttled or state.closing:
            self.touched.add(state)  # something left to follow up after this turn (_flush_all)

    def _push(self, state: ConnState) -> None:
        """Hand the bytes read to proton, as much as it takes now. What it cannot take yet
        is kept (one read at most: the socket is not read again until it is all in)."""
        t = state.transport
        impl = t._impl  # (Transport's capacity and push at the C level, as in _flush; the bytes pushed uncopied)
        view = state.unpushed
        while view and not state.closing:
            capacity = pn_transport_capacity(impl)
            if capacity < 0:
                if capacity < PN_EOS:
                    t._check(capacity)  # an error: raised as Transport.capacity raises it
                view = memoryview(b"")  # the transport gave up on this input (framing error): it says why, then closes
                break
            if capacity == 0:
                break
            chunk = view[:capacity]
            pushed = _lib.pn_transport_push(impl, _ffi.from_buffer(chunk), len(chunk))
            if pushed != len(chunk):
                t._check(pushed)  # an error: raised as Transport.push raises it
                raise OverflowError("the transport took less than its capacity")  # (as Transport.push)
            view = view[capacity:]
            self._events(state)
        state.unpushed = view if view and not state.closing else memoryview(b"")
        if not state.closed:
            self._top_up(state)

    def _flush(self, state: ConnState) -> None:
        if state.closed:
            return
        t = state.transport
        impl = t._impl  # (Transport's pending, peek and pop at the C level: once or twice per frame sent)
        while True:
            pending = pn_transport_pending(impl)
            if pending <= 0:
                if pending < PN_EOS:
                    t._check(pending)  # an error: raised as Transport.pending raises it
                break
            data = bytearray(pending)  # (pn_transport_peek at the C level: it copies what is pending, no more)
            size = _lib.pn_transport_peek(impl, _ffi.from_buffer(data), pending)
            if size != pending:
                t._check(size)
                data = data[:size]
            try:
                sent = state.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._lost(state)
                return
            if sent <= 0:
                break
            pn_transport_pop(impl, sent)
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
        """After each turn of the loop, the connections touched outside their own input
        (``_serve`` queued deliveries to them, an in-process call ran) and those with something
        left to follow up (input proton has not taken yet, a throttle, a close); once a second
        every connection (``_on_time``). The others, most of them on a busy server, have
        nothing to push or flush: their own input is handled, and flushed, by ``_io``."""
        touched, self.touched = self.touched, set()
        for state in touched:
            if state.closed:
                continue
            if state.unpushed:
                self._guard(state, self._push, state)
            self._guard(state, self._events, state)
            self._guard(state, self._flush, state)
            if state.unpushed or state.throttled or state.closing:
                self.touched.add(state)

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
            self.waiting.discard(r)
        state.receivers.clear()
        state.pending_sessions.clear()
        state.granted.clear()
        state.link_info.clear()
        state.reply_links.clear()
        state.reply_addresses.clear()
        state.session_links.clear()
        state.fed.clear()
        state.partial_bytes.clear()
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
            info = state.link_info.get(link)
            if info is None or link.state & Endpoint.LOCAL_CLOSED:  # (a session receiver still waiting is LOCAL_UNINIT: checked too)
                state.granted.discard(link)
                continue
            try:
                self._authorize(state, info.path, now_s)
            except ServiceBusError as error:  # the token expired: Service Bus detaches the link
                self._detach_with(state, link, v.condition(error))
        self._flush(state)


    # --------------------------------------------------------------- events
    def _events(self, state: ConnState) -> None:
        # proton's events read at the C level first: most (transport, local-endpoint and
        # flow-of-our-own events) are not acted on, and are popped without building
        # proton's Python wrappers for them (the wrappers cost more than the work)
        impl = state.collector._impl
        while True:
            raw = pn_collector_peek(impl)
            if not raw:  # (a NULL pointer is false)
                return
            number = pn_event_type(raw)
            if number not in _HANDLED or (state.closing and number != _TRANSPORT_CLOSED):
                pn_collector_pop(impl)  # (once we close, what the peer still says is not acted on)
                continue
            try:
                if number == _DELIVERY:  # the most frequent: no Event wrapper, the delivery itself
                    self._delivery(state, pn_event_delivery(raw))
                elif number == _LINK_FLOW:  # the next: the link itself
                    self._flow(state, pn_event_link(raw))
                else:
                    self._event(state, Event.wrap(raw))
            except Exception:  # never let one client's input stop the server
                log.exception("error handling %s", pn_event_type_name(number))
                self._shut(state, "amqp:internal-error", "The server failed to handle a frame; the connection is closed.")
            pn_collector_pop(impl)
            if state.closed:
                return

    def _delivery(self, state: ConnState, impl: Any) -> None:
        """A transfer in, or the client's disposition of one we sent (``impl``: proton's C
        delivery; a disposition is read without the delivery's Python wrapper)."""
        link = pn_delivery_link(impl)  # (proton's C link: a disposition needs no wrapper of it)
        if pn_link_is_receiver(link):
            self._incoming(state, state.link_of(link), Delivery(impl))
        elif pn_delivery_updated(impl):
            self._settled_by_client(state, link, impl)

    def _flow(self, state: ConnState, link: Any) -> None:
        """The client's flow on a link (proton's C link): a receiver of ours is served its credit."""
        info = state.link_info.at.get(addressof(link))
        if info is not None and info.receiving is not None:
            self._serve(info.receiving)

    def _event(self, state: ConnState, event: Event) -> None:
        """Every other event ``_events`` hands on (deliveries go to ``_delivery``, flows to ``_flow``)."""
        kind = event.type
        if kind == Event.LINK_REMOTE_OPEN:
            state.open_links.add(event.link)
            state.session_links.setdefault(event.link.session, set()).add(event.link)
            if len(state.open_links) > self.limits.max_links:
                self._shut(state, "amqp:resource-limit-exceeded",
                           f"More than {self.limits.max_links} links open on one connection (--max-links).")
                return
            self._attach(state, event.link)
        elif kind == Event.LINK_REMOTE_CLOSE:
            state.open_links.discard(event.link)
            self._detach(state, event.link)
            self._release(state, event.link)
        elif kind == Event.LINK_REMOTE_DETACH:  # closed=false: the client suspends the link (AMQP 1.0 2.6.5)
            self._suspended(state, event.link)
        elif kind == Event.SESSION_REMOTE_OPEN:
            session = event.session
            if len(state.sessions) >= self.limits.max_sessions:
                self._shut(state, "amqp:resource-limit-exceeded",
                           f"More than {self.limits.max_sessions} sessions open on one connection (--max-sessions).")
                return
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

