"""Follows one proxied connection and writes what its client did as trace events.

The relay hands every frame, in the order it passed, to ``ConnInterp.from_client`` or
``from_broker``. The interpreter follows sessions (channels in both directions), links
(handles in both directions, matched by link name), deliveries (delivery ids per session
and direction), the settlement exchange and the ``$management`` request/response pairs,
and writes ``invoke`` then ``ok``/``fail``/``info`` events in the trace format
(``sbspec/trace-format.md``). Wire facts used (``/work/shared/notes/amqp-wire.md``, checked
against ``sbconform serve`` and the Python SDK 7.15):

- a sender's transfers are answered by a disposition from the broker: ``accepted`` (ok),
  ``rejected{error}`` (fail, the condition names the error);
- a peek-lock delivery's lock token is ``uuid.UUID(bytes_le=delivery_tag)``; the
  message's ``x-opt-sequence-number`` annotation is its sequence number, the header's
  ``delivery-count`` the count minus one (.NET counts from 1);
- settlement outcomes: complete ``accepted``; abandon ``modified{delivery-failed}``;
  defer ``modified{undeliverable-here}``; dead-letter ``rejected``; the broker answers
  with a settled disposition, ``rejected{com.microsoft:message-lock-lost}`` when the
  lock is gone; ``released`` hands a prefetched message back uncounted;
- ``$management`` requests carry ``operation`` (application property) and a map body;
  the response's ``correlation-id`` is the request's ``message-id``, ``statusCode`` its
  outcome.

Two things an observer on the wire cannot know when they happen, and how they are written:

- **A send's sequence number.** Service Bus does not return it on send (the ``accepted``
  outcome carries nothing). A send the broker accepted is therefore *held* and written
  (its ``invoke`` and ``ok`` with their own times) just before the first event that
  shows its sequence number (a receive, peek or deferred receive of the same message id
  on the same queue or topic), so that the replay checker can place it in the queue. A
  send never observed is written at the end as ``info`` (the trace cannot place it).
  Sends with a known number (``schedule``) are written at once.
- **Whether a delivered message reached the application.** An SDK hands back messages
  prefetched outside a receive call with a pre-settled ``released``. A peek-lock
  delivery's ``receive`` is invoked when it arrives and completed when the client next
  acts (any disposition, transfer, detach, end or close it sends): ``fail`` (result
  ``released``) if that act released it (the broker requeues it uncounted: for the model
  it was never delivered), else ``ok``.

Frames the interpreter cannot follow are never dropped silently: they are written as an
``info`` event (op ``describe-entity``, an observation, on the link's entity) whose
result holds ``unrecognised`` and a summary of the frame.
"""

from __future__ import annotations

from typing import Any

from .deliveries import Deliveries
from .frames import (ATTACH, BEGIN, CLOSE, DETACH, DISPOSITION, END, FLOW, OPEN, SASL_INIT, TRANSFER, Frame, FrameError, decode,
                     decode_typed, encode_frame, peek, summary)
from .frames import field as fld
from .links import Link, Links, Sess
from .management import Management
from .messages import entity_path, read_message
from .recording import Recording

__all__ = ["ConnInterp", "Recording", "entity_path", "read_message"]


