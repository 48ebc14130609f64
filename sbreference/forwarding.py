"""Auto-forwarding as a receiver meets it (SETTLE-FWD-003).

A queue or subscription with ForwardTo hands every message on to its destination, and one with
ForwardDeadLetteredMessagesTo hands on what it dead-letters: no user receives from them there.
"Service Bus doesn't allow creating a message receiver on a source entity with autoforwarding enabled"
(https://learn.microsoft.com/azure/service-bus-messaging/service-bus-auto-forwarding). Microsoft's reference of CreateQueueOptions.ForwardTo
(https://learn.microsoft.com/dotnet/api/azure.messaging.servicebus.administration.createqueueoptions.forwardto):
"If set, user cannot manually receive messages from this queue."; of
ForwardDeadLetteredMessagesTo
(https://learn.microsoft.com/dotnet/api/azure.messaging.servicebus.administration.createqueueoptions.forwarddeadletteredmessagesto):
"If set, user cannot manually receive dead-lettered messages from this queue."

The other subqueue stays receivable: a forwarding queue's dead-letter subqueue holds what its
destination refused ("you must explicitly receive and process them from the dead-letter queue",
https://learn.microsoft.com/azure/service-bus-messaging/service-bus-auto-forwarding). Peeking is
left allowed (the documentation names receiving only).
"""

from __future__ import annotations

from typing import Any

from .clock import TIMESPAN_MAX
from .errors import ErrorCode, ServiceBusError
from .paths import parse


def forwarded_to(entity: Any, store: Any) -> str | None:
    """Where the queue or subscription a receiver on this route (``Namespace._route``: the entity,
    and its store unless it is the queue itself) takes from forwards its messages, or None."""
    if store is None:
        return entity.description.forward_to if entity.kind == "queue" else None
    if parse(store.path).transfer:
        return None  # a transfer dead-letter queue never forwards (TXN-VIA-003)
    owner = entity if entity.kind == "queue" else entity.subscriptions[parse(store.path).subscription_key]
    d = owner.description
    return d.forward_dead_lettered_messages_to if store.is_dead_letter else d.forward_to


def refuse_receiver(path: str, destination: str | None) -> None:
    """SETTLE-FWD-003: no receiver on a queue, subscription or dead-letter subqueue that forwards.
    The documentation names no error: invalid-operation, with the text Service Bus is reported to
    give, is the model's reading (scenarios accept any refusal)."""
    if destination is not None:
        raise ServiceBusError(
            ErrorCode.INVALID_OPERATION,
            f"Cannot create a message receiver on an entity with auto-forwarding enabled: '{path}' forwards to '{destination}'.",
            transient=False,
        )


def never_idle_when_forwarding(description: Any) -> Any:
    """SETTLE-FWD-001: "When autoforwarding is setup, the value for AutoDeleteOnIdle on the source entity is
    automatically set to the maximum value of the data type" (service-bus-auto-forwarding): a source
    forwards, which counts as receiving, so it is never idle. The destination keeps its own."""
    if description.forward_to is None or description.auto_delete_on_idle == TIMESPAN_MAX:
        return description
    return description.with_changes(auto_delete_on_idle=TIMESPAN_MAX)
