"""``$management`` request/response pairs of one proxied connection (AMQP 1.0 in Azure
Service Bus: request-response operations): lock renewal and settlement by lock token,
peek, schedule, cancel, receive by sequence number, session lock and state."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from proton import Message
from .links import Link
from .messages import CODE_OF_CONDITION, CODE_OF_STATUS, MANAGEMENT_SETTLEMENT, _jsonable, _ms, _str, read_message
from .recording import LockInfo


class Management:
    """Mixin of ``ConnInterp``: the management operations."""

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
            modify = body.get("properties-to-modify")
            if isinstance(modify, dict) and modify and op_name in ("abandon", "defer", "dead-letter"):  # SETTLE-MOD-001
                args = {**(args or {}), "properties": {str(k): _jsonable(v) for k, v in modify.items()}}
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
        except Exception as error:
            self.unrecognised(None, f"a management response that does not decode ({type(error).__name__})", link)
            return
        pending = self.mgmt.pop(_str(response.correlation_id), None)
        if pending is None:
            self.unrecognised(None, f"a management response to no request the proxy saw (correlation id {response.correlation_id!r})", link)
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
