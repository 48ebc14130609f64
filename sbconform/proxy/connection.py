"""One proxied connection, relayed by asyncio protocols (no stream tasks): the bytes a side
sends are written to the other side from the callback that received them, in the same
turn of the event loop, and interpreted just after (the relay never waits for the
interpreter). See ``relay.py`` for what passes unchanged and what the proxy changes.

Client -> broker bytes are relayed frame by frame (a frame the proxy must change, the CBS
put-token, is only known once whole): at most one partial frame is held. A client frame
that attaches to an entity not yet described waits, with everything after it, until the
description came (reading from the client is paused meanwhile). Broker -> client bytes
are relayed as they come and interpreted from the splitter's copy. Flow control: when a
side's write buffer is full, reading from the other side pauses until it drains.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from .frames import OPEN, FrameError, Splitter, decode

#: AMQP 2.7.1: no peer may set max-frame-size below 512
MIN_MAX_FRAME = 512
from .interpret import ConnInterp

if TYPE_CHECKING:
    from .relay import Proxy


class End(asyncio.Protocol):
    """One side of a proxied connection: the client's (accepted by the proxy's server) or
    the upstream broker's (opened by the proxy)."""

    def __init__(self, proxy: "Proxy", pair: "Pair | None", from_client: bool) -> None:
        self.proxy = proxy
        self.pair = pair
        self.from_client = from_client

    def connection_made(self, transport: Any) -> None:
        if self.from_client:
            proxy = self.proxy
            if proxy.stats.open >= proxy.max_connections:  # a bound on what local clients can make it hold
                proxy.stats.refused += 1
                if proxy.stats.refused == 1 or proxy.stats.refused % 1000 == 0:
                    proxy.say(f"{proxy.stats.open} connections relayed already (the limit): closing new ones "
                              f"({proxy.stats.refused} so far)")
                transport.close()
                return
            self.pair = Pair(self.proxy, transport)
        else:
            assert self.pair is not None
            self.pair.upstream_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.pair is None:  # refused at accept
            return
        if self.from_client:
            self.pair.from_client(data)
        else:
            self.pair.from_broker(data)

    def eof_received(self) -> bool:
        if self.pair is None:
            return False
        self.pair.eof(self.from_client)
        return True  # half-close: the other direction may still say its last frames

    def connection_lost(self, exc: Exception | None) -> None:
        if self.pair is not None:
            self.pair.lost(self.from_client)

    def pause_writing(self) -> None:  # this side's write buffer is full: stop reading the other
        if self.pair is not None:
            self.pair.pause(not self.from_client, "full")

    def resume_writing(self) -> None:
        self.pair.resume(not self.from_client, "full")


