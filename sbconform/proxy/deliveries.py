"""Deliveries of one proxied connection: the client's sends (held until their sequence
number is seen), the broker's deliveries (``receive``), the settlement exchange
(``complete``, ``abandon``, ``defer``, ``dead-letter``) and their outcomes."""

from __future__ import annotations

import uuid

from proton import Message

from ..amqp.values import Described
from .frames import DISPOSITION, Frame, with_payload
from .frames import field as fld
from .links import Link, Sess
from .messages import (ACCEPTED, BATCH_FORMAT, MAX_UNSETTLED, MODIFIED, REJECTED, RELEASED, _jsonable, _str,
                       condition_code, data_sections, read_message, state_code)
from .recording import HeldSend, LockInfo


class Deliveries:
    """Mixin of ``ConnInterp``: transfers and dispositions."""

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
        elif link.kind == "coordinator":  # recorded as not interpreted, never dropped silently
            self.unrecognised(frame, "transaction control (declare or discharge): transactions are not interpreted", link)
        return None

    def _send(self, link: Link, s: Sess, d: dict) -> None:
        now = self.sink.now()
        try:
            if d["format"] == BATCH_FORMAT:
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
        else:  # a transactional (or unknown) outcome: said, never dropped silently
            self.unrecognised(frame, "a settlement with a transactional or unknown outcome: not interpreted")
            return
        args = None
        if op_name == "dead-letter":
            err = fld(state.value if isinstance(state.value, list) else [], 0)
            info = {}
            if isinstance(err, Described) and isinstance(err.value, list):
                info = {str(k): v for k, v in (fld(err.value, 2) or {}).items()}
            args = {"reason": _str(info.pop("DeadLetterReason", None)), "description": _str(info.pop("DeadLetterErrorDescription", None))}
            if info:  # the rest of the error info: properties to modify (SETTLE-MOD-001)
                args["properties"] = {k: _jsonable(v) for k, v in info.items()}
        elif op_name in ("abandon", "defer"):
            annotations = fld(state.value if isinstance(state.value, list) else [], 2)
            if isinstance(annotations, dict) and annotations:  # the modified outcome's: properties to modify
                args = {"properties": {str(k): _jsonable(v) for k, v in annotations.items()}}
        for did in range(first, min(last, first + 10_000) + 1):
            dlv = s.in_dlv.get(did)
            if dlv is None:  # not a message the proxy saw delivered (or no longer holds: MAX_UNSETTLED)
                if op_name != "complete":  # (accepted: also how clients settle management and CBS replies)
                    self.unrecognised(frame, f"a {op_name} of delivery {did}, which the proxy did not see delivered")
                continue
            if dlv.get("lock") is None:
                continue  # received and deleted: nothing to settle
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
