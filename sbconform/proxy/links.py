"""Link and session bookkeeping of one proxied connection: sessions by channel (both
directions), links by handle (both directions, matched by name), attach and detach
outcomes (``attach``, ``accept-session``, ``close`` events), the upstream host name in
link addresses, and whole deliveries assembled from their transfer frames."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from proton import Described as ProtonDescribed

from ..amqp.values import Described
from .frames import ATTACH, Frame, decode_typed, encode_frame
from .frames import field as fld
from .messages import LOCKED_UNTIL_UTC, SESSION_FILTER, TICKS_AT_EPOCH, _ms, _str, condition_code, entity_path


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


class Links:
    """Mixin of ``ConnInterp``: sessions and links."""

    def _session_c(self, channel: int) -> Sess:
        s = self.sessions.get(channel)
        if s is None:
            s = self.sessions[channel] = Sess()
        return s

    def _session_b(self, channel: int) -> Sess | None:
        c = self.b2c.get(channel)
        return None if c is None else self.sessions.get(c)

    def _link_of_attach(self, fields: list) -> Link:
        name = str(fld(fields, 0, ""))
        client_is_sender = not bool(fld(fields, 2, False))
        terminus = fld(fields, 6) if client_is_sender else fld(fields, 5)
        address = ""
        if isinstance(terminus, Described) and _is_coordinator(terminus.descriptor):
            # a transaction coordinator (AMQP 1.0 part 4, 4.5.1: its target names no node)
            return Link(name, client_is_sender, "", "", "coordinator")
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
        fields[index] = ProtonDescribed(term.descriptor, values)
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


def _is_coordinator(descriptor: object) -> bool:
    """The coordinator target's descriptor: 0x30, or ``amqp:coordinator:list``."""
    return descriptor == 0x30 or str(descriptor) == "amqp:coordinator:list"
