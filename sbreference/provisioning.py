"""Provisioning: creating, updating, describing and deleting entities, subscriptions and rules.

The management half of the namespace (SETTLE-ENT-*, SETTLE-TIER-*, PART-CREATE-*,
PART-MGMT-*, RULES-RULE-*): every description is validated against the tier and the
kind of entity before anything changes, and what can only be chosen at creation stays
as it was chosen. Mixed into ``namespace.Namespace``; it uses the namespace's entities,
routes, SKU and forwarding router.
"""

from __future__ import annotations

from typing import Any, Iterable

from .description import KB, MAX_NAME_LENGTH, MAX_PATH_LENGTH, MAX_SUBSCRIPTIONS_PER_TOPIC, MB, EntityDescription
from .entity import MAX_TRANSFER_HOPS, Entity, Queue, Subscription, Topic
from .forwarding import never_idle_when_forwarding
from .idle import entity_used_at, stamp, store_accessed_at
from .errors import ErrorCode, ServiceBusError
from .message import Message, State
from .partitioning import MAX_PARTITIONED_ENTITIES, STANDARD_PARTITION_COUNT, PartitionedEntity, PartitionedQueue, PartitionedTopic
from .paths import SUBSCRIPTIONS, name_problem, parse
from .rules import Rule, check_filter_quota
from .status import refuse_send
from .store import MessageStore
from .tiers import STANDARD_MAX_ENTITIES, TIERS, capped_time_to_live, check_entity, max_entities

#: Queues and topics per namespace (Basic/Standard), partitioned ones counting as one each (PART-LIMIT-003);
#: Premium: per messaging unit (SETTLE-TIER-007, ``tiers.max_entities``).
MAX_ENTITIES = STANDARD_MAX_ENTITIES
#: SETTLE-SESS-011: "Maximum number of session states per messaging entity: queue or subscription | 1,000,000"
#: (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-quotas).
MAX_SESSION_STATES = 1_000_000
#: Description fields that can only be chosen when the entity is created (PART-CREATE-002).
IMMUTABLE = ("requires_session", "requires_duplicate_detection", "enable_partitioning")


