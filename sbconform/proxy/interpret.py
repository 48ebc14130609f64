"""Follows one proxied connection and writes what its client did as trace events.

The relay hands every frame, in the order it passed, to ``ConnInterp.from_client`` or
``from_broker``. The interpreter follows sessions (channels in both directions), links
(handles in both directions, matched by link name), deliveries (delivery ids per session
and direction), the settlement exchange and the ``$management`` request/response pairs,
and writes ``invoke`` then ``ok``/``fail``/``info`` events in the trace format
(``spec/trace-format.md``). Wire facts used (``/work/shared/notes/amqp-wire.md``, checked
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

import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlparse

from proton import Described, Message

from ..server.server import CONDITIONS
from .codec import CodecError, decode_value
from .frames import (ATTACH, BEGIN, CLOSE, DETACH, DISPOSITION, END, FLOW, OPEN, SASL_INIT, TRANSFER, Frame, FrameError,
                     decode, decode_typed, encode_frame, peek, summary, with_payload)
from .frames import field as fld

BATCH_FORMAT = 0x80013700
ACCEPTED, REJECTED, RELEASED, MODIFIED = 0x24, 0x25, 0x26, 0x27
SESSION_FILTER = "com.microsoft:session-filter"
LOCKED_UNTIL_UTC = "com.microsoft:locked-until-utc"
TICKS_AT_EPOCH = 621355968000000000
DLQ = "/$deadletterqueue"
#: unsettled deliveries remembered per session (a receiver letting locks expire forever stays bounded)
MAX_UNSETTLED = 100_000

CODE_OF_CONDITION = {condition: code.value for code, condition in CONDITIONS.items()}
CODE_OF_CONDITION.update({"com.microsoft:auth-failed": "unauthorized", "amqp:resource-limit-exceeded": "quota-exceeded",
                          "com.microsoft:message-lock-lost": "message-lock-lost", "amqp:link:detach-forced": "connection-lost",
                          "amqp:connection:forced": "connection-lost"})
CODE_OF_STATUS = {401: "unauthorized", 404: "message-not-found", 409: "session-cannot-be-locked", 410: "message-lock-lost",
                  413: "message-size-exceeded", 403: "quota-exceeded", 408: "timeout", 503: "server-busy", 400: "argument-error"}
MANAGEMENT_SETTLEMENT = {"completed": "complete", "abandoned": "abandon", "defered": "defer", "deferred": "defer", "suspended": "dead-letter"}


def piece_of(path: str | None) -> str:
    """The queue or topic an entity path belongs to (lower case): the replay checker's piece."""
    p = (path or "").lower()
    cut = p.find("/subscriptions/")
    if cut >= 0:
        return p[:cut]
    return p[: -len(DLQ)] if p.endswith(DLQ) else p


def entity_path(address: str | None) -> str:
    if not address:
        return ""
    address = str(address)
    if "://" in address:
        return urlparse(address).path.strip("/")
    return address.strip("/")


def condition_code(error: Any) -> str | None:
    """The ErrorCode value of an AMQP error (a described list: condition, description, info)."""
    if isinstance(error, Described) and isinstance(error.value, list) and error.value:
        return CODE_OF_CONDITION.get(str(error.value[0]), "invalid-operation")
    return None


def state_code(state: Any) -> int | None:
    if isinstance(state, Described):
        try:
            return int(state.descriptor)
        except (TypeError, ValueError):
            return None
    return None


def _jsonable(value: Any, depth: int = 0) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()[:128]
    if depth > 3:
        return str(value)[:128]
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in list(value.items())[:64]}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in list(value)[:64]]
    return str(value)[:256]


def _ms(value: Any) -> int | None:
    return None if value is None else int(value)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass
class Msg:
    """What the trace needs of one message."""

    message_id: str | None
    session: str | None
    partition_key: str | None
    seq: int | None
    delivery_count: int | None
    args: dict
    result: dict


