"""Service Bus errors on the wire: ``CONDITIONS`` (model error code -> AMQP error condition),
``code_of_condition`` (its inverse, with the aliases the SDKs also map), ``STATUS`` (management
status code per error). The server writes with them; the SDK target and the proxy read with
them (re-exported by ``codec``)."""

from __future__ import annotations

from sbreference import ErrorCode
from sbreference.paired.transience import WIRE_CONDITIONS

#: model error code -> AMQP error condition (as the SDKs map them back to exceptions:
#: azure/servicebus/_common/constants.py ``ERROR_CODE_*``, _pyamqp/error.py ``ErrorCondition``). One
#: table with the model's: the paired client classifies errors by the condition Service Bus sends.
CONDITIONS: dict[ErrorCode, str] = WIRE_CONDITIONS
#: conditions a broker may use that mean the same as one above
CONDITION_ALIASES: dict[str, ErrorCode] = {
    "amqp:not-implemented": ErrorCode.INVALID_OPERATION,
    "com.microsoft:argument-out-of-range": ErrorCode.ARGUMENT_ERROR,
    "com.microsoft:auth-failed": ErrorCode.UNAUTHORIZED,
    "amqp:link:detach-forced": ErrorCode.CONNECTION_LOST,
}
#: AMQP error condition -> model error code (the inverse of ``CONDITIONS``, plus aliases)
CODES: dict[str, ErrorCode] = {**{c: code for code, c in CONDITIONS.items()}, **CONDITION_ALIASES}
#: management status code per error ("AMQP 1.0 in Azure Service Bus: request-response
#: operations", Response: 200 OK, 204 no content, 4xx/5xx failures)
STATUS: dict[ErrorCode, int] = {
    ErrorCode.ENTITY_NOT_FOUND: 404,
    ErrorCode.MESSAGE_NOT_FOUND: 404,
    ErrorCode.MESSAGE_LOCK_LOST: 410,
    ErrorCode.SESSION_LOCK_LOST: 410,
    ErrorCode.SESSION_CANNOT_BE_LOCKED: 409,
    ErrorCode.ENTITY_ALREADY_EXISTS: 409,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.QUOTA_EXCEEDED: 403,
    ErrorCode.TIMEOUT: 408,
    ErrorCode.SERVER_BUSY: 503,
    ErrorCode.ENTITY_UNAVAILABLE: 503,
}
#: management status code -> model error code, for a reply that names no condition (where several
#: codes share a status, the one a reply to a message operation means: 404 is a message not found,
#: 409 a session that cannot be locked, 410 a lost message lock)
STATUS_CODES: dict[int, ErrorCode] = {
    400: ErrorCode.ARGUMENT_ERROR, 401: ErrorCode.UNAUTHORIZED, 403: ErrorCode.QUOTA_EXCEEDED,
    404: ErrorCode.MESSAGE_NOT_FOUND, 408: ErrorCode.TIMEOUT, 409: ErrorCode.SESSION_CANNOT_BE_LOCKED,
    410: ErrorCode.MESSAGE_LOCK_LOST, 413: ErrorCode.MESSAGE_SIZE_EXCEEDED, 503: ErrorCode.SERVER_BUSY,
}
INTERNAL_ERROR = "amqp:internal-error"


def condition_of(code: ErrorCode) -> str:
    return CONDITIONS.get(code, INTERNAL_ERROR)


def code_of_condition(condition: str) -> ErrorCode:
    """The model's code for an AMQP condition (an unknown one is an invalid operation)."""
    return CODES.get(condition, ErrorCode.INVALID_OPERATION)


def status_of(code: ErrorCode) -> int:
    return STATUS.get(code, 400)
