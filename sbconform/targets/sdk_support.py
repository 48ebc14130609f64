"""What the SDK target (``sdk.py``) shares with its parts: its capabilities, connection strings,
times, and the translation of the SDK's exceptions into the model's errors (split out of
``sdk.py``, behaviour unchanged)."""

from __future__ import annotations

import datetime as dt
import re

from sbreference import ErrorCode, ServiceBusError

from ..amqp import codec

CAPABILITIES = frozenset(
    {
        "topics",
        "sessions",
        "duplicate-detection",
        "scheduling",
        "deferral",
        "dead-letter",
        "time-to-live",
        "drop-connection",
        "small-quota",
        "rejection-details",
        "entity-management",
        "partitions",
        "partition-outage",
        "entity-outage",
        "auto-forward",
        "presettled-send",
        "transactions",
        "rules",
        "settle-with-properties",
        "standard-namespace",
    }
)

LACKING = {
    "virtual-time": "time passes in real time through the SDK; scenarios needing minutes or days cannot wait that long",
    "instant-time": "every operation through the SDK takes real time (an empty receive about a millisecond, opening a receiver half a second), virtual time or not: a month of a syphon's 28,800 receives would take hours",
    "model-internals": "the model's internal structure is not observable through the SDK",
    "premium-namespace": "one connection string is one namespace; a partitioned Premium namespace is another (with serve=true the target starts one: `sbconform serve --config` with Sku Premium and PartitionCount)",
    "basic-namespace": "one connection string is one namespace; a Basic one is another (with serve=true the target starts one: `sbconform serve --config` with Sku Basic)",
    "paired-namespaces": "a pairing needs a second namespace: serve=true starts one, or give secondary=<connection string>",
}

#: what a real Azure namespace (control=admin) cannot offer a test
AZURE_LACKING = {
    "partition-outage": "a real Azure namespace cannot take a partition down on request",
    "entity-outage": "a real Azure namespace cannot make an entity unavailable on request",
    "small-quota": "Azure's smallest entity is 1 GB (MaxSizeInMegabytes 1024): too large to fill in a test",
}

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _ms(value: dt.datetime | None) -> int | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    if value.year >= 9999:
        return None
    return round((value - _EPOCH).total_seconds() * 1000)


#: what may begin an entity name ("{prefix}{name}-{suffix}"): segments of letters, digits, '.', '-' and '_',
#: each starting (and, before a '/', ending) with a letter or digit, as Service Bus requires of entity paths
_PREFIX = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?/)*(?:[A-Za-z0-9][A-Za-z0-9._-]*)?")


def check_prefix(prefix: str) -> str:
    """The ``prefix`` option, if it can begin an entity name; else a one-line ValueError (a prefix
    that cannot would fail every create with argument-error: every scenario, not the option)."""
    if not _PREFIX.fullmatch(prefix) or len(prefix) > 200:
        raise ValueError(f"prefix={prefix!r}: the start of an entity name (letters, digits, '.', '-', '_'; a "
                         "'/' only after a letter or digit; starting with a letter or digit; at most 200 characters)")
    return prefix


def parse_connection_string(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out




#: AMQP condition -> model error code: the codec's one table (sbconform/amqp/codec.py)
_CONDITION_CODES = codec.CODES


def _code_of_condition(condition: str) -> ErrorCode:
    return codec.code_of_condition(condition)


def translate(error: BaseException) -> ServiceBusError:
    """An SDK exception as a ``sbreference.ServiceBusError``."""
    from azure.servicebus import exceptions as x

    mapping = [
        (x.MessageLockLostError, ErrorCode.MESSAGE_LOCK_LOST),
        (x.SessionLockLostError, ErrorCode.SESSION_LOCK_LOST),
        (x.MessageNotFoundError, ErrorCode.MESSAGE_NOT_FOUND),
        (x.MessagingEntityNotFoundError, ErrorCode.ENTITY_NOT_FOUND),
        (x.MessageSizeExceededError, ErrorCode.MESSAGE_SIZE_EXCEEDED),
        (x.ServiceBusQuotaExceededError, ErrorCode.QUOTA_EXCEEDED),
        (x.ServiceBusAuthorizationError, ErrorCode.UNAUTHORIZED),
        (x.ServiceBusAuthenticationError, ErrorCode.UNAUTHORIZED),
        (x.SessionCannotBeLockedError, ErrorCode.SESSION_CANNOT_BE_LOCKED),
        (x.OperationTimeoutError, ErrorCode.TIMEOUT),
        (x.ServiceBusServerBusyError, ErrorCode.SERVER_BUSY),
        (x.MessagingEntityDisabledError, ErrorCode.ENTITY_UNAVAILABLE),
        (x.MessagingEntityAlreadyExistsError, ErrorCode.ENTITY_ALREADY_EXISTS),
        # the SDK refuses locally to settle a message twice: the lock is gone (SETTLE-COMP-002)
        (x.MessageAlreadySettled, ErrorCode.MESSAGE_LOCK_LOST),
    ]
    for cls, code in mapping:
        if isinstance(error, cls):
            break
    else:
        condition = getattr(error, "condition", None)
        found = re.search(r"Error condition: ([\w:.-]+)", str(error))
        if condition is None and found:
            condition = found[1].rstrip(".")
        if condition is not None:
            value = getattr(condition, "value", condition)
            text = value.decode() if isinstance(value, bytes) else str(value)
            code = _code_of_condition(text)
            if text not in _CONDITION_CODES and (
                    isinstance(error, (x.ServiceBusConnectionError, x.ServiceBusCommunicationError))
                    or getattr(error, "_retryable", False)):
                # a condition the codec does not know (amqp:internal-error, amqp:unknown-error): the
                # SDK's own verdict decides. It raises a connection error, or retries it (7.7.0: "make
                # AMQP exceptions retryable by default, if condition is not non-retryable, to ensure
                # that InternalServerErrors are retried",
                # https://newreleases.io/project/github/Azure/azure-sdk-for-python/release/azure-servicebus_7.7.0):
                # a lost connection, transient, not a refusal
                code = ErrorCode.CONNECTION_LOST
        elif isinstance(error, (x.ServiceBusConnectionError, x.ServiceBusCommunicationError)):
            code = ErrorCode.CONNECTION_LOST
        elif isinstance(error, (ValueError, TypeError)):
            code = ErrorCode.INVALID_OPERATION
        else:
            code = ErrorCode.CONNECTION_LOST
    retryable = getattr(error, "_retryable", None)
    transient = bool(retryable) if retryable is not None and code is not ErrorCode.MESSAGE_SIZE_EXCEEDED else None
    if code in (ErrorCode.MESSAGE_SIZE_EXCEEDED, ErrorCode.QUOTA_EXCEEDED):
        transient = False
    out = ServiceBusError(code, str(error).splitlines()[0][:500] if str(error) else type(error).__name__, transient=transient)
    out.condition = _condition_text(error)  # the broker's own, for clients that decide from it (sbreference/paired/transience.py)
    return out


def _condition_text(error: BaseException) -> str | None:
    condition = getattr(error, "_condition", None) or getattr(error, "condition", None)
    if condition is None:
        found = re.search(r"Error condition: ([\w:.-]+)", str(error))
        return found[1].rstrip(".") if found else None
    value = getattr(condition, "value", condition)
    return value.decode() if isinstance(value, bytes) else str(value)
