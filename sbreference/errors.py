"""The common error vocabulary.

Service Bus answers a failed operation with an error condition, a text, a tracking id
and an indication of whether a retry may succeed (SETTLE-SEND-002). Every target maps
what its broker said onto these codes, so a scenario can say "fails with
message-lock-lost" and mean the same thing on the model, over AMQP and on Azure.
"""

from __future__ import annotations

import itertools
from enum import Enum


class ErrorCode(str, Enum):
    ENTITY_NOT_FOUND = "entity-not-found"
    ENTITY_ALREADY_EXISTS = "entity-already-exists"
    MESSAGE_LOCK_LOST = "message-lock-lost"
    SESSION_LOCK_LOST = "session-lock-lost"
    SESSION_CANNOT_BE_LOCKED = "session-cannot-be-locked"
    MESSAGE_NOT_FOUND = "message-not-found"
    MESSAGE_SIZE_EXCEEDED = "message-size-exceeded"
    QUOTA_EXCEEDED = "quota-exceeded"
    INVALID_OPERATION = "invalid-operation"
    ARGUMENT_ERROR = "argument-error"
    TIMEOUT = "timeout"
    SERVER_BUSY = "server-busy"
    ENTITY_UNAVAILABLE = "entity-unavailable"
    UNAUTHORIZED = "unauthorized"
    CONNECTION_LOST = "connection-lost"
    TRANSACTION_UNKNOWN = "transaction-unknown"  # AMQP amqp:transaction:unknown-id
    TRANSACTION_ROLLBACK = "transaction-rollback"  # AMQP amqp:transaction:rollback
    TRANSACTION_TIMEOUT = "transaction-timeout"  # AMQP amqp:transaction:timeout

    def __str__(self) -> str:  # "message-lock-lost", not "ErrorCode.MESSAGE_LOCK_LOST"
        return self.value


#: Codes for which a retry of the same operation may succeed (.NET ``IsTransient``:
#: timeouts, a busy server, a communication problem, a store that is momentarily down).
TRANSIENT = frozenset(
    {
        ErrorCode.TIMEOUT,
        ErrorCode.SERVER_BUSY,
        ErrorCode.CONNECTION_LOST,
        ErrorCode.ENTITY_UNAVAILABLE,
    }
)


_tracking_ids = itertools.count(1)


class ServiceBusError(Exception):
    """A negative settlement or a failed operation, as the broker reports it.

    Every error gets a tracking id of its own when it is made (deterministic: a
    counter, not a GUID) unless the broker supplied one.
    """

    def __init__(
        self,
        code: ErrorCode,
        text: str,
        tracking_id: str = "",
        transient: bool | None = None,
    ) -> None:
        self.code = ErrorCode(code)
        self.text = text
        self.tracking_id = tracking_id or f"sbconform-{next(_tracking_ids)}"
        self.transient = (self.code in TRANSIENT) if transient is None else transient
        super().__init__(f"{self.code}: {text} (tracking id {self.tracking_id})")

    def __reduce__(self):  # picklable, for Spark workers and process pools
        return (ServiceBusError, (self.code, self.text, self.tracking_id, self.transient))
