"""Entity status: a queue, topic or subscription can be suspended (SETTLE-STATUS-001..003).

Microsoft, "Suspend and reactivate messaging entities (disable)"
(https://learn.microsoft.com/azure/service-bus-messaging/entity-suspend): "Suspension puts the
entity into a disabled state in which all messages are maintained in storage. However, messages
can't be removed or added, and the respective protocol operations yield errors." The states of
a queue: Active; Disabled ("equivalent to setting both SendDisabled and ReceiveDisabled");
SendDisabled ("You can't send messages to the queue, but you can receive messages from it");
ReceiveDisabled ("You can send messages to the queue, but you can't receive messages from it").

Microsoft.ServiceBus.Messaging.EntityStatus: a send to a queue or topic that is SendDisabled (or
Disabled) and a receive or complete on a queue or subscription that is ReceiveDisabled (or
Disabled) fail with MessagingEntityDisabledException (AMQP ``com.microsoft:entity-disabled``);
"You cannot receive messages from a disabled queue, a disabled subscription, or a subscription
to a disabled topic"; "If you send a message to an active topic, Service Bus copies the message
into a disabled subscription"; scheduled messages still come due and expired ones still expire.
Not a fault that passes: the error is not transient (the paired client fails over on it).
"""

from __future__ import annotations

from .errors import ErrorCode, ServiceBusError

ACTIVE, DISABLED, SEND_DISABLED, RECEIVE_DISABLED = "Active", "Disabled", "SendDisabled", "ReceiveDisabled"
STATUSES = (ACTIVE, DISABLED, SEND_DISABLED, RECEIVE_DISABLED)


def normal(status: str) -> str:
    """The status as Service Bus spells it (names are case-insensitive); an unknown one is refused."""
    for known in STATUSES:
        if str(status).lower() == known.lower():
            return known
    raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"unknown entity status {status!r} (one of {', '.join(STATUSES)})")


def sends_disabled(status: str) -> bool:
    return status in (DISABLED, SEND_DISABLED)


def receives_disabled(status: str) -> bool:
    return status in (DISABLED, RECEIVE_DISABLED)


def refuse_send(kind: str, path: str, status: str) -> None:
    """SETTLE-STATUS-001: no send to a queue or topic that is Disabled or SendDisabled."""
    if sends_disabled(status):
        raise ServiceBusError(ErrorCode.ENTITY_UNAVAILABLE, f"Sending to {kind} '{path}' is disabled (status {status}).", transient=False)


def refuse_receive(kind: str, path: str, status: str) -> None:
    """SETTLE-STATUS-002: no receive or settlement on a queue or subscription that is Disabled
    or ReceiveDisabled. A subscription's topic's status does not count (SETTLE-DISC-011): entity-suspend's
    table, "Disabled or Send Disabled [topic] | Active [subscription] | You can't send messages to the topic,
    but you can receive messages that are already at the subscription"."""
    if receives_disabled(status):
        raise ServiceBusError(ErrorCode.ENTITY_UNAVAILABLE, f"Receiving from {kind} '{path}' is disabled (status {status}).", transient=False)