def read_message(data: bytes, sending: bool = True) -> Msg:
    """What the trace needs of an encoded message (its sections, AMQP 1.0 part 3.2). A
    delivered message's application properties are read only for its dead-letter reason."""
    buf = bytes(data)
    pos, n = 0, len(buf)
    header: list = []
    ann: dict = {}
    props: list = []
    app: dict = {}
    size = 0
    sized = False
    while pos < n:
        section, pos = decode_value(buf, pos)
        if not isinstance(section, Described):
            raise CodecError("a message section that is not described")
        code = section.descriptor
        value = section.value
        if code == 0x70 and isinstance(value, list):
            header = value
        elif code == 0x72 and isinstance(value, dict):
            ann = {str(k): v for k, v in value.items()}
        elif code == 0x73 and isinstance(value, list):
            props = value
        elif code == 0x74 and isinstance(value, dict):
            app = value if sending else {k: value[k] for k in ("DeadLetterReason", "DeadLetterErrorDescription") if k in value}
        elif code == 0x75 and isinstance(value, bytes):
            size += len(value)
            sized = True
        elif code == 0x77 and isinstance(value, (bytes, str)):
            size += len(value)
            sized = True
    ttl = fld(header, 2)
    args = {k: v for k, v in {
        "body_size": size if sized else None, "ttl": int(ttl) if ttl else None,
        "content_type": _str(fld(props, 6)), "correlation_id": _str(fld(props, 5)),
        "subject": _str(fld(props, 3)), "to": _str(fld(props, 2)), "reply_to": _str(fld(props, 4)),
        "properties": _jsonable(app) if app and sending else None,
        "scheduled": _ms(ann.get("x-opt-scheduled-enqueue-time")),
    }.items() if v is not None}
    state = ann.get("x-opt-message-state")
    result = {k: v for k, v in {
        "enqueued_time_utc": _ms(ann.get("x-opt-enqueued-time")), "locked_until_utc": _ms(ann.get("x-opt-locked-until")),
        "state": {1: "deferred", 2: "scheduled"}.get(state) if isinstance(state, int) else None,
        "dead_letter_reason": _str(app.get("DeadLetterReason")),
        "dead_letter_description": _str(app.get("DeadLetterErrorDescription")),
        "dead_letter_source": _str(ann.get("x-opt-deadletter-source")), "body_size": size if sized else None,
    }.items() if v is not None}
    seq = ann.get("x-opt-sequence-number")
    count = fld(header, 4, 0)
    return Msg(_str(fld(props, 0)), _str(fld(props, 10)), _str(ann.get("x-opt-partition-key")),
               int(seq) if isinstance(seq, int) else None, int(count) + 1 if isinstance(count, int) else None, args, result)


@dataclass
class HeldSend:
    client: str
    conn: str
    op_id: int
    entity: str
    invoked: int
    completed: int
    msg: Msg
    args: dict


@dataclass
class LockInfo:
    client: str
    entity: str
    seq: int | None
    message_id: str | None
    session: str | None
    partition: int | None


class Recording:
    """What every connection of one recording shares: the sink, the numbering of clients
    and connections, held sends, locks seen, entity descriptions."""

    MAX_HELD = 200_000
    MAX_LOCKS = 200_000

    def __init__(self, sink: Any, cbs: Callable[[Message], Message] | None = None, record_attach: bool = False) -> None:
        self.sink = sink
        #: write successful attaches too (the replay checker does not model ``attach`` yet: a
        #: piece holding one is 'unknown'; failed attaches are always written, as they change nothing)
        self.record_attach = record_attach
        self.cbs = cbs  # rewrites a client's put-token request for the upstream
        self.rewrite_host: str | None = None  # the upstream host name (Azure: OPEN and SASL hostname, addresses)
        self.clients = 0
        self.conns = 0
        self.held: dict[tuple[str, str], deque[HeldSend]] = {}
        self.held_count = 0
        self.locks: dict[str, LockInfo] = {}
        self.descriptions: dict[str, dict | None] = {}

    def new_client(self) -> str:
        self.clients += 1
        return f"c{self.clients}"

    def new_conn(self) -> str:
        self.conns += 1
        return f"conn{self.conns}"

    def partitioned(self, entity: str) -> bool:
        d = self.descriptions.get(piece_of(entity))
        return bool(d and d.get("enable_partitioning"))

    # -- descriptions
    def needs_description(self, path: str) -> bool:
        return bool(path) and piece_of(path) not in self.descriptions

    def described(self, path: str, description: dict | None, error: str | None = None) -> None:
        """Record an entity's description (read out of band at its first attach) as the
        piece's ``create-entity`` event: the replay checker's only entry point for an
        entity's lock duration, max delivery count, sessions and partitioning."""
        key = piece_of(path)
        if key in self.descriptions:
            return
        self.descriptions[key] = description
        if description is None:
            return
        base = path[: -len(DLQ)] if path.lower().endswith(DLQ) else path
        op = self.sink.op()
        now = self.sink.now()
        kind = "subscription" if "/subscriptions/" in base.lower() else description.get("kind", "queue")
        desc = {k: v for k, v in description.items() if k != "kind"}
        self.sink.write("admin", op, "create-entity", "invoke", now, entity=base, args=desc)
        self.sink.write("admin", op, "create-entity", "ok", now, entity=base,
                        result={"path": base, "kind": kind, "description": desc, "existing": True,
                                "note": "described by the recording proxy at the entity's first attach"})

    # -- held sends
    def hold(self, send: HeldSend) -> None:
        if send.msg.message_id is None:
            self._write_send(send, None)
            return
        key = (piece_of(send.entity), send.msg.message_id)
        self.held.setdefault(key, deque()).append(send)
        self.held_count += 1
        if self.held_count > self.MAX_HELD:  # bounded: the oldest is written as unplaceable
            oldest_key = next(iter(self.held))
            q = self.held[oldest_key]
            self._write_send(q.popleft(), None)
            self.held_count -= 1
            if not q:
                del self.held[oldest_key]

    def observed(self, entity: str, message_id: str | None, seq: int | None) -> None:
        """A message was seen with its sequence number: write the send that put it there."""
        if message_id is None or seq is None or not self.held:
            return
        key = (piece_of(entity), message_id)
        q = self.held.get(key)
        if not q:
            return
        send = q.popleft()
        self.held_count -= 1
        if not q:
            del self.held[key]
        self._write_send(send, seq)

    def _write_send(self, send: HeldSend, seq: int | None) -> None:
        m = send.msg
        common = dict(conn=send.conn, entity=send.entity, message_id=m.message_id, session=m.session, partition_key=m.partition_key)
        self.sink.write(send.client, send.op_id, "send", "invoke", send.invoked, args=send.args, **common)
        if seq is None:
            self.sink.write(send.client, send.op_id, "send", "info", send.completed, **common,
                            result={"accepted": True, "seq_unknown": "never observed by the proxy"})
        else:
            partition = seq >> 48 if self.partitioned(send.entity) else None
            self.sink.write(send.client, send.op_id, "send", "ok", send.completed, seq=seq, partition=partition, **common)

    def remember_lock(self, lock: str, info: LockInfo) -> None:
        if len(self.locks) >= self.MAX_LOCKS:
            del self.locks[next(iter(self.locks))]
        self.locks[lock] = info

    def finish(self) -> None:
        """End of the recording: held sends never observed are written as unplaceable."""
        for q in list(self.held.values()):
            for send in q:
                self._write_send(send, None)
        self.held.clear()
        self.held_count = 0