class Pair:
    """A client connection and the upstream connection opened for it."""

    def __init__(self, proxy: "Proxy", client: Any) -> None:
        self.proxy = proxy
        self.rec = proxy.rec
        self.c = client
        self.u: Any = None
        self.paused: dict[bool, set] = {True: set(), False: set()}  # side (from_client) -> reasons
        self.ended: dict[bool, bool] = {True: False, False: False}
        self.c_split: Splitter | None = Splitter()
        self.max_frame_known = False  # the broker's OPEN seen (its max-frame-size bounds c_split)
        self.u_split: Splitter | None = Splitter()
        self.backlog: list[bytes] = []  # client bytes received while a description is read
        self.describing = False
        self.client_eof = False
        self.finished = False
        self.linger: asyncio.TimerHandle | None = None
        self.interp: ConnInterp | None = None
        proxy.stats.connections += 1
        proxy.stats.open += 1
        proxy.pairs.add(self)
        self.pause(True, "connecting")
        proxy._spawn(self._connect())

    # ------------------------------------------------------------------ life cycle
    async def _connect(self) -> None:
        proxy = self.proxy
        upstream = proxy.upstream
        loop = asyncio.get_running_loop()
        try:
            kwargs: dict = {}
            if upstream.tls:
                import ssl

                kwargs = {"ssl": proxy.ssl_context or ssl.create_default_context(), "server_hostname": upstream.host}
            await asyncio.wait_for(loop.create_connection(lambda: End(proxy, self, False), upstream.host, upstream.port, **kwargs), 30)
        except asyncio.CancelledError:
            self.finish()
            raise
        except Exception as error:  # OSError, timeout, TLS
            proxy.stats.upstream_failures += 1
            proxy.say(f"cannot reach the upstream {upstream.host}:{upstream.port}: {error}")
            self.finish()
            return
        if self.finished:
            self.u.close()
            return
        self.resume(True, "connecting")

    def upstream_made(self, transport: Any) -> None:
        """The upstream connection is open (before any of its bytes is read): the connection is
        followed from here (a client whose upstream cannot be reached is no trace connection)."""
        self.u = transport
        try:
            self.interp = ConnInterp(self.rec)
        except Exception as error:
            self.proxy._record_failure("new connection", error, None, None)

    def pause(self, side: bool, reason: str) -> None:
        reasons = self.paused[side]
        transport = self.c if side else self.u
        if not reasons and transport is not None:
            try:
                transport.pause_reading()
            except (RuntimeError, AttributeError):
                pass
        reasons.add(reason)

    def resume(self, side: bool, reason: str) -> None:
        reasons = self.paused[side]
        reasons.discard(reason)
        transport = self.c if side else self.u
        if not reasons and transport is not None and not self.finished:
            try:
                transport.resume_reading()
            except (RuntimeError, AttributeError):
                pass

    def eof(self, from_client: bool) -> None:
        if from_client and (self.describing or self.backlog):
            self.client_eof = True  # said once the held frames went out
            return
        self._end(from_client)

    def _end(self, from_client: bool) -> None:
        other = self.u if from_client else self.c
        if from_client and self.c_split is not None and self.c_split.buf and other is not None:
            other.write(bytes(self.c_split.buf))  # the end of the stream: an incomplete frame passes as it is
            self.c_split.buf.clear()
        if other is not None:
            try:
                if other.can_write_eof():
                    other.write_eof()
            except (OSError, RuntimeError):
                pass
        self.ended[from_client] = True
        self._one_side_done()

    def lost(self, from_client: bool) -> None:
        self.ended[from_client] = True
        self._one_side_done()

    def _one_side_done(self) -> None:
        if self.ended[True] and self.ended[False]:
            self.finish()
        elif self.linger is None and not self.finished:
            # one side ended: let the other say its last frames (a detach's answer...)
            self.linger = asyncio.get_event_loop().call_later(self.proxy.linger, self.finish)

    def finish(self) -> None:
        """Both sides closed (or the proxy stops): the interpreter hears the connection end."""
        if self.finished:
            return
        self.finished = True
        if self.linger is not None:
            self.linger.cancel()
        for transport in (self.c, self.u):
            if transport is not None:
                try:
                    transport.close()
                except Exception:
                    pass
        if self.interp is not None:
            try:
                self.interp.connection_lost()
            except Exception as error:
                self.proxy._record_failure("connection end", error, None, None)
        self.rec.sink.flush()
        self.proxy.stats.open -= 1
        self.proxy.pairs.discard(self)

    # ------------------------------------------------------------------ client -> broker
    def from_client(self, data: bytes) -> None:
        if self.finished or self.u is None:
            return
        if self.describing:
            self.backlog.append(data)
            return
        interp, split = self.interp, self.c_split
        if split is None or interp is None:
            self.u.write(data)
            return
        try:
            frames = split.feed(data)
        except FrameError as error:
            # not AMQP framing (any more): relay what is held and everything after as raw bytes
            held = bytes(split.buf)  # every byte not yet relayed, this read's included
            self.c_split = None
            self.proxy._note_raw(interp, error, True)
            self.u.write(held)
            return
        if not frames:
            return
        self.proxy.stats.frames += len(frames)
        try:
            hold = any(interp.may_change(f) for f in frames)
        except Exception:
            hold = True
        if not hold:  # the usual case: relay at once, interpret after
            self.u.write(frames[0].raw if len(frames) == 1 else b"".join(f.raw for f in frames))
            self._interpret(frames, True)
            return
        self._client_frames(frames, False)

    def _client_frames(self, frames: list, described_first: bool) -> None:
        """Frames the proxy may change or must hold (see ``ConnInterp.may_change``)."""
        interp = self.interp
        out = bytearray()
        for i, frame in enumerate(frames):
            path = None
            if not (described_first and i == 0):
                try:
                    path = interp.describe_needed(frame)
                except Exception:
                    path = None
            if path and self.proxy.describer is not None and self.rec.needs_description(path):
                if out:
                    self.u.write(bytes(out))
                self.describing = True
                self.pause(True, "describe")
                self.proxy._spawn(self._describe_then(path, frames[i:]))
                self.rec.sink.flush()
                return
            replacement = None
            try:
                replacement = interp.from_client(frame)
            except Exception as error:
                self.proxy._record_failure("client frame", error, interp, frame)
            out += replacement if replacement is not None else frame.raw
        self.u.write(bytes(out))
        self.rec.sink.flush()

    async def _describe_then(self, path: str, frames: list) -> None:
        try:
            await self.proxy._describe(path)
        finally:
            self.describing = False
            if not self.finished:
                self._client_frames(frames, True)
                while self.backlog and not self.describing and not self.finished:
                    self.from_client(self.backlog.pop(0))
                if not self.describing:
                    if self.client_eof and not self.finished:
                        self._end(True)
                    self.resume(True, "describe")

    # ------------------------------------------------------------------ broker -> client
    def from_broker(self, data: bytes) -> None:
        if self.finished:
            return
        self.c.write(data)
        interp, split = self.interp, self.u_split
        if split is None or interp is None:
            return
        try:
            frames = split.feed(data)
        except FrameError as error:
            self.u_split = None
            self.proxy._note_raw(interp, error, False)
            return
        self.proxy.stats.frames += len(frames)
        if self.c_split is not None and not self.max_frame_known:
            self._take_max_frame(frames)
        self._interpret(frames, False)

    def _take_max_frame(self, frames: list) -> None:
        """The broker's OPEN says the largest frame it takes (AMQP 2.7.1 max-frame-size): a client
        frame larger is one the broker refuses anyway, so the proxy holds no more of one than that
        (past it the connection's bytes pass raw, uninterpreted: relay.py), not up to MAX_FRAME."""
        for f in frames:
            if f.header or f.type != 0:
                continue
            try:
                code, fields, _ = decode(f)
            except Exception:  # not a performative the proxy reads: the interpreter says so, the bound stays
                continue
            if code == OPEN:
                self.max_frame_known = True
                size = fields[2] if len(fields) > 2 and isinstance(fields[2], int) else None
                if size is not None and self.c_split is not None:
                    self.c_split.max_frame = max(MIN_MAX_FRAME, min(size, self.c_split.max_frame))
                return

    def _interpret(self, frames: list, from_client: bool) -> None:
        """Frames already relayed, to the interpreter (its failures noted, never raised), then
        their events to the trace."""
        interp = self.interp
        see = interp.from_client if from_client else interp.from_broker
        for frame in frames:
            try:
                see(frame)
            except Exception as error:
                self.proxy._record_failure("client frame" if from_client else "broker frame", error, interp, frame)
        self.rec.sink.flush()
