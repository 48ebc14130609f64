"""Which failures of a send to the primary entity start the failover timer (PAIR-FAIL-002/003).

The seed's rule (the async-messaging article says the same): "Failures that trigger the
failover timer are any MessagingException in which the IsTransient property is false, or a
System.TimeoutException. Other exceptions, such as UnauthorizedAccessException do not cause
failover [...]. A ServerBusyException does not cause failover".

So the paired client needs two things the broker does not send as such: which .NET exception
a failure is, and its IsTransient. It decides them itself, from what the broker does send: the
AMQP error condition and its description. It never asks an SDK's retry flag (the Python
azure-servicebus SDK marks ``com.microsoft:entity-disabled`` retryable; the .NET client's
MessagingEntityDisabledException is not transient).

``RULES`` is that decision, one row per condition. Each row names the .NET exception the
condition becomes (Microsoft.Azure.ServiceBus's ``AmqpExceptionHelper.ToMessagingContractException``,
the AMQP mapping of the .NET client that followed the seed's), whether it is a MessagingException,
its IsTransient, and the clause it grades. A condition not in the table becomes a transient
ServiceBusException in that mapping (``return new ServiceBusException(true, message)``): it never
starts the timer.

The description is used where the condition alone is ambiguous: ``amqp:not-found`` on a
connection (the host, not the entity) is a communication problem in the same mapping
(``connectionError``: ServiceBusCommunicationException, transient); the model reads that from a
description naming a connection or host rather than an entity.

Errors raised in process by the model carry no AMQP condition: ``condition_of`` gives the one
Service Bus sends for their code on the wire (``WIRE_CONDITIONS``, which ``sbconform serve``
sends too: tests/test_paired_transience.py checks the two agree).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ErrorCode, ServiceBusError

#: Microsoft.Azure.ServiceBus, src/Microsoft.Azure.ServiceBus/Amqp/AmqpExceptionHelper.cs
AMQP_HELPER = (
    "https://github.com/Azure/azure-service-bus-dotnet/blob/07932297712d27fbccdc8c2ec4f448369e1a95d5/"
    "src/Microsoft.Azure.ServiceBus/Amqp/AmqpExceptionHelper.cs"
)
#: the seed's rule, as the async-messaging article states it
ARTICLE = (
    "https://github.com/MicrosoftDocs/azure-docs/blob/00dd4dfd8face610236904e15b18f14cf1e79511/"
    "articles/service-bus-messaging/service-bus-async-messaging.md"
)
#: ServiceBusFailureReason (Azure.Messaging.ServiceBus): MessageSizeExceeded is its own, non-transient reason
FAILURE_REASONS = "https://learn.microsoft.com/en-us/dotnet/api/azure.messaging.servicebus.servicebusfailurereason"


@dataclass(frozen=True)
class Rule:
    """What the .NET client makes of one AMQP error condition."""

    condition: str
    exception: str  # the .NET exception type
    messaging_exception: bool  # a MessagingException (ServiceBusException), or a plain .NET one
    is_transient: bool  # its IsTransient (False for non-MessagingExceptions: they have none)
    code: ErrorCode  # the kit's vocabulary
    clause: str
    source: str

    @property
    def starts_failover_timer(self) -> bool:
        """PAIR-FAIL-002: a non-transient MessagingException, or a TimeoutException."""
        return self.exception == "TimeoutException" or (self.messaging_exception and not self.is_transient)


def _rule(condition: str, exception: str, messaging: bool, transient: bool, code: ErrorCode, clause: str, source: str = AMQP_HELPER) -> Rule:
    return Rule(condition, exception, messaging, transient, code, clause, source)


RULES: dict[str, Rule] = {r.condition: r for r in [
    # PAIR-FAIL-002: start the timer
    _rule("com.microsoft:timeout", "TimeoutException", False, True, ErrorCode.TIMEOUT, "PAIR-FAIL-002"),
    _rule("amqp:not-found", "MessagingEntityNotFoundException", True, False, ErrorCode.ENTITY_NOT_FOUND, "PAIR-FAIL-002"),
    _rule("com.microsoft:entity-disabled", "MessagingEntityDisabledException", True, False, ErrorCode.ENTITY_UNAVAILABLE, "PAIR-FAIL-002"),
    _rule("amqp:resource-limit-exceeded", "QuotaExceededException", True, False, ErrorCode.QUOTA_EXCEEDED, "PAIR-FAIL-002"),
    _rule("amqp:link:message-size-exceeded", "MessageSizeExceededException", True, False, ErrorCode.MESSAGE_SIZE_EXCEEDED, "PAIR-FAIL-002", FAILURE_REASONS),
    _rule("com.microsoft:message-lock-lost", "MessageLockLostException", True, False, ErrorCode.MESSAGE_LOCK_LOST, "PAIR-FAIL-002"),
    _rule("com.microsoft:session-lock-lost", "SessionLockLostException", True, False, ErrorCode.SESSION_LOCK_LOST, "PAIR-FAIL-002"),
    # PAIR-FAIL-003: transient, or not a MessagingException (the client is configured incorrectly)
    _rule("com.microsoft:server-busy", "ServerBusyException", True, True, ErrorCode.SERVER_BUSY, "PAIR-FAIL-003"),
    _rule("amqp:unauthorized-access", "UnauthorizedAccessException", False, False, ErrorCode.UNAUTHORIZED, "PAIR-FAIL-003"),
    _rule("com.microsoft:auth-failed", "UnauthorizedAccessException", False, False, ErrorCode.UNAUTHORIZED, "PAIR-FAIL-003"),
    _rule("amqp:not-allowed", "InvalidOperationException", False, False, ErrorCode.INVALID_OPERATION, "PAIR-FAIL-003"),
    _rule("amqp:not-implemented", "NotSupportedException", False, False, ErrorCode.INVALID_OPERATION, "PAIR-FAIL-003"),
    _rule("com.microsoft:argument-error", "ArgumentException", False, False, ErrorCode.ARGUMENT_ERROR, "PAIR-FAIL-003"),
    _rule("com.microsoft:argument-out-of-range", "ArgumentOutOfRangeException", False, False, ErrorCode.ARGUMENT_ERROR, "PAIR-FAIL-003"),
]}

#: the mapping's default ("return new ServiceBusException(true, message)"): any other condition
#: (amqp:internal-error, amqp:connection:forced, amqp:link:detach-forced...) is transient
DEFAULT = Rule("*", "ServiceBusException", True, True, ErrorCode.CONNECTION_LOST, "PAIR-FAIL-003", AMQP_HELPER)
#: ``amqp:not-found`` on the connection, not on an entity (``connectionError``)
COMMUNICATION = Rule("amqp:not-found", "ServiceBusCommunicationException", True, True, ErrorCode.CONNECTION_LOST, "PAIR-FAIL-003", AMQP_HELPER)

#: ErrorCode -> the condition Service Bus sends for it (what ``sbconform serve`` sends too).
WIRE_CONDITIONS: dict[ErrorCode, str] = {
    ErrorCode.ENTITY_NOT_FOUND: "amqp:not-found",
    ErrorCode.ENTITY_ALREADY_EXISTS: "com.microsoft:entity-already-exists",
    ErrorCode.MESSAGE_LOCK_LOST: "com.microsoft:message-lock-lost",
    ErrorCode.SESSION_LOCK_LOST: "com.microsoft:session-lock-lost",
    ErrorCode.SESSION_CANNOT_BE_LOCKED: "com.microsoft:session-cannot-be-locked",
    ErrorCode.MESSAGE_NOT_FOUND: "com.microsoft:message-not-found",
    ErrorCode.MESSAGE_SIZE_EXCEEDED: "amqp:link:message-size-exceeded",
    ErrorCode.QUOTA_EXCEEDED: "amqp:resource-limit-exceeded",
    ErrorCode.INVALID_OPERATION: "amqp:not-allowed",
    ErrorCode.ARGUMENT_ERROR: "com.microsoft:argument-error",
    ErrorCode.TIMEOUT: "com.microsoft:timeout",
    ErrorCode.SERVER_BUSY: "com.microsoft:server-busy",
    ErrorCode.ENTITY_UNAVAILABLE: "com.microsoft:entity-disabled",
    ErrorCode.UNAUTHORIZED: "amqp:unauthorized-access",
    ErrorCode.CONNECTION_LOST: "amqp:connection:forced",
    ErrorCode.TRANSACTION_UNKNOWN: "amqp:transaction:unknown-id",  # AMQP 1.0 part 4, transaction-error
    ErrorCode.TRANSACTION_ROLLBACK: "amqp:transaction:rollback",
    ErrorCode.TRANSACTION_TIMEOUT: "amqp:transaction:timeout",
}

_CONNECTION_WORDS = ("connection", "host", "namespace")


def rule_for(condition: str, description: str = "") -> Rule:
    """The row for ``condition`` (and its description, where the condition is ambiguous)."""
    if condition == "amqp:not-found" and any(w in description.lower() for w in _CONNECTION_WORDS) and "entity" not in description.lower():
        return COMMUNICATION
    return RULES.get(condition, DEFAULT)


def condition_of(error: ServiceBusError) -> str:
    """The AMQP condition of ``error``: the broker's own where the target kept it (an
    attribute ``condition``), else the one Service Bus sends for its code."""
    condition = getattr(error, "condition", None)
    if isinstance(condition, str) and condition:
        return condition
    return WIRE_CONDITIONS.get(error.code, "amqp:internal-error")


def classify(error: ServiceBusError) -> Rule:
    """The paired client's reading of a failed send: never the SDK's retry flag."""
    return rule_for(condition_of(error), error.text)


def starts_failover_timer(error: ServiceBusError) -> bool:
    """PAIR-FAIL-002/003, decided by ``RULES``."""
    return classify(error).starts_failover_timer