class ConnInterp(Links, Deliveries, Management):
    """One proxied connection: frames in, trace events out. Its concerns live in the mixins:
    ``links.py`` (sessions, links, attach/detach), ``deliveries.py`` (sends, receives,
    settlement), ``management.py`` (``$management`` operations)."""

    def __init__(self, rec: Recording) -> None:
        self.rec = rec
        self.sink = rec.sink
        self.conn = rec.new_conn()
        self.sessions: dict[int, Sess] = {}
        self.b2c: dict[int, int] = {}
        self.mgmt: dict[str, dict] = {}  # request message-id -> pending request
        self.pending_ok: dict[tuple[int, int], tuple] = {}  # (channel, delivery id) -> receive awaiting the client's act
        self.entities: dict[str, str] = {}  # entity -> a client on it (for drop-connection)
        self.client_closed = False
        self.broker_closed = False

    # ------------------------------------------------------------------ helpers
    def ev(self, client: str, op_id: int, op: str, phase: str, time_ms: int | None = None, **fields: Any) -> None:
        self.sink.write(client, op_id, op, phase, time_ms, conn=self.conn, **fields)

    def unrecognised(self, frame: Frame | None, why: str, link: Link | None = None) -> None:
        """What the proxy relayed but cannot interpret: an ``info`` event saying so (with the
        frame's summary when there is one), never dropped silently."""
        op = self.sink.op()
        client = link.client if link is not None and link.client else "admin"
        entity = link.path if link is not None and link.path else None
        result = {"unrecognised": why}
        if frame is not None:
            result["frame"] = summary(frame)
        fields = dict(entity=entity, result=result)
        self.ev(client, op, "describe-entity", "invoke", entity=entity)
        self.ev(client, op, "describe-entity", "info", **fields)

    # ---------------------------------------------------------------- client -> broker
    def may_change(self, frame: Frame) -> bool:
        """Whether the proxy may have to change this client frame or wait before relaying
        it (CBS put-token transfers; towards Azure, SASL init, OPEN and ATTACH; an attach
        to an entity not described yet). Every other frame is relayed first and
        interpreted after."""
        if frame.header:
            return False
        if frame.type == 1:
            return bool(self.rec.rewrite_host)
        code, first = peek(frame)
        if code == TRANSFER:
            s = self.sessions.get(frame.channel)
            link = s.c_handles.get(first or 0) if s is not None else None
            return link is not None and link.kind == "cbs"
        if code == ATTACH:
            return True
        if code == OPEN:
            return bool(self.rec.rewrite_host)
        return code is None and len(frame.body) > 0  # not readable cheaply: the full decoder will say

    def describe_needed(self, frame: Frame) -> str | None:
        """The entity path of a client's attach whose entity has not been described yet."""
        if frame.header or frame.type != 0 or peek(frame)[0] != ATTACH:
            return None
        try:
            code, fields, _ = decode(frame)
        except FrameError:
            return None
        if code != ATTACH:
            return None
        link = self._link_of_attach(fields)
        if link.kind == "entity" and self.rec.needs_description(link.path):
            return link.path
        return None

    def from_client(self, frame: Frame) -> bytes | None:
        """Interpret a frame the client sent; returns replacement bytes when the proxy must
        change it (CBS put-token, upstream host name), else None."""
        if frame.header:
            return None
        try:
            code, fields, payload = decode(frame)
        except FrameError as error:
            self.unrecognised(frame, str(error))
            return None
        if code is None:
            return None
        try:
            return self._client_frame(frame, code, fields, payload)
        except (ValueError, TypeError) as error:  # a field of the wrong type: a symbol where a number belongs
            self.unrecognised(frame, f"a field of the wrong type ({error})")
            return None

    def _client_frame(self, frame: Frame, code: int, fields: list, payload: memoryview) -> bytes | None:
        if frame.type == 1:
            if code == SASL_INIT and self.rec.rewrite_host and len(fields) > 2:
                _, fields, _ = decode_typed(frame)
                fields = list(fields)
                fields[2] = self.rec.rewrite_host
                return encode_frame(frame, code, fields)
            return None
        if code in (DISPOSITION, TRANSFER, DETACH, END, CLOSE):
            self._client_acts(code, fields)
        if code == OPEN:
            if self.rec.rewrite_host:
                _, fields, _ = decode_typed(frame)
                fields = list(fields)
                while len(fields) < 2:
                    fields.append(None)
                fields[1] = self.rec.rewrite_host
                return encode_frame(frame, code, fields)
        elif code == BEGIN:
            self._session_c(frame.channel)
        elif code == ATTACH:
            return self._client_attach(frame, fields)
        elif code == FLOW:
            s = self._session_c(frame.channel)
            handle = fld(fields, 4)
            link = s.c_handles.get(handle) if handle is not None else None
            if link is not None and fld(fields, 6) is not None:
                link.credit = int(fields[6])
        elif code == TRANSFER:
            return self._client_transfer(frame, fields, payload)
        elif code == DISPOSITION:
            self._client_disposition(frame, fields)
        elif code == DETACH:
            s = self._session_c(frame.channel)
            link = s.c_handles.pop(fld(fields, 0), None)
            if link is not None and link.kind == "entity" and fld(fields, 1, False) and link.attach_op is None:
                op = self.sink.op()
                link.close_op = op
                self.ev(link.client, op, "close", "invoke", entity=link.path, session=link.session)
        elif code == END:
            pass
        elif code == CLOSE:
            self.client_closed = True
        return None

    # ---------------------------------------------------------------- broker -> client
    def from_broker(self, frame: Frame) -> None:
        if frame.header or frame.type != 0:
            return
        try:
            code, fields, payload = decode(frame)
        except FrameError as error:
            self.unrecognised(frame, f"from the broker: {error}")
            return
        try:
            self._broker_frame(frame, code, fields, payload)
        except (ValueError, TypeError) as error:  # a field of the wrong type
            self.unrecognised(frame, f"from the broker: a field of the wrong type ({error})")

    def _broker_frame(self, frame: Frame, code: int | None, fields: list, payload: memoryview) -> None:
        if code == BEGIN:
            remote = fld(fields, 0)
            if remote is not None:
                self.b2c[frame.channel] = int(remote)
                self._session_c(int(remote))
        elif code == ATTACH:
            self._broker_attach(frame, fields)
        elif code == TRANSFER:
            self._broker_transfer(frame, fields, payload)
        elif code == DISPOSITION:
            self._broker_disposition(frame, fields)
        elif code == DETACH:
            self._broker_detach(frame, fields)
        elif code == END:
            c = self.b2c.pop(frame.channel, None)
            if c is not None:
                self.sessions.pop(c, None)
        elif code == CLOSE:
            self.broker_closed = True

    # ---------------------------------------------------------------- the end
    def connection_lost(self) -> None:
        """The TCP connection ended (either side). Pending receives complete; operations
        without an answer end as ``info``; a connection that ended without an AMQP close
        from the client loses its locks (``drop-connection`` per entity it used)."""
        self._client_acts(CLOSE, [])
        for s in self.sessions.values():
            for link, sends in s.out_dlv.values():
                for h in sends:
                    common = dict(entity=h.entity, message_id=h.msg.message_id, session=h.msg.session, partition_key=h.msg.partition_key)
                    self.ev(h.client, h.op_id, "send", "invoke", h.invoked, args=h.args, **common)
                    self.ev(h.client, h.op_id, "send", "info", error="connection-lost", **common)
            s.out_dlv.clear()
            for op, op_name, client, common in s.settling.values():
                self.ev(client, op, op_name, "info", error="connection-lost", **common)
            s.settling.clear()
            for link in list(s.c_handles.values()) + list(s.b_handles.values()):
                if link.attach_op is not None:
                    self._attach_outcome(link, "info", error="connection-lost")
                if link.close_op is not None:
                    op, link.close_op = link.close_op, None
                    self.ev(link.client, op, "close", "info", entity=link.path, error="connection-lost")
        for pending in self.mgmt.values():
            for op, op_name, client, fields in pending["ops"]:
                self.ev(client, op, op_name, "info", entity=fields.get("entity", pending["entity"]),
                        **{k: v for k, v in fields.items() if k != "entity"}, error="connection-lost")
        self.mgmt.clear()
        if not self.client_closed:
            for entity, client in self.entities.items():
                op = self.sink.op()
                self.ev(client, op, "drop-connection", "invoke", entity=entity)
                self.ev(client, op, "drop-connection", "ok", entity=entity, result={"conn": None})
        self.sessions.clear()
