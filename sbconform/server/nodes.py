"""The request nodes of ``sbconform serve``: ``$cbs`` (put-token: the grants each connection
holds, with their expiry), each entity's ``$management`` node and our ``$sbconform`` control
node. Requests are decoded and answered here; the operations themselves are tables in
``management.py`` and ``control.py``, which return what changed (``Changes``) for the server
to act on (``_apply``)."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlparse

from proton import Message

from sbreference import ServiceBusError

from ..amqp import codec
from . import control, management
from . import values as v
from .limits import MAX_PATH, Refused
from .management import Changes
from ..amqp.sas import TokenError, check_grant, check_token, names_this_namespace
from .state import ConnState

log = logging.getLogger("sbconform.serve")


class Nodes:
    """Request handling of ``Server`` (a mixin: the server's state is on ``self``)."""

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
            try:
                url = urlparse(name) if "://" in name else None
                host = None if url is None else url.hostname or ""
            except ValueError as error:  # ('sb://[abc/q': an IPv6 host never closed)
                raise TokenError(f"the token's name is not a URL: {error}") from None
            try:
                opened_to = state.connection.remote_hostname
            except UnicodeDecodeError:  # (AMQP 1.0 part 1, 1.6.20: a string is UTF-8) it names no namespace
                raise TokenError("the connection's OPEN names a hostname that is not valid UTF-8") from None
            if not names_this_namespace(host, opened_to):
                raise TokenError(f"the token's audience names the namespace {host!r}, not this one ({opened_to or 'localhost'!r})")
            path = (name if url is None else url.path).strip("/").lower()
            if len(path) > MAX_PATH:  # names no entity: never kept among the connection's audiences
                raise TokenError(f"the token's name is {len(path)} characters long: no entity has such a path (at most {MAX_PATH})")
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
        dlv = link.delivery(state.next_tag())
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
        except Exception as error:  # noqa: BLE001 - no message at all: refused as $cbs refuses one (_incoming)
            raise Refused(f"The request could not be decoded: {error}") from None
        props = request.properties or {}
        operation = str(props.get("operation", ""))
        body = {str(k): val for k, val in request.body.items()} if isinstance(request.body, dict) else None
        path = address[: -len("/$management")] if address.endswith("/$management") else address
        try:
            if body is None:  # [rr]: every request's body is an amqp-value holding a map
                raise ValueError("the request's body is not a map")
            if address == "$sbconform":
                check_token(str(props.get("authorization", "")), "sb://sbconform/$sbconform", self.keys)
                result, changes = control.dispatch(self.namespace, self.clock, operation, body)
                status = 200
            else:
                # a token for the entity or for its management node ('q/$management', the
                # JavaScript SDK's audience for management requests) authorizes them
                self._authorize(state, address)
                status, result, changes = management.dispatch(operation, management.Request(
                    self.namespace, state.model_conn, self.clock, self.limits, v.canonical(self.namespace, path), body, txn))
            self._apply(changes)
            reply = {"statusCode": status, "statusDescription": "OK" if status == 200 else "No Content"}
        except ServiceBusError as error:
            result = None
            reply = {
                "statusCode": codec.status_of(error.code),
                "statusDescription": error.text,
                "errorCondition": v.A(codec.condition_of(error.code)),
            }
        except TokenError as error:
            result = None
            reply = {"statusCode": 401, "statusDescription": str(error), "errorCondition": v.A("amqp:unauthorized-access")}
        except (KeyError, TypeError, ValueError, OverflowError) as error:  # (OverflowError: int() of an infinite double)
            result = None
            reply = {"statusCode": 400, "statusDescription": f"bad request: {error}", "errorCondition": v.A("com.microsoft:argument-error")}
        self._reply(state, address, request, reply, result)

    def _apply(self, changes: Changes) -> None:
        """Act on what an operation changed: serve the receivers waiting on it again."""
        if changes.shifted_ms:  # a session wait ends as much sooner
            for state in self.conns.values():
                for r in state.pending_sessions:
                    r.deadline -= changes.shifted_ms / 1000
                state.session_due -= changes.shifted_ms / 1000
        if changes.everything:
            self._mark_all_dirty()
        if changes.deleted:
            self.entities_deleted(changes.keys)
        elif changes.keys:
            self.dirty.update(changes.keys)
        if changes.shifted_ms:
            self._idle_asked = 0.0  # an entity made temporary meanwhile is looked at (Server._idle_deadline)
            self._on_time()