class Provisioning:
    """The management operations of a ``Namespace``."""

    # ------------------------------------------------------------ management

    def create_queue(self, path: str, description: EntityDescription | None = None, **properties: Any) -> Queue | PartitionedQueue:
        return self._create(path, "queue", description, properties)

    def create_topic(self, path: str, description: EntityDescription | None = None, **properties: Any) -> Topic | PartitionedTopic:
        return self._create(path, "topic", description, properties)

    def _create(self, path: str, kind: str, description: EntityDescription | None, properties: dict[str, Any]) -> Any:
        d = (description or EntityDescription()).with_changes(**properties).validate(kind)
        partitions = None
        if self.partition_count is not None:  # a partitioned Premium namespace
            if properties.get("enable_partitioning") is False or (description and not description.enable_partitioning and "enable_partitioning" in properties):
                raise ServiceBusError(
                    ErrorCode.INVALID_OPERATION,
                    f"'{path}': every {kind} of a partitioned Premium namespace is partitioned; a non-partitioned one cannot be created.",
                )
            partitions = self.partition_count
            d = d.with_changes(enable_partitioning=True)
            if "max_message_size" not in properties:
                d = d.with_changes(max_message_size=1024 * KB)  # PART-LIMIT-001
        elif d.enable_partitioning:
            if self.sku == "premium":
                raise ServiceBusError(
                    ErrorCode.INVALID_OPERATION,
                    f"'{path}': a Premium namespace is partitioned when it is created, or not at all; "
                    "this one is not, so it cannot hold a partitioned entity (PART-CREATE-003).",
                    transient=False,
                )
            partitions = STANDARD_PARTITION_COUNT  # PART-STRUCT-002
        if self.sku == "premium" and "max_message_size" not in properties and (
            description is None or description.max_message_size == EntityDescription().max_message_size
        ):
            d = d.with_changes(max_message_size=TIERS["premium"].default_max_message_size)  # SETTLE-TIER-002
        d = never_idle_when_forwarding(capped_time_to_live(self.sku, d))  # SETTLE-TIER-005: Basic's 14 days; SETTLE-FWD-001
        check_entity(self.sku, kind, d)  # SETTLE-TIER-001..004
        if len(path.strip("/")) > MAX_PATH_LENGTH:
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"The entity path of {len(path)} characters is longer than {MAX_PATH_LENGTH}.", transient=False)
        if (problem := name_problem(path, segments=True)) is not None:  # SETTLE-ENT-002
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"Invalid entity path: {problem}.", transient=False)
        self._check_forward_to(path, d.forward_to)
        self._check_forward_to(path, d.forward_dead_lettered_messages_to)
        if path.lower() not in self.entities:
            if len(self.entities) >= (limit := max_entities(self.messaging_units)):
                raise ServiceBusError(ErrorCode.QUOTA_EXCEEDED, f"The namespace already holds {limit} queues and topics.", transient=False)
            if partitions is not None and self.sku != "premium":
                partitioned = sum(1 for e in self.entities.values() if e.partitioned)
                if partitioned >= MAX_PARTITIONED_ENTITIES:
                    raise ServiceBusError(
                        ErrorCode.QUOTA_EXCEEDED,
                        f"The namespace already holds {MAX_PARTITIONED_ENTITIES} partitioned queues and topics.",
                        transient=False,
                    )
        if partitions is None:
            entity = (Queue if kind == "queue" else Topic)(path, d, self._lock_tokens)
        else:
            entity = (PartitionedQueue if kind == "queue" else PartitionedTopic)(path, d, self._lock_tokens, partitions, self._partition_lock_tokens)
        entity.router = self._auto_forward  # ForwardTo (SETTLE-FWD-004); dead-letter forwarding takes _forward
        entity.max_batch_size = TIERS[self.sku].max_batch_size  # SETTLE-TIER-006
        added = self._add(entity)
        stamp([entity], self.clock.now, created=True)  # SETTLE-ENT-004
        self.mark_temporary(entity)  # SETTLE-IDLE-001
        self._forward_dead_letters(entity.stores, d.forward_dead_lettered_messages_to)
        return added

    def update(self, path: str, **changes: Any) -> EntityDescription:
        """Change an entity's description. What can only be chosen at creation (sessions,
        duplicate detection, partitioning) cannot change (PART-CREATE-002); a partitioned
        entity is updated on every partition or not at all (PART-MGMT-001/002)."""
        entity, store = self._resolve(path)
        if store is not None and entity.kind != "topic":
            raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"'{path}' cannot be updated; update its entity.")
        owner = entity.subscriptions[store.path.rsplit("/", 1)[-1].lower()] if store is not None else entity
        current = owner.description
        new = never_idle_when_forwarding(capped_time_to_live(self.sku, current.with_changes(**changes).validate(owner.kind)))
        check_entity(self.sku, owner.kind, new)  # SETTLE-TIER-001..004
        if new.forward_to != current.forward_to:
            self._check_forward_to(owner.path, new.forward_to)
        if new.forward_dead_lettered_messages_to != current.forward_dead_lettered_messages_to:
            self._check_forward_to(owner.path, new.forward_dead_lettered_messages_to)
        fixed = [f for f in IMMUTABLE if getattr(new, f) != getattr(current, f)]
        if fixed:
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION,
                f"'{path}': {', '.join(fixed)} can only be chosen when the entity is created.",
                transient=False,
            )
        if entity.partitioned:
            entity.require_all_available("update")
        owner.description = new
        stamp([owner], self.clock.now)  # SETTLE-ENT-004; an update is use (SETTLE-IDLE-002..004)
        self.mark_temporary(entity)
        if (new.status, new.forward_to, new.forward_dead_lettered_messages_to) != (
            current.status, current.forward_to, current.forward_dead_lettered_messages_to
        ):
            self._forget_routes()  # a cached path is checked again (SETTLE-STATUS-*, SETTLE-FWD-003)
        if owner is entity:
            entity.max_bytes = new.max_size_in_megabytes * MB
            if entity.duplicates is not None:
                entity.duplicates.window = new.duplicate_detection_history_time_window
        stores = [store] if store is not None else entity.stores
        for s in stores:
            for part in getattr(s, "partitions", [s]):
                part.set_description(new.lock_duration, new.max_delivery_count, new.dead_lettering_on_message_expiration)
        if owner.kind != "topic":
            self._forward_dead_letters(stores, new.forward_dead_lettered_messages_to)
        return new

    def _forward_dead_letters(self, stores: Iterable[MessageStore], destination: str | None) -> None:
        """SETTLE-FWD-002: a queue's or subscription's stores send what they dead-letter to ``destination``."""
        for s in stores:
            for part in getattr(s, "partitions", [s]):
                part.forward_dead_letters_to = destination
                part.router = self._forward if destination is not None else None

    def create_subscription(
        self, topic_path: str, name: str, description: EntityDescription | None = None, **properties: Any
    ) -> Subscription:
        topic = self._entity(topic_path)
        if topic.kind != "topic":
            raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"'{topic_path}' is not a topic.")
        d = never_idle_when_forwarding(capped_time_to_live(self.sku, (description or EntityDescription()).with_changes(**properties).validate("subscription")))
        check_entity(self.sku, "subscription", d)
        if len(name) > MAX_NAME_LENGTH:
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"The subscription name of {len(name)} characters is longer than {MAX_NAME_LENGTH}.", transient=False)
        if (problem := name_problem(name, segments=False)) is not None:  # SETTLE-ENT-002
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"Invalid subscription name: {problem}.", transient=False)
        if name.lower() not in topic.subscriptions and len(topic.subscriptions) >= MAX_SUBSCRIPTIONS_PER_TOPIC:
            raise ServiceBusError(
                ErrorCode.QUOTA_EXCEEDED, f"The topic '{topic.path}' already has {MAX_SUBSCRIPTIONS_PER_TOPIC} subscriptions.", transient=False
            )  # SETTLE-ENT-002
        self._check_forward_to(f"{topic.path}/Subscriptions/{name}", d.forward_to)
        self._check_forward_to(f"{topic.path}/Subscriptions/{name}", d.forward_dead_lettered_messages_to)
        self._forget_routes()
        sub = topic.add_subscription(name, d)
        sub.rules.bind(sub, self)  # its filters' dates are this namespace's clock's (RULES-SQL-016), its forwarding its own
        stamp([sub], self.clock.now, created=True)  # SETTLE-ENT-004
        self.mark_temporary(topic)  # SETTLE-IDLE-001
        self._forward_dead_letters([sub.store], d.forward_dead_lettered_messages_to)
        return sub

    def _forward(self, destination: str, message: Message, now: int) -> None:
        """Auto-forwarding: the message enters the destination as if sent there. Past four hops it is
        refused (MaxTransferHopCountExceeded, SETTLE-FWD-004); "Service Bus bills one operation for each
        forwarded message" (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-auto-forwarding):
        SETTLE-FWD-005, a forward that fails is not billed (reading)."""
        if self._hops >= MAX_TRANSFER_HOPS:
            raise ServiceBusError(  # the description service-bus-dead-letter-queues gives MaxTransferHopCountExceeded
                ErrorCode.QUOTA_EXCEEDED,
                f"The maximum number of allowed hops when forwarding between queues has been exceeded. This value is set to {MAX_TRANSFER_HOPS}.",
            )
        self._hops += 1
        try:
            entity = self._sending_entity(destination)
            entity.accessed_at = now  # a forwarded message is sent to it (SETTLE-IDLE-001, reading)
            entity.accept([message], now)
        finally:
            self._hops -= 1
        self.billed_operations += 1

    def _auto_forward(self, destination: str, message: Message, now: int) -> None:
        """ForwardTo: as ``_forward``, but a destination that is Disabled or SendDisabled refuses the message,
        which the source then dead-letters: "If the destination entity accumulates too many messages and exceeds
        the quota, or the destination entity is disabled, the source entity adds the messages to its dead-letter
        queue" (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-auto-forwarding). SETTLE-FWD-004.
        Dead-letter forwarding keeps ``_forward``: "In case the destination entity is disabled, forwarding to this
        entity will still continue to work" (https://github.com/Azure/azure-service-bus/issues/666; SETTLE-DISC-007)."""
        entity = self._sending_entity(destination)
        refuse_send(entity.kind, entity.path, entity.description.status)
        self._forward(destination, message, now)

    def _check_forward_to(self, source: str, destination: str | None) -> None:
        """SETTLE-FWD-001: auto-forwarding (set on create or update, PART-FWD-002) names a
        queue or topic of this namespace that exists at that time, other than the source."""
        if destination is None:
            return
        if destination.lower().strip("/") == source.lower().strip("/"):
            raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"'{source}' cannot forward to itself.", transient=False)
        if destination.lower().strip("/") not in self.entities:
            raise ServiceBusError(
                ErrorCode.ENTITY_NOT_FOUND,
                f"The auto-forwarding destination '{self.name}/{destination}' of '{source}' could not be found; "
                "it must exist when forwarding is set.",
                transient=False,
            )

    # ------------------------------------------------------------- rules

    def subscription(self, path: str) -> Any:
        """The subscription at ``<topic>/Subscriptions/<name>``."""
        entity, store = self._resolve(path)
        if entity.kind != "topic" or store is None or store.is_dead_letter:
            raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"'{path}' is not a subscription; rules belong to subscriptions.")
        return entity.subscriptions[store.path.rsplit("/", 1)[-1].lower()]

    def add_rule(self, path: str, rule: Rule) -> None:
        """RULES-RULE-004: add a rule to a subscription (names are unique in it), within its topic's
        filter quotas (RULES-RULE-006)."""
        sub = self.subscription(path)
        check_filter_quota((s.rules for s in sub.topic.subscriptions.values()), rule)
        sub.rules.add(rule)
        sub.used_at = self.clock.now  # "No new rules added to the subscription" (SETTLE-IDLE-003)

    def remove_rule(self, path: str, name: str) -> None:
        sub = self.subscription(path)
        sub.rules.remove(name)
        sub.used_at = self.clock.now  # SETTLE-IDLE-003 (reading, SETTLE-DISC-010)

    def list_rules(self, path: str) -> list[Rule]:
        return self.subscription(path).rules.list()

    def _add(self, entity: Entity) -> Any:
        key = entity.path.lower()
        if key in self.entities:
            raise ServiceBusError(ErrorCode.ENTITY_ALREADY_EXISTS, f"The {entity.kind} '{entity.path}' already exists.")
        self.entities[key] = entity
        self._forget_routes()
        return entity

    def delete(self, path: str) -> None:
        self._forget_routes()
        key = path.lower()
        parsed = parse(path) if SUBSCRIPTIONS in key else None
        entity = self.entities.get(parsed.key if parsed is not None else key)
        if entity is not None and entity.partitioned:
            entity.require_all_available("delete")  # PART-MGMT-002
        if parsed is not None:
            topic_path, name = parsed.entity, parsed.subscription
            topic = self._entity(topic_path)
            if topic.kind != "topic":
                raise ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, f"'{topic_path}' is not a topic.")
            topic.remove_subscription(name)
            self.mark_temporary(topic)
            return
        self._temporary.discard(key)
        if self.entities.pop(key, None) is None:
            raise ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, f"The entity '{path}' was not found.")

    def exists(self, path: str) -> bool:
        try:
            self._resolve(path)
        except ServiceBusError:
            return False
        return True

    def describe(self, path: str) -> EntityDescription:
        entity, store = self._resolve(path)
        if entity.kind == "topic" and store is not None:
            return entity.subscriptions[store.path.rsplit("/", 1)[-1].lower()].description
        return entity.description

    def runtime_info(self, path: str) -> dict[str, Any]:
        """The runtime properties Get reports: message counts summed over partitions that answer, with
        the availability status (``limited`` while a partition is down: PART-MGMT-004), and when the entity
        was created, updated and accessed (virtual milliseconds). A topic's are its own (SETTLE-ENT-004):
        TopicRuntimeProperties has "scheduled_message_count", "size_in_bytes" and "subscription_count" but no
        active or dead-letter count, which its subscriptions report
        (https://learn.microsoft.com/python/api/azure-servicebus/azure.servicebus.management.topicruntimeproperties).
        A subscription's have no scheduled count and no size (SubscriptionRuntimeProperties: active, dead-letter,
        total and transfer counts, and the times): its topic's scheduled messages and bytes are not its own."""
        entity, store = self._resolve(path)
        now = self.clock.now
        entity.tick(now)
        info: dict[str, Any] = {}
        if entity.kind != "topic" or store is None:
            info.update(scheduled=len(entity.scheduled), size_bytes=entity.bytes)
        if store is None and entity.kind == "topic":
            # "The DateTime at which a message was last sent to the topic" (TopicRuntimeProperties.AccessedAt, .NET)
            info.update(subscription_count=len(entity.subscriptions), accessed_at=entity.accessed_at)
            owner = entity
        else:
            owner = entity.subscriptions[parse(store.path).subscription_key] if entity.kind == "topic" else entity
            own = owner.store
            # "Last time a message was sent, or the last time there was a receive request" (QueueRuntimeProperties)
            info["accessed_at"] = max(store_accessed_at(own), getattr(owner, "accessed_at", 0))
            # TXN-VIA-002: TransferDeadLetterMessageCount (a subscription's: always 0 in the model)
            counts = {"active": 0, "deferred": 0, "dead_letter": 0, "transfer_dead_letter": len(getattr(owner, "transfer_dead_letter", ()))}
            s = store if store is not None else own  # a partitioned queue's store sums the partitions that answer
            s.tick(now)
            if s.dead_letter_queue is not None:  # a dead-letter path's store has none under it
                s.dead_letter_queue.tick(now)
            for key, value in s.counts().items():
                counts[key] += value
            info.update(counts)
        info.update(created_at=getattr(owner, "created_at", 0), updated_at=getattr(owner, "updated_at", 0))
        info["availability_status"] = entity.availability_status if entity.partitioned else "available"
        if entity.partitioned:
            info["partition_count"] = entity.partition_count
        return info

    def charge_state(self, path: str, store: Any, old: bytes | None, new: bytes | None, change: Any) -> None:
        """SETTLE-SESS-010: "The session state held in a queue or in a subscription counts towards that entity's
        storage quota" (https://learn.microsoft.com/azure/service-bus-messaging/message-sessions). A state that
        grows the queue (a subscription's: its topic, the entity with a size) past its maximum is refused with
        quota-exceeded, as a send would be, before ``change`` sets it; otherwise the entity's bytes follow it.
        SETTLE-SESS-011: a state on a further session past ``MAX_SESSION_STATES`` in ``store`` is refused too."""
        entity, grown = self._resolve(path)[0], len(new or b"") - len(old or b"")
        if new and old is None and store.state_count() >= MAX_SESSION_STATES:
            raise ServiceBusError(
                ErrorCode.QUOTA_EXCEEDED,
                f"'{path}' already holds {MAX_SESSION_STATES} session states, the most a queue or subscription holds.",
                transient=False,
            )
        if grown > 0 and entity.bytes + grown > entity.max_bytes:
            raise ServiceBusError(
                ErrorCode.QUOTA_EXCEEDED,
                f"The maximum entity size has been reached or exceeded for {entity.kind} '{entity.path}': a session state "
                f"of {grown} more bytes does not fit (size {entity.bytes} bytes, max {entity.max_bytes} bytes).",
                transient=False,
            )
        change()
        entity.bytes += grown

    def session_state_limit(self, path: str) -> int:
        """SETTLE-SESS-008: the bytes a session state of ``path`` may hold: "the size of one message, which
        is 256 KB for Service Bus Standard, and 100 MB for Service Bus Premium" (message-sessions). Basic and
        Standard: the entity's max message size (256 KB, or less under the small-message extension); Premium:
        the page's 100 MB, whatever the entity's own (reading)."""
        if self.sku == "premium":
            return TIERS["premium"].max_message_size
        return self._resolve(path)[0].description.max_message_size  # a subscription's: its topic's

    def available_count(self, path: str) -> int:
        """Messages a receive on ``path`` could be given now: stored, and not locked, deferred or
        scheduled; refused as a receive would be (unknown, unavailable or suspended entity).
        Not a figure Service Bus reports: ``sbconform serve`` answers it on its control
        node, so that a client moving the clock on knows whether a receive has anything to wait for."""
        store = self._taking_store(path, use=False)  # refused where a receive would be; not use (SETTLE-IDLE-002)
        store.tick(self.clock.now)
        return sum(1 for m in store.messages.values() if m.state is State.ACTIVE)

    # ------------------------------------------------------------ partitions

    def partitioned(self, path: str) -> PartitionedEntity:
        entity, _ = self._resolve(path)
        if not entity.partitioned:
            raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"'{path}' is not partitioned.")
        return entity

    def make_partition_unavailable(self, path: str, partition: int) -> None:
        """Fault injection: one partition's store goes down; it keeps what it holds."""
        self.partitioned(path).set_partition_available(partition, False)

    def make_partition_available(self, path: str, partition: int) -> None:
        self.partitioned(path).set_partition_available(partition, True)
