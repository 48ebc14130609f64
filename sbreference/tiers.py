"""The messaging tiers (SKUs) of a namespace, and the rules each imposes on its entities.

One table, ``TIERS``, read like the documentation's tier comparison and quotas pages;
``check_entity`` applies it to a description before an entity is created or updated
(transactions check ``Tier.transactions`` through the coordinator, ``transactions.py``: TXN-TIER-001). Sources (sbspec/fidelity.md, SETTLE-TIER-*):

- Basic has queues only: "The basic tier of Service Bus doesn't support" topics, sessions,
  duplicate detection, auto-forwarding or transactions (the enable-message-sessions,
  duplicate-detection, enable-auto-forward and service-bus-transactions pages).
- Message size: "256 KB for Standard tier, 100 MB for Premium tier" (service-bus-quotas);
  on Premium the entity's MaxMessageSizeInKilobytes is "only used in Premium today and
  default is 1024" (the queue model's reference), from 1 KB to 100 MB.
- Queue or topic size: "1, 2, 3, 4 GB or 5 GB. In the Premium SKU, and the Standard SKU
  with partitioning enabled, the maximum queue or topic size is 80 GB" (service-bus-quotas).
- Message time to live on Basic: "For the basic tier, the default (also maximum) expiration time is
  14 days" (message-expiration): SETTLE-TIER-005.

sbconform extension, recorded as such in sbspec/fidelity.md: sizes *below* the documented
minimum (max message size under 256 KB on Basic/Standard, entity size under 1 GB) are
accepted, so that kits can test size and quota rules with small messages (capability
``small-quota``). Everything above the documented maximum is refused, as Service Bus does.
"""

from __future__ import annotations

from dataclasses import dataclass

from .clock import DAY, TIMESPAN_MAX
from .errors import ErrorCode, ServiceBusError

KB = 1024
MB = 1024 * KB
GB_IN_MB = 1024


#: PART-LIMIT-001: in a partitioned Premium namespace a message (and a batch) is at most 1 MB (seed 003).
PARTITIONED_PREMIUM_MESSAGE_SIZE = 1 * MB

#: SETTLE-TIER-006: on Premium "AMQP protocol: Up to 100 MB for single message ... All protocols: Up to 1 MB for
#: message batch" (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-quotas, 2025 revision).
PREMIUM_BATCH_SIZE = 1 * MB

#: SETTLE-TIER-004: "The property 'MaxSizeInMegabytes', must be one of the following values:
#: 1024;2048;3072;4096;5120" (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-resource-manager-exceptions).
STANDARD_ENTITY_SIZES = (1 * GB_IN_MB, 2 * GB_IN_MB, 3 * GB_IN_MB, 4 * GB_IN_MB, 5 * GB_IN_MB)

#: SETTLE-TIER-005: "For the basic tier, the default (also maximum) expiration time is 14 days"
#: (https://learn.microsoft.com/azure/service-bus-messaging/message-expiration).
BASIC_MAX_TIME_TO_LIVE = 14 * DAY


#: SETTLE-TIER-007: "You can purchase 1, 2, 4, 8, or 16 messaging units for each Service Bus Premium namespace"
#: (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-premium-messaging); queues and topics: "10,000"
#: on Basic and Standard, on Premium "1,000 per messaging unit (MU), up to 16,000 per namespace"; "The number of
#: messaging units must be a multiple of the number of partitions" (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-quotas).
MESSAGING_UNITS = (1, 2, 4, 8, 16)
STANDARD_MAX_ENTITIES = 10_000
PREMIUM_ENTITIES_PER_UNIT = 1_000
PREMIUM_MAX_ENTITIES = 16_000


def messaging_units(sku: str, partition_count: int | None, units: int | None) -> int | None:
    """SETTLE-TIER-007: a Premium namespace's messaging units (unless given: its partition count, or one); None
    on Basic and Standard, which have none."""
    if sku != "premium":
        if units is not None:
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"messaging units are a Premium property; got {units} on {sku}")
        return None
    units = units if units is not None else (partition_count or 1)
    if units not in MESSAGING_UNITS or (partition_count is not None and units % partition_count):
        raise ServiceBusError(
            ErrorCode.ARGUMENT_ERROR,
            f"a Premium namespace has one of {MESSAGING_UNITS} messaging units, a multiple of its partition count; got {units}",
        )
    return units


def max_entities(units: int | None) -> int:
    """SETTLE-TIER-007: the queues and topics a namespace with ``units`` messaging units (None: Basic, Standard) holds."""
    return STANDARD_MAX_ENTITIES if units is None else min(PREMIUM_ENTITIES_PER_UNIT * units, PREMIUM_MAX_ENTITIES)


@dataclass(frozen=True)
class Tier:
    name: str
    topics: bool
    sessions: bool
    duplicate_detection: bool
    auto_forward: bool
    transactions: bool
    #: Largest max message size an entity may have, and the default.
    max_message_size: int
    default_max_message_size: int
    #: Smallest max message size that may be set (None: not settable above the default).
    min_message_size: int | None
    #: Largest entity size, in megabytes (non-partitioned, partitioned).
    max_entity_megabytes: int
    max_partitioned_entity_megabytes: int
    #: SETTLE-TIER-005: an entity's default message time to live, unless set, and its ceiling.
    max_message_time_to_live: int = TIMESPAN_MAX
    #: SETTLE-TIER-003: whether an entity may be deleted on idle (AutoDeleteOnIdle other than never).
    auto_delete_on_idle: bool = True
    #: SETTLE-TIER-004: the sizes, from 1 GB up, a non-partitioned queue or topic may have (None: any up to the maximum).
    entity_sizes_megabytes: tuple[int, ...] | None = None
    #: SETTLE-TIER-006: the largest batch, whatever the entity's max message size (None: that size).
    max_batch_size: int | None = None


