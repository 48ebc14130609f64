"""The ``$management`` node of each entity: a table from operation name to handler.

A handler takes the ``Request`` (the namespace, the connection, the entity path, the body)
and returns an ``Answer``: the status code, the response body, and ``Changes`` (the entities
whose waiting receivers the server serves again). It never calls back into the server.
Operations a transaction may hold have their own table (``TRANSACTIONAL``); rule operations
(add-rule, remove-rule, enumerate-rules) are in ``rules.py``.

Wire facts: Microsoft's "AMQP 1.0 in Azure Service Bus: request-response-based operations"
(https://learn.microsoft.com/azure/service-bus-messaging/service-bus-amqp-request-response).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any, Callable, NamedTuple

from proton import UNDESCRIBED, Array, Data, timestamp

from sbreference import PEEK_LOCK, RECEIVE_AND_DELETE, ErrorCode, Namespace, ServiceBusError
from sbreference import Message as ModelMessage
from sbreference import paths
from sbreference.operations import MODIFYING, SETTLEMENTS, settle

from ..amqp import codec
from . import values as v
from .coordinator import no_properties_in_a_transaction
from .limits import Limits, Refused, check_size, check_storable, properties_to_modify
from .rules import rule_operation
from .state import WallClock


class Changes(NamedTuple):
    """What an operation changed, for the server to act on."""

    keys: frozenset = frozenset()  # entities (lower-case keys) whose waiting receivers may be served now
    everything: bool = False  # every entity with receivers waiting
    shifted_ms: int = 0  # the clock moved forward this much (advance-time)
    deleted: bool = False  # the entities keyed ``keys`` were deleted (or lost a subscription): their links go


NOTHING = Changes()


class Request(NamedTuple):
    ns: Namespace
    conn: int
    clock: WallClock
    limits: Limits
    path: str
    body: dict
    txn: int | None = None

    @property
    def key(self) -> str:
        return paths.entity_key(self.path)

    @property
    def sid(self) -> str | None:
        return v.opt_str(self.body.get("session-id"))

    def tokens(self) -> list[int]:
        """[rr] renew-lock, update-disposition: ``lock-tokens`` is a required "array of uuid": null,
        empty, one value outside an array, or anything but uuids in it is a bad request (400), never
        read as a uuid (a string or 16 bytes) nor answered 200 for nothing done (sbspec/wire.md 3)."""
        given = self.body["lock-tokens"]
        if given is None:
            raise ValueError("lock-tokens is null")
        if not isinstance(given, (Array, list)):  # (a list of uuids: proton clients write one so)
            raise ValueError(f"lock-tokens is not an array of uuid but a {type(given).__name__}")
        tokens = v.values(given)
        if not tokens:  # Microsoft's clients never send one (MessageReceiver: ListOfLockTokensCannotBeEmpty)
            raise ValueError("lock-tokens is an empty array: at least one lock token is required")
        for token in tokens:
            if not isinstance(token, uuid.UUID):
                raise ValueError(f"lock-tokens holds a {type(token).__name__}, not a uuid")
        return [v.model_token(token) for token in tokens]


Answer = tuple[int, Any, Changes]
Handler = Callable[[Request], Answer]


def _expirations(clock: WallClock, instants: list[int]) -> dict:
    return {"expirations": Array(UNDESCRIBED, Data.TIMESTAMP, *[timestamp(clock.epoch_ms + t) for t in instants])}


# SETTLE-LOCK-011: a lock token names a lock of the entity, not of this connection: a renewal or a
# disposition by token from any connection authorised on the entity (nodes.py authorizes each
# request) acts as the holder's would. The model decides; ``q.conn`` only says who asks.
def renew_lock(q: Request) -> Answer:
    return 200, _expirations(q.clock, [q.ns.renew_lock(q.conn, q.path, token) for token in q.tokens()]), NOTHING


def peek_message(q: Request) -> Answer:
    start = int(q.body.get("from-sequence-number", 1))
    count = int(q.body.get("message-count", 1))
    found = q.ns.peek(q.path, start, count, q.sid)
    if not found:
        return 204, {}, NOTHING
    # one reply holds at most --max-delivery-size of messages (at least one): a peek
    # may return fewer messages than asked, and the client asks again from the next
    messages: list[dict] = []
    total = 0
    for d in found:
        encoded = codec.encode(d, q.clock.epoch_ms, False)
        if messages and total + len(encoded) > q.limits.max_delivery_size:
            break
        messages.append({"message": encoded})
        total += len(encoded)
    return 200, {"messages": messages}, NOTHING


def schedule_message(q: Request) -> Answer:
    by_time: dict[int, list[ModelMessage]] = defaultdict(list)
    order = []
    if q.body["messages"] is None:  # a required list of maps ([rr] schedule-message)
        raise ValueError("messages is null")
    for entry in v.values(q.body["messages"]):
        encoded = v.binary(entry["message"], "message")
        check_size(q.ns, q.path, len(encoded))
        m = codec.decode(encoded, q.clock.epoch_ms)
        try:  # the door a sent message passes (SECURITY.md): refused now, never stored to fail at a peek
            check_storable(m, q.clock.now, q.clock.epoch_ms)
        except Refused as refused:
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"The message was refused: {refused}", transient=False) from None
        when = m.scheduled_enqueue_time if m.scheduled_enqueue_time is not None else q.clock.now
        by_time[when].append(m.with_changes(scheduled_enqueue_time=None))
        order.append(when)
    numbers: list[int] = []
    for when in dict.fromkeys(order):
        numbers += q.ns.schedule(q.conn, q.path, by_time[when], when)
    return 200, {"sequence-numbers": Array(UNDESCRIBED, Data.LONG, *numbers)}, Changes(frozenset([q.key]))


def cancel_scheduled_message(q: Request) -> Answer:
    q.ns.cancel_scheduled(q.conn, q.path, [int(n) for n in v.values(q.body["sequence-numbers"])])
    return 200, {}, NOTHING


#: receive-by-sequence-number's receiver-settle-mode: AMQP's rcv-settle-mode, second (1) for a
#: peek-lock receiver, first (0) for receive-and-delete ([py] ServiceBusToAMQPReceiveModeMap)
SETTLE_MODES = {1: PEEK_LOCK, 0: RECEIVE_AND_DELETE}


def receive_by_sequence_number(q: Request) -> Answer:
    mode = SETTLE_MODES.get(int(q.body.get("receiver-settle-mode", 1)))
    if mode is None:
        raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"receiver-settle-mode {q.body['receiver-settle-mode']!r} is neither 0 nor 1")
    found = q.ns.receive_deferred(q.conn, q.path, [int(n) for n in v.values(q.body["sequence-numbers"])], mode, q.sid)
    out = []
    for d in found:
        entry: dict[str, Any] = {"message": codec.encode(d, q.clock.epoch_ms, True)}
        if d.lock_token is not None:
            entry["lock-token"] = v.lock_uuid(d.lock_token)
        out.append(entry)
    return 200, {"messages": out}, NOTHING


def _disposition(q: Request) -> str:
    kind = codec.DISPOSITION_STATUS.get(str(q.body["disposition-status"]))
    if kind is None:
        raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"unknown disposition-status {q.body['disposition-status']!r}")
    return kind


def update_disposition(q: Request) -> Answer:
    kind = _disposition(q)
    tokens = q.tokens()
    if tokens:
        reason, description = v.opt_str(q.body.get("deadletter-reason")), v.opt_str(q.body.get("deadletter-description"))
        props = _properties_to_modify(q.body.get("properties-to-modify"), kind)
        for token in tokens:
            settle(q.ns, kind, q.conn, q.path, token, reason=reason, description=description, properties=props)
    return 200, {}, Changes(frozenset([q.key]))


def _properties_to_modify(raw: Any, kind: str) -> dict | None:
    """update-disposition's ``properties-to-modify`` (SETTLE-MOD-001), for abandon, defer and
    dead-letter; refused as an argument error when the broker could not write them back."""
    props = properties_to_modify(raw)
    if props and kind not in MODIFYING:
        raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"properties-to-modify is not taken by a {kind}", transient=False)
    return props


def renew_session_lock(q: Request) -> Answer:
    until = q.ns.renew_session_lock(q.conn, q.path, str(q.sid))
    return 200, {"expiration": timestamp(q.clock.epoch_ms + until)}, NOTHING


def get_session_state(q: Request) -> Answer:
    return 200, {"session-state": q.ns.get_session_state(q.conn, q.path, str(q.sid))}, NOTHING


def set_session_state(q: Request) -> Answer:
    value = q.body.get("session-state")
    q.ns.set_session_state(q.conn, q.path, str(q.sid), None if value is None else v.binary(value, "session-state"))
    return 200, {}, NOTHING


OPERATIONS: dict[str, Handler] = {
    "com.microsoft:renew-lock": renew_lock,
    "com.microsoft:peek-message": peek_message,
    "com.microsoft:schedule-message": schedule_message,
    "com.microsoft:cancel-scheduled-message": cancel_scheduled_message,
    "com.microsoft:receive-by-sequence-number": receive_by_sequence_number,
    "com.microsoft:update-disposition": update_disposition,
    "com.microsoft:renew-session-lock": renew_session_lock,
    "com.microsoft:get-session-state": get_session_state,
    "com.microsoft:set-session-state": set_session_state,
}


# A management request inside a transaction (its transfer carried transactional-state, as the
# request-response page allows "for operations that support transactions"): a disposition by
# lock token is enlisted (applied at commit, TXN-VIS-002), a lock renewal takes effect at once
# (TXN-OPS-001); any other operation cannot be part of a transaction.
def transactional_disposition(q: Request) -> Answer:
    kind = _disposition(q)
    if q.body.get("properties-to-modify"):  # refused, never dropped: the model's transactions take none
        raise no_properties_in_a_transaction()
    q.ns.transactions.settle_all(q.conn, q.txn, SETTLEMENTS[kind], q.path, q.tokens(),
                                 v.opt_str(q.body.get("deadletter-reason")), v.opt_str(q.body.get("deadletter-description")))
    return 200, {}, NOTHING


def transactional_renew_lock(q: Request) -> Answer:
    return 200, _expirations(q.clock, [q.ns.transactions.renew_lock(q.conn, q.txn, q.path, token) for token in q.tokens()]), NOTHING


TRANSACTIONAL: dict[str, Handler] = {
    "com.microsoft:update-disposition": transactional_disposition,
    "com.microsoft:renew-lock": transactional_renew_lock,
}


def dispatch(operation: str, q: Request) -> Answer:
    """Run ``operation`` on the entity at ``q.path``; ``ServiceBusError`` for what it refuses."""
    if q.txn is not None:  # TXN-OPS-001: settlements by lock token and renewals; nothing else
        handler = TRANSACTIONAL.get(operation)
        if handler is None:
            raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"{operation} cannot be part of a transaction (send, complete, abandon, "
                                                               "dead-letter, defer and renew lock can)")
        return handler(q)
    handler = OPERATIONS.get(operation)
    if handler is not None:
        return handler(q)
    ruled = rule_operation(q.ns, q.path, operation, q.body)  # add-rule, remove-rule, enumerate-rules
    if ruled is not None:
        return ruled[0], ruled[1], NOTHING
    raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"unsupported management operation {operation!r}")