@dataclass
class Link:
    name: str
    client_is_sender: bool
    address: str
    path: str
    kind: str  # cbs | management | control | entity
    client: str = ""
    mode: str = "peek-lock"
    session: str | None = None  # a session receiver's session (requested, then locked)
    session_receiver: bool = False
    attach_op: tuple | None = None  # (op_id, op, args)
    attach_time: int = 0
    close_op: int | None = None
    credit: int = 0
    partial: dict | None = None  # a multi-frame transfer being assembled


@dataclass
class Sess:
    c_handles: dict = field(default_factory=dict)
    b_handles: dict = field(default_factory=dict)
    names: dict = field(default_factory=dict)  # (name, client_is_sender) -> Link
    out_dlv: dict = field(default_factory=dict)  # client-sent delivery id -> (link, [HeldSend])
    in_dlv: dict = field(default_factory=dict)  # broker-sent delivery id -> dict
    settling: dict = field(default_factory=dict)  # broker-sent delivery id -> (op_id, op, client, fields)
    next_in: int | None = None
    next_out: int | None = None


class ConnInterp:
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

    def unrecognised(self, frame: Frame, why: str, link: Link | None = None) -> None:
        op = self.sink.op()
        client = link.client if link is not None and link.client else "admin"
        entity = link.path if link is not None else None
        fields = dict(entity=entity, result={"unrecognised": why, "frame": summary(frame)})
        self.ev(client, op, "describe-entity", "invoke", entity=entity)
        self.ev(client, op, "describe-entity", "info", **fields)

    def _session_c(self, channel: int) -> Sess:
        s = self.sessions.get(channel)
        if s is None:
            s = self.sessions[channel] = Sess()
        return s

    def _session_b(self, channel: int) -> Sess | None:
        c = self.b2c.get(channel)
        return None if c is None else self.sessions.get(c)

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

    def _client_acts(self, code: int, fields: list) -> None:
        """The client acted: peek-lock receives waiting for its reaction end now."""
        if not self.pending_ok:
            return
        released = set()
        if code == DISPOSITION and fld(fields, 0) is True and state_code(fld(fields, 4)) == RELEASED:
            first = int(fields[1])
            last = int(fld(fields, 2, first))
            released = {i for i in range(first, last + 1)}
        pending, self.pending_ok = self.pending_ok, {}
        for (channel, did), (op_id, client, common, result) in pending.items():
            if did in released:
                self.ev(client, op_id, "receive", "fail", error="invalid-operation", **common,
                        result={**result, "released": True, "note": "handed back unprocessed (AMQP released): not delivered"})
                s = self.sessions.get(channel)
                if s is not None:
                    s.in_dlv.pop(did, None)
            else:
                self.ev(client, op_id, "receive", "ok", **common, result=result)

    def _link_of_attach(self, fields: list) -> Link:
        name = str(fld(fields, 0, ""))
        client_is_sender = not bool(fld(fields, 2, False))
        terminus = fld(fields, 6) if client_is_sender else fld(fields, 5)
        address = ""
        if isinstance(terminus, Described) and isinstance(terminus.value, list) and terminus.value:
            address = str(terminus.value[0] or "")
        path = entity_path(address)
        low = path.lower()
        kind = ("cbs" if low == "$cbs" else "control" if low == "$sbconform" else
                "management" if low.endswith("$management") else "entity")
        return Link(name, client_is_sender, address, path, kind)

    def _client_attach(self, frame: Frame, fields: list) -> bytes | None:
        s = self._session_c(frame.channel)
        link = self._link_of_attach(fields)
        s.c_handles[fld(fields, 1, 0)] = link
        s.names[(link.name, link.client_is_sender)] = link
        if link.kind != "entity":
            return self._rewrite_address(frame, link)
        link.client = self.rec.new_client()
        self.entities.setdefault(link.path, link.client)
        op = self.sink.op()
        if link.client_is_sender:
            link.attach_op = (op, "attach", {"kind": "sender"})
            self._attach_invoke(link)
        else:
            link.mode = "receive-and-delete" if fld(fields, 3) == 1 else "peek-lock"
            source = fields[5]
            filters = source.value[7] if isinstance(source, Described) and len(source.value) > 7 else None
            if isinstance(filters, dict) and any(str(k) == SESSION_FILTER for k in filters):
                wanted = next(v for k, v in filters.items() if str(k) == SESSION_FILTER)
                link.session_receiver = True
                link.session = _str(wanted)
                props = {str(k): v for k, v in (fld(fields, 13) or {}).items()}
                args = {"mode": link.mode, "session": link.session, "max_wait": _ms(props.get("com.microsoft:timeout"))}
                link.attach_op = (op, "accept-session", args)
                self.ev(link.client, op, "accept-session", "invoke", entity=link.path, session=link.session, args=args)
            else:
                link.attach_op = (op, "attach", {"kind": "receiver", "mode": link.mode})
                self._attach_invoke(link)
        return self._rewrite_address(frame, link)

    def _rewrite_address(self, frame: Frame, link: Link) -> bytes | None:
        """Towards Azure: the link address's host is the namespace's, not the proxy's."""
        if not (self.rec.rewrite_host and "://" in link.address):
            return None
        _, fields, _ = decode_typed(frame)
        fields = list(fields)
        index = 6 if link.client_is_sender else 5
        term = fields[index]
        values = list(term.value)
        values[0] = urlparse(link.address)._replace(netloc=self.rec.rewrite_host).geturl()
        fields[index] = Described(term.descriptor, values)
        return encode_frame(frame, ATTACH, fields)

    def _attach_invoke(self, link: Link, time_ms: int | None = None) -> None:
        """A plain attach's invoke: now if successful attaches are recorded, else only
        once it is known to have failed (with the time it was asked)."""
        op, op_name, args = link.attach_op
        if self.rec.record_attach or time_ms is not None:
            self.ev(link.client, op, op_name, "invoke", time_ms, entity=link.path, args=args)
        else:
            link.attach_time = self.sink.now()

    def _attach_outcome(self, link: Link, phase: str, **fields: Any) -> None:
        op, op_name, args = link.attach_op
        if op_name == "attach" and not self.rec.record_attach:
            if phase == "ok":
                link.attach_op = None
                return
            self._attach_invoke(link, link.attach_time)
        link.attach_op = None
        self.ev(link.client, op, op_name, phase, entity=link.path, **fields)

    def _assemble(self, link: Link, s: Sess, fields: list, payload: memoryview, incoming: bool) -> dict | None:
        """A whole delivery once its last frame came: {id, tag, settled, format, payload}."""
        part = link.partial
        if part is None:
            did = fld(fields, 1)
            if did is None:
                did = s.next_in if incoming else s.next_out
            part = {"id": None if did is None else int(did), "tag": bytes(fld(fields, 2, b"")), "settled": bool(fld(fields, 4, False)),
                    "format": int(fld(fields, 3, 0)), "payload": bytearray()}
            if part["id"] is not None:
                if incoming:
                    s.next_in = part["id"] + 1
                else:
                    s.next_out = part["id"] + 1
        elif fld(fields, 4):
            part["settled"] = True
        if fld(fields, 9, False):  # aborted
            link.partial = None
            return None
        part["payload"] += payload
        if fld(fields, 5, False):
            link.partial = part
            return None
        link.partial = None
        return part

    def _client_transfer(self, frame: Frame, fields: list, payload: memoryview) -> bytes | None:
        s = self._session_c(frame.channel)
        link = s.c_handles.get(fld(fields, 0))
        if link is None:
            self.unrecognised(frame, "transfer on a link the proxy did not see attached")
            return None
        if link.kind == "cbs":
            if fld(fields, 5, False) or link.partial is not None or self.rec.cbs is None:
                return None  # a multi-frame put-token is relayed as is
            request = Message()
            request.decode(bytes(payload))
            rewritten = self.rec.cbs(request)
            return with_payload(frame, len(frame.body) - len(payload), rewritten.encode())
        d = self._assemble(link, s, fields, payload, incoming=False)
        if d is None:
            return None
        if link.kind == "management":
            self._management_request(link, d)
        elif link.kind == "entity" and link.client_is_sender:
            self._send(link, s, d)
        return None

    def _send(self, link: Link, s: Sess, d: dict) -> None:
        now = self.sink.now()
        try:
            if d["format"] == BATCH_FORMAT:
                from ..server.wire import data_sections

                msgs = [read_message(x) for x in data_sections(bytes(d["payload"]))]
            else:
                msgs = [read_message(d["payload"])]
        except Exception as error:
            op = self.sink.op()
            self.ev(link.client, op, "send", "invoke", now, entity=link.path, args={"undecodable": str(error)[:200]})
            self.ev(link.client, op, "send", "info", now, entity=link.path,
                    result={"unrecognised": f"message not decodable: {error}"[:300], "bytes": len(d["payload"])})
            return
        sends = []
        batch = None
        for m in msgs:
            op = self.sink.op()
            args = dict(m.args)
            if d["format"] == BATCH_FORMAT:
                batch = op if batch is None else batch
                args["batch"] = batch
            if d["settled"]:
                args["presettled"] = True
            sends.append(HeldSend(link.client, self.conn, op, link.path, now, now, m, args))
        if d["settled"] or d["id"] is None:
            for h in sends:
                common = dict(entity=h.entity, message_id=h.msg.message_id, session=h.msg.session, partition_key=h.msg.partition_key)
                self.ev(h.client, h.op_id, "send", "invoke", now, args=h.args, **common)
                self.ev(h.client, h.op_id, "send", "info", now, **common)
            return
        s.out_dlv[d["id"]] = (link, sends)

    def _client_disposition(self, frame: Frame, fields: list) -> None:
        if not fld(fields, 0, False):
            return  # the client as sender settling its own transfers: nothing to record
        s = self._session_c(frame.channel)
        first = int(fld(fields, 1, 0))
        last = int(fld(fields, 2, first))
        settled = bool(fld(fields, 3, False))
        state = fld(fields, 4)
        code = state_code(state)
        if code == RELEASED or code is None:
            for did in range(first, last + 1):
                s.in_dlv.pop(did, None)
            return
        if code == ACCEPTED:
            op_name = "complete"
        elif code == REJECTED:
            op_name = "dead-letter"
        elif code == MODIFIED:
            values = state.value if isinstance(state.value, list) else []
            op_name = "defer" if fld(values, 1, False) else "abandon"
        else:
            return
        args = None
        if op_name == "dead-letter":
            err = fld(state.value if isinstance(state.value, list) else [], 0)
            info = {}
            if isinstance(err, Described) and isinstance(err.value, list):
                info = {str(k): v for k, v in (fld(err.value, 2) or {}).items()}
            args = {"reason": _str(info.get("DeadLetterReason")), "description": _str(info.get("DeadLetterErrorDescription"))}
        for did in range(first, min(last, first + 10_000) + 1):
            dlv = s.in_dlv.get(did)
            if dlv is None or dlv.get("lock") is None:
                continue
            op = self.sink.op()
            common = dict(entity=dlv["entity"], lock=dlv["lock"], message_id=dlv["message_id"], seq=dlv["seq"],
                          session=dlv["session"], partition=dlv["partition"])
            self.ev(dlv["client"], op, op_name, "invoke", args=args, **common)
            if settled:
                s.in_dlv.pop(did, None)
                self.ev(dlv["client"], op, op_name, "info", **common,
                        result={"note": "settled by the client: the broker's outcome is not on the wire"})
            else:
                s.settling[did] = (op, op_name, dlv["client"], common)

    # ---------------------------------------------------------------- broker -> client
    def from_broker(self, frame: Frame) -> None:
        if frame.header or frame.type != 0:
            return
        try:
            code, fields, payload = decode(frame)
        except FrameError as error:
            self.unrecognised(frame, f"from the broker: {error}")
            return
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

    def _broker_attach(self, frame: Frame, fields: list) -> None:
        s = self._session_b(frame.channel)
        if s is None:
            return
        name = str(fld(fields, 0, ""))
        broker_is_sender = not bool(fld(fields, 2, False))
        link = s.names.get((name, not broker_is_sender))
        if link is None:
            return
        s.b_handles[fld(fields, 1, 0)] = link
        if link.attach_op is None:
            return
        terminus = fld(fields, 6) if link.client_is_sender else fld(fields, 5)
        if terminus is None:
            return  # refused: the detach that follows says why
        op, op_name, _ = link.attach_op
        if op_name == "accept-session":
            filters = terminus.value[7] if isinstance(terminus, Described) and len(terminus.value) > 7 else None
            if isinstance(filters, dict):
                got = next((v for k, v in filters.items() if str(k) == SESSION_FILTER), None)
                if got is not None:
                    link.session = str(got)
            props = {str(k): v for k, v in (fld(fields, 13) or {}).items()}
            ticks = props.get(LOCKED_UNTIL_UTC)
            result = {"locked_until_utc": (int(ticks) - TICKS_AT_EPOCH) // 10_000} if ticks is not None else None
            self._attach_outcome(link, "ok", session=link.session, result=result)
        else:
            self._attach_outcome(link, "ok")

    def _broker_detach(self, frame: Frame, fields: list) -> None:
        s = self._session_b(frame.channel)
        if s is None:
            return
        link = s.b_handles.pop(fld(fields, 0), None)
        if link is None or link.kind != "entity":
            return
        code = condition_code(fld(fields, 2))
        if link.attach_op is not None:
            self._attach_outcome(link, "fail", session=link.session, error=code or "invalid-operation")
        elif link.close_op is not None:
            op, link.close_op = link.close_op, None
            self.ev(link.client, op, "close", "ok", entity=link.path, session=link.session)

    def _broker_transfer(self, frame: Frame, fields: list, payload: memoryview) -> None:
        s = self._session_b(frame.channel)
        if s is None:
            self.unrecognised(frame, "transfer from the broker on a session the proxy did not see begin")
            return
        link = s.b_handles.get(fld(fields, 0))
        if link is None:
            self.unrecognised(frame, "transfer from the broker on a link the proxy did not see attached")
            return
        if link.kind in ("cbs", "control"):
            return
        d = self._assemble(link, s, fields, payload, incoming=True)
        if d is None:
            return
        if link.kind == "management":
            self._management_response(link, d)
            return
        if link.client_is_sender:
            return
        try:
            m = read_message(d["payload"], sending=False)
        except Exception as error:
            op = self.sink.op()
            self.ev(link.client, op, "receive", "invoke", entity=link.path)
            self.ev(link.client, op, "receive", "info", entity=link.path, result={"unrecognised": f"message not decodable: {error}"[:300]})
            return
        self.rec.observed(link.path, m.message_id, m.seq)
        peek_lock = link.mode == "peek-lock" and not d["settled"]
        lock = str(uuid.UUID(bytes_le=d["tag"])) if peek_lock and len(d["tag"]) == 16 else None
        partition = m.seq >> 48 if m.seq is not None and self.rec.partitioned(link.path) else None
        session = m.session if m.session is not None else link.session
        op = self.sink.op()
        args = {"mode": link.mode, "max_count": link.credit}
        self.ev(link.client, op, "receive", "invoke", entity=link.path, session=link.session, args=args)
        common = dict(entity=link.path, message_id=m.message_id, seq=m.seq, lock=lock, delivery_count=m.delivery_count,
                      session=session, partition_key=m.partition_key, partition=partition)
        if d["id"] is not None and not d["settled"]:
            if len(s.in_dlv) >= MAX_UNSETTLED:  # bounded: the oldest unsettled delivery is forgotten
                del s.in_dlv[next(iter(s.in_dlv))]
            s.in_dlv[d["id"]] = {"client": link.client, "entity": link.path, "lock": lock, "message_id": m.message_id,
                                 "seq": m.seq, "session": session, "partition": partition}
            if lock is not None:
                self.rec.remember_lock(lock, LockInfo(link.client, link.path, m.seq, m.message_id, session, partition))
            c = self.b2c.get(frame.channel)
            self.pending_ok[(c, d["id"])] = (op, link.client, common, m.result)
        else:
            self.ev(link.client, op, "receive", "ok", **common, result=m.result)

    def _broker_disposition(self, frame: Frame, fields: list) -> None:
        s = self._session_b(frame.channel)
        if s is None:
            return
        role_receiver = bool(fld(fields, 0, False))
        first = int(fld(fields, 1, 0))
        last = int(fld(fields, 2, first))
        state = fld(fields, 4)
        code = state_code(state)
        err = None
        if code == REJECTED and isinstance(state.value, list):
            err = condition_code(fld(state.value, 0))
        now = self.sink.now()
        for did in range(first, min(last, first + 10_000) + 1):
            if role_receiver:  # outcomes of the client's sends
                entry = s.out_dlv.pop(did, None)
                if entry is None:
                    continue
                link, sends = entry
                for h in sends:
                    h.completed = now
                    common = dict(entity=h.entity, message_id=h.msg.message_id, session=h.msg.session, partition_key=h.msg.partition_key)
                    if code == ACCEPTED:
                        self.rec.hold(h)
                    elif code == REJECTED:
                        self.ev(h.client, h.op_id, "send", "invoke", h.invoked, args=h.args, **common)
                        self.ev(h.client, h.op_id, "send", "fail", now, error=err or "invalid-operation", **common)
                    else:
                        self.ev(h.client, h.op_id, "send", "invoke", h.invoked, args=h.args, **common)
                        self.ev(h.client, h.op_id, "send", "info", now, **common, result={"outcome": str(state)[:200]})
            else:  # answers to the client's settlements
                pending = s.settling.pop(did, None)
                if pending is None:
                    continue
                s.in_dlv.pop(did, None)
                op, op_name, client, common = pending
                if err is not None:
                    self.ev(client, op, op_name, "fail", error=err, **common)
                else:
                    self.ev(client, op, op_name, "ok", **common)

    # ---------------------------------------------------------------- management
    def _management_request(self, link: Link, d: dict) -> None:
        try:
            request = Message()
            request.decode(bytes(d["payload"]))
        except Exception as error:
            op = self.sink.op()
            self.ev(link.client or "admin", op, "describe-entity", "invoke", entity=link.path)
            self.ev(link.client or "admin", op, "describe-entity", "info", entity=link.path,
                    result={"unrecognised": f"management request not decodable: {error}"[:300]})
            return
        props = {str(k): v for k, v in (request.properties or {}).items()}
        operation = str(props.get("operation", ""))
        body = request.body if isinstance(request.body, dict) else {}
        body = {str(k): v for k, v in body.items()}
        entity = link.path[: -len("/$management")] if link.path.lower().endswith("/$management") else link.path
        ops: list[tuple] = []  # (op_id, op, client, fields)
        sid = _str(body.get("session-id"))
        default_client = self._client_on(entity, sid)

        def add(op_name: str, client: str, args: dict | None = None, **fields: Any) -> None:
            op = self.sink.op()
            fields = {k: v for k, v in fields.items() if v is not None}
            self.ev(client, op, op_name, "invoke", entity=fields.pop("entity", entity), args=args, **fields)
            ops.append((op, op_name, client, fields))

        short = operation.rsplit(":", 1)[-1]
        if short in ("renew-lock", "update-disposition"):
            status = str(body.get("disposition-status", ""))
            op_name = "renew-lock" if short == "renew-lock" else MANAGEMENT_SETTLEMENT.get(status)
            if op_name is None:
                return self._unknown_management(link, entity, operation, f"disposition-status {status!r}", request, ops)
            args = None
            if op_name == "dead-letter":
                args = {"reason": _str(body.get("deadletter-reason")), "description": _str(body.get("deadletter-description"))}
            for token in list(body.get("lock-tokens") or [])[:10_000]:
                lock = str(token if isinstance(token, uuid.UUID) else uuid.UUID(bytes=bytes(token)) if isinstance(token, (bytes, bytearray)) else token)
                info = self.rec.locks.get(lock)
                if info is not None:
                    add(op_name, info.client, args, entity=info.entity, lock=lock, message_id=info.message_id, seq=info.seq,
                        session=info.session, partition=info.partition)
                else:
                    add(op_name, default_client, args, lock=lock, session=sid)
        elif short == "peek-message":
            add("peek", default_client, {"max_count": _ms(body.get("message-count")), "from_seq": _ms(body.get("from-sequence-number"))}, session=sid)
        elif short == "schedule-message":
            for entry in list(body.get("messages") or [])[:10_000]:
                entry = {str(k): v for k, v in dict(entry).items()}
                try:
                    m = read_message(bytes(entry.get("message") or b""))
                    args = dict(m.args)
                    args["enqueue_time_utc"] = args.pop("scheduled", None)
                except Exception:
                    m, args = None, {}
                add("schedule", default_client, args, message_id=_str(entry.get("message-id")) or (m.message_id if m else None),
                    session=(m.session if m else None) or _str(entry.get("session-id")),
                    partition_key=(m.partition_key if m else None) or _str(entry.get("partition-key")))
        elif short == "cancel-scheduled-message":
            seqs = list(body.get("sequence-numbers") or [])[:10_000]
            batch = None
            for n in seqs:
                op_args = {"batch": batch} if batch is not None else None
                add("cancel-scheduled", default_client, op_args, seq=int(n))
                batch = ops[0][0] if batch is None and len(seqs) > 1 else batch
        elif short == "receive-by-sequence-number":
            mode = "receive-and-delete" if int(body.get("receiver-settle-mode", 1) or 0) == 0 else "peek-lock"
            add("receive-deferred", default_client, {"seqs": [int(n) for n in list(body.get("sequence-numbers") or [])[:10_000]], "mode": mode},
                session=sid)
        elif short in ("renew-session-lock", "get-session-state", "set-session-state"):
            args = None
            if short == "set-session-state":
                import base64

                state = body.get("session-state")
                args = {"state": None if state is None else base64.b64encode(bytes(state)).decode()}
            add(short, default_client, args, session=sid)
        else:
            return self._unknown_management(link, entity, operation, "operation not interpreted", request, ops)
        self._pend_management(request, ops, short, entity)

    def _unknown_management(self, link, entity, operation, why, request, ops) -> None:
        op = self.sink.op()
        client = self._client_on(entity, None)
        self.ev(client, op, "describe-entity", "invoke", entity=entity, args={"operation": operation})
        ops.append((op, "describe-entity", client, {}))
        self._pend_management(request, ops, "unrecognised", entity, why)

    def _pend_management(self, request: Message, ops: list, short: str, entity: str, why: str | None = None) -> None:
        key = _str(request.id)
        if key is None or len(self.mgmt) > 10_000:
            for op, op_name, client, fields in ops:
                self.ev(client, op, op_name, "info", entity=entity, **fields, result={"note": "no message-id: the answer cannot be matched"})
            return
        self.mgmt[key] = {"ops": ops, "short": short, "entity": entity, "why": why}

    def _client_on(self, entity: str, session: str | None) -> str:
        """The client a management request acts for: the receiver on that entity (of that
        session) on this connection, else any link on the entity."""
        best = None
        for s in self.sessions.values():
            for link in s.c_handles.values():
                if link.kind == "entity" and link.path.lower() == entity.lower():
                    if session is not None and link.session == session:
                        return link.client
                    best = best or link.client
        return best or self.entities.get(entity) or "admin"

    def _management_response(self, link: Link, d: dict) -> None:
        try:
            response = Message()
            response.decode(bytes(d["payload"]))
        except Exception:
            return
        pending = self.mgmt.pop(_str(response.correlation_id), None)
        if pending is None:
            return
        props = {str(k): v for k, v in (response.properties or {}).items()}
        status = props.get("statusCode", props.get("status-code"))
        status = int(status) if status is not None else 500
        body = response.body if isinstance(response.body, dict) else {}
        body = {str(k): v for k, v in body.items()}
        entity = pending["entity"]
        short = pending["short"]
        if short == "unrecognised":
            for op, op_name, client, fields in pending["ops"]:
                self.ev(client, op, op_name, "info", entity=entity, **fields,
                        result={"unrecognised": pending["why"], "status": status, "body": _jsonable(body)})
            return
        if not 200 <= status < 300:
            cond = props.get("errorCondition") or props.get("com.microsoft:error-condition")
            code = CODE_OF_CONDITION.get(str(cond)) if cond is not None else None
            code = code or CODE_OF_STATUS.get(status, "invalid-operation")
            for op, op_name, client, fields in pending["ops"]:
                self.ev(client, op, op_name, "fail", entity=fields.get("entity", entity),
                        **{k: v for k, v in fields.items() if k != "entity"}, error=code)
            return
        ops = pending["ops"]
        if short in ("peek-message", "receive-by-sequence-number"):
            op, op_name, client, fields = ops[0]
            entries = list(body.get("messages") or []) if status == 200 else []
            if not entries:
                self.ev(client, op, op_name, "ok", entity=entity, session=fields.get("session"), result={"count": 0})
                return
            for entry in entries[:10_000]:
                entry = {str(k): v for k, v in dict(entry).items()}
                try:
                    m = read_message(bytes(entry.get("message") or b""))
                except Exception:
                    continue
                self.rec.observed(entity, m.message_id, m.seq)
                lock = None
                if short == "receive-by-sequence-number" and entry.get("lock-token") is not None:
                    token = entry["lock-token"]
                    lock = str(token if isinstance(token, uuid.UUID) else uuid.UUID(bytes=bytes(token)))
                partition = m.seq >> 48 if m.seq is not None and self.rec.partitioned(entity) else None
                if lock is not None:
                    self.rec.remember_lock(lock, LockInfo(client, entity, m.seq, m.message_id, m.session, partition))
                self.ev(client, op, op_name, "ok", entity=entity, message_id=m.message_id, seq=m.seq, lock=lock,
                        delivery_count=m.delivery_count, session=m.session, partition_key=m.partition_key, partition=partition,
                        result=m.result)
            return
        if short == "schedule-message":
            seqs = list(body.get("sequence-numbers") or [])
            for i, (op, op_name, client, fields) in enumerate(ops):
                seq = int(seqs[i]) if i < len(seqs) else None
                self.ev(client, op, op_name, "ok", entity=entity, seq=seq, **{k: v for k, v in fields.items() if k != "entity"})
            return
        if short == "renew-lock":
            expirations = list(body.get("expirations") or [])
            for i, (op, op_name, client, fields) in enumerate(ops):
                until = int(expirations[i]) if i < len(expirations) else None
                # the broker's clock, not the trace's: result.locked_until (compared exactly by the
                # replay checker against the model's) is left out; see the module docstring
                self.ev(client, op, op_name, "ok", entity=fields.get("entity", entity),
                        **{k: v for k, v in fields.items() if k != "entity"}, result={"locked_until_utc": until})
            return
        for op, op_name, client, fields in ops:
            result = None
            if short == "renew-session-lock" and body.get("expiration") is not None:
                result = {"locked_until_utc": int(body["expiration"])}
            elif short == "get-session-state":
                import base64

                state = body.get("session-state")
                result = {"state": None if state is None else base64.b64encode(bytes(state)).decode()}
            self.ev(client, op, op_name, "ok", entity=fields.get("entity", entity),
                    **{k: v for k, v in fields.items() if k != "entity"}, result=result)

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