TIERS: dict[str, Tier] = {
    "basic": Tier("basic", topics=False, sessions=False, duplicate_detection=False, auto_forward=False, transactions=False,
                  max_message_size=256 * KB, default_max_message_size=256 * KB, min_message_size=None,
                  max_entity_megabytes=5 * GB_IN_MB, max_partitioned_entity_megabytes=80 * GB_IN_MB,
                  max_message_time_to_live=BASIC_MAX_TIME_TO_LIVE, auto_delete_on_idle=False,
                  entity_sizes_megabytes=STANDARD_ENTITY_SIZES),
    "standard": Tier("standard", topics=True, sessions=True, duplicate_detection=True, auto_forward=True, transactions=True,
                     max_message_size=256 * KB, default_max_message_size=256 * KB, min_message_size=None,
                     max_entity_megabytes=5 * GB_IN_MB, max_partitioned_entity_megabytes=80 * GB_IN_MB,
                     entity_sizes_megabytes=STANDARD_ENTITY_SIZES),
    "premium": Tier("premium", topics=True, sessions=True, duplicate_detection=True, auto_forward=True, transactions=True,
                    max_message_size=100 * MB, default_max_message_size=1 * MB, min_message_size=1 * KB,
                    max_entity_megabytes=80 * GB_IN_MB, max_partitioned_entity_megabytes=80 * GB_IN_MB,
                    max_batch_size=PREMIUM_BATCH_SIZE),
}


def _refuse(feature: str, tier: Tier) -> ServiceBusError:
    return ServiceBusError(
        ErrorCode.INVALID_OPERATION,
        f"The {tier.name} tier of Service Bus doesn't support {feature}.",
        transient=False,
    )


def capped_time_to_live(sku: str, description):
    """SETTLE-TIER-005: the description with its default message time to live held to the tier's
    ceiling (Basic: 14 days, "the default (also maximum) expiration time"). Held, not refused: the .NET
    CreateQueueOptions sends TimeSpan.MaxValue unless told otherwise, so a refusal would refuse every
    Basic queue it creates; the page names no error (reading)."""
    ceiling = TIERS[sku].max_message_time_to_live
    if description.default_message_time_to_live <= ceiling:
        return description
    return description.with_changes(default_message_time_to_live=ceiling)


def check_entity(sku: str, kind: str, description) -> None:
    """Refuse what the namespace's tier does not allow (SETTLE-TIER-001..004)."""
    tier = TIERS[sku]
    if kind == "topic" and not tier.topics:
        raise _refuse("topics", tier)
    if description.requires_session and not tier.sessions:
        raise _refuse("sessions", tier)
    if description.requires_duplicate_detection and not tier.duplicate_detection:
        raise _refuse("duplicate detection", tier)
    if (description.forward_to is not None or description.forward_dead_lettered_messages_to is not None) and not tier.auto_forward:
        raise _refuse("auto-forwarding", tier)
    if description.auto_delete_on_idle < TIMESPAN_MAX and not tier.auto_delete_on_idle:
        # SETTLE-TIER-003: on Basic "the below properties can't be set or updated - ... AutoDeleteOnIdle"
        # (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-resource-manager-exceptions)
        raise _refuse("auto-delete-on-idle", tier)
    size = description.max_message_size
    if tier.name == "premium" and description.enable_partitioning and size > PARTITIONED_PREMIUM_MESSAGE_SIZE:
        raise ServiceBusError(  # PART-LIMIT-001
            ErrorCode.ARGUMENT_ERROR,
            f"max message size {size} bytes is not allowed in a partitioned Premium namespace (at most 1 MB).",
            transient=False,
        )
    if size > tier.max_message_size or (tier.min_message_size is not None and size < tier.min_message_size):
        low = f"{tier.min_message_size // KB} KB" if tier.min_message_size else "up to"
        raise ServiceBusError(
            ErrorCode.ARGUMENT_ERROR,
            f"max message size {size} bytes is not allowed on the {tier.name} tier "
            f"({low} {tier.max_message_size // KB} KB).",
            transient=False,
        )
    if kind != "subscription":
        ceiling = tier.max_partitioned_entity_megabytes if description.enable_partitioning else tier.max_entity_megabytes
        sizes = None if description.enable_partitioning else tier.entity_sizes_megabytes
        if sizes is not None and GB_IN_MB <= description.max_size_in_megabytes <= ceiling and description.max_size_in_megabytes not in sizes:
            raise ServiceBusError(  # SETTLE-TIER-004: 1 to 5 GB in whole GB (below 1 GB: the small-quota extension)
                ErrorCode.ARGUMENT_ERROR,
                f"max size {description.max_size_in_megabytes} MB must be one of {';'.join(map(str, sizes))} on the {tier.name} tier.",
                transient=False,
            )
        if description.max_size_in_megabytes > ceiling:
            raise ServiceBusError(
                ErrorCode.ARGUMENT_ERROR,
                f"max size {description.max_size_in_megabytes} MB is above the {tier.name} tier's {ceiling} MB "
                f"for a {'partitioned ' if description.enable_partitioning else ''}{kind}.",
                transient=False,
            )
