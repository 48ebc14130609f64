"""Entity descriptions: the properties of a queue, topic or subscription, their defaults and limits.

``EntityDescription`` holds what a management client sets (QueueDescription defaults);
``validate`` refuses what Service Bus would refuse (SETTLE-ENT-001..003), and the time to
live a message gets follows from its own and its entity's (SETTLE-TTL-001).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from .clock import DAY, MINUTE, NEVER, SECOND, TIMESPAN_MAX
from .errors import ErrorCode, ServiceBusError
from .status import STATUSES, normal

KB = 1024
MB = 1024 * KB

#: Subscriptions per topic, entity path and subscription name lengths (service-bus-quotas): SETTLE-ENT-002.
MAX_SUBSCRIPTIONS_PER_TOPIC = 2000
MAX_PATH_LENGTH = 260
MAX_NAME_LENGTH = 50


@dataclass(frozen=True, slots=True)
class EntityDescription:
    """Properties of a queue, topic or subscription (QueueDescription defaults).

    Durations are model milliseconds; ``TIMESPAN_MAX`` means "never".
    """

    lock_duration: int = 1 * MINUTE
    max_delivery_count: int = 10
    default_message_time_to_live: int = TIMESPAN_MAX
    dead_lettering_on_message_expiration: bool = False
    requires_duplicate_detection: bool = False
    duplicate_detection_history_time_window: int = 10 * MINUTE
    requires_session: bool = False
    max_size_in_megabytes: int = 1024
    max_message_size: int = 256 * KB
    enable_batched_operations: bool = True
    auto_delete_on_idle: int = TIMESPAN_MAX
    enable_partitioning: bool = False
    forward_to: str | None = None
    forward_dead_lettered_messages_to: str | None = None
    #: Subscriptions: a rule that fails to evaluate dead-letters the message (RULES-DLQ-001).
    dead_lettering_on_filter_evaluation_exceptions: bool = True
    #: Active, Disabled, SendDisabled or ReceiveDisabled (sbreference/status.py, SETTLE-STATUS-001..003)
    status: str = "Active"
    #: Topics: whether the topic keeps its messages in order (CreateTopicOptions.SupportOrdering,
    #: true by default). The model keeps acceptance order either way: without the guarantee any
    #: order is allowed, and acceptance order is one of them (audit row ENT-026).
    support_ordering: bool = True

    def __post_init__(self) -> None:
        if self.status not in STATUSES:  # names are case-insensitive: kept as Service Bus spells them
            object.__setattr__(self, "status", normal(self.status))

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def with_changes(self, **changes: Any) -> "EntityDescription":
        unknown = set(changes) - set(self.field_names())
        if unknown:
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"unknown entity properties: {sorted(unknown)}")
        return replace(self, **changes)

    def validate(self, kind: str) -> "EntityDescription":
        """Reject descriptions Service Bus would refuse (SETTLE-ENT-001..003)."""
        problems = []
        own = KIND_FIELDS.get(kind)
        if own is not None:  # SETTLE-ENT-003: a property of another kind of entity, set on this one
            defaults = _DEFAULT_DESCRIPTION
            foreign = [f for f in self.field_names() if f not in own and getattr(self, f) != getattr(defaults, f)]
            if foreign:
                problems.append(f"a {kind} has no {', '.join(foreign)}")
        if not 0 < self.lock_duration <= 5 * MINUTE:
            problems.append(f"lock_duration must be in (0, 5 minutes], got {self.lock_duration} ms")
        if self.max_delivery_count < 1:
            problems.append(f"max_delivery_count must be at least 1, got {self.max_delivery_count}")
        if self.default_message_time_to_live <= 0:
            problems.append("default_message_time_to_live must be positive")
        if self.requires_duplicate_detection and not (
            20 * SECOND <= self.duplicate_detection_history_time_window <= 7 * DAY
        ):
            problems.append(
                "duplicate_detection_history_time_window must be between 20 seconds and 7 days, "
                f"got {self.duplicate_detection_history_time_window} ms"
            )
        if self.max_size_in_megabytes <= 0:
            problems.append("max_size_in_megabytes must be positive")
        if self.auto_delete_on_idle < 5 * MINUTE:  # SETTLE-ENT-002
            problems.append(f"auto_delete_on_idle must be at least 5 minutes, got {self.auto_delete_on_idle} ms")
        if self.requires_session and self.forward_to is not None:
            # SETTLE-FWD-001: "A session-enabled queue or subscription can't be the source of autoforwarding
            # ... setting ForwardTo on a session-enabled queue or subscription fails. Autoforwarding into a
            # session-enabled destination is supported" (https://learn.microsoft.com/azure/service-bus-messaging/
            # service-bus-auto-forwarding); 400 Bad Request (https://github.com/Azure/azure-service-bus/issues/317).
            # Dead-letter forwarding is not concerned. Audit row ENT-027.
            problems.append("a queue or subscription that requires sessions cannot auto-forward (forward_to)")
        if problems:
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"invalid {kind} description: " + "; ".join(problems))
        return self


#: The properties each kind of entity has (CreateQueueOptions, CreateTopicOptions,
#: CreateSubscriptionOptions): SETTLE-ENT-003. The rest must keep their defaults.
KIND_FIELDS = {
    "queue": frozenset(EntityDescription.field_names()) - {"support_ordering"},  # a topic's (CreateTopicOptions)
    "topic": frozenset({
        "default_message_time_to_live", "requires_duplicate_detection", "duplicate_detection_history_time_window",
        "max_size_in_megabytes", "max_message_size", "enable_batched_operations", "auto_delete_on_idle",
        "enable_partitioning", "status", "support_ordering",
    }),
    "subscription": frozenset({
        "lock_duration", "max_delivery_count", "default_message_time_to_live", "dead_lettering_on_message_expiration",
        "requires_session", "enable_batched_operations", "auto_delete_on_idle", "forward_to",
        "forward_dead_lettered_messages_to", "dead_lettering_on_filter_evaluation_exceptions", "status",
    }),
}
_DEFAULT_DESCRIPTION = EntityDescription()


def effective_time_to_live(message_ttl: int | None, *ceilings: int) -> int:
    """SETTLE-TTL-001: the entity default is both the default and a ceiling."""
    ttl = message_ttl if message_ttl is not None else TIMESPAN_MAX
    for ceiling in ceilings:
        if ceiling < ttl:
            ttl = ceiling
    return ttl


def expiry(enqueued_time: int, ttl: int) -> int:
    return NEVER if ttl >= TIMESPAN_MAX else enqueued_time + ttl
