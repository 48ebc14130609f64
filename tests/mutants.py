"""Deliberately broken targets. The kit must catch every one of them.

Each mutant is the reference target with one documented behaviour broken, the way a
real broker or emulator might get it wrong: a ``TargetWrapper`` around a
``ReferenceTarget`` that overrides only what it breaks. ``tests/test_mutants.py`` runs the
differential machine and the features against each and requires a failure: a check
that cannot fail on these is not checking anything.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

from sbreference import PING_CONTENT_TYPE, ErrorCode, ServiceBusError
from sbreference.sqlfilter import UNKNOWN, Evaluator, arithmetic, compare, like, not3

from sbconform.targets import Handle, TargetWrapper, register
from sbconform.targets.reference import ReferenceTarget


class Mutant(TargetWrapper):
    """The reference target, with what a subclass overrides broken."""

    def __init__(self) -> None:
        super().__init__(ReferenceTarget())


def _quiet(call, *codes, answer=None):
    """``call()``; an error with one of ``codes`` is answered with ``answer`` instead: a broker
    claiming success where Service Bus refuses."""
    try:
        return call()
    except ServiceBusError as error:
        if error.code not in codes:
            raise
        return answer


class DeliveryCountAlwaysOne(Mutant):
    """Reports every delivery as the first (SETTLE-LOCK-010)."""

    name = "mutant-delivery-count"

    def receive(self, receiver, max_count=1, max_wait=None):
        return [replace(m, delivery_count=1) for m in super().receive(receiver, max_count, max_wait)]


class CompleteIgnored(Mutant):
    """Acknowledges complete but keeps the message (SETTLE-COMP-001)."""

    name = "mutant-complete-ignored"

    def complete(self, receiver, message):
        self.namespace.renew_lock(receiver.private, receiver.path, self._token(message))


class OnlyHolderSettles(Mutant):
    """Refuses a lock token from any receiver but the one that took the message, with
    message-lock-lost, as if the lock belonged to the receiver and not to the entity
    (SETTLE-LOCK-011: the reading the catalog held before issue 14)."""

    name = "mutant-only-holder-settles"

    def _refuse_others(self, receiver, message) -> None:
        store = self.namespace.receiving_store(receiver.path)
        lock = store.locks.get(self._token(message))
        if lock is not None and lock.holder != receiver.private:
            raise ServiceBusError(
                ErrorCode.MESSAGE_LOCK_LOST,
                "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.",
            )

    def complete(self, receiver, message):
        self._refuse_others(receiver, message)
        super().complete(receiver, message)

    def abandon(self, receiver, message, properties=None):
        self._refuse_others(receiver, message)
        super().abandon(receiver, message, properties)

    def defer(self, receiver, message, properties=None):
        self._refuse_others(receiver, message)
        super().defer(receiver, message, properties)

    def dead_letter(self, receiver, message, reason=None, description=None, properties=None):
        self._refuse_others(receiver, message)
        super().dead_letter(receiver, message, reason, description, properties)

    def renew_lock(self, receiver, message):
        self._refuse_others(receiver, message)
        return super().renew_lock(receiver, message)


class ExpiredLockSettles(Mutant):
    """Claims success when completing a lost lock (SETTLE-LOCK-008)."""

    name = "mutant-expired-lock-settles"

    def complete(self, receiver, message):
        _quiet(lambda: super(ExpiredLockSettles, self).complete(receiver, message), ErrorCode.MESSAGE_LOCK_LOST)


class DeferLosesMessage(Mutant):
    """Defer deletes the message (SETTLE-DEFR-001)."""

    name = "mutant-defer-loses"

    def defer(self, receiver, message, properties=None):
        self.namespace.complete(receiver.private, receiver.path, self._token(message))


class AbandonWaitsForExpiry(Mutant):
    """Abandon does nothing; the message only comes back when the lock expires (SETTLE-ABAN-001)."""

    name = "mutant-abandon-waits"

    def abandon(self, receiver, message, properties=None):
        self._token(message)


class IgnoresPropertiesToModify(Mutant):
    """Settles as asked but drops the properties to modify (SETTLE-MOD-001)."""

    name = "mutant-ignores-properties-to-modify"

    def abandon(self, receiver, message, properties=None):
        super().abandon(receiver, message)

    def defer(self, receiver, message, properties=None):
        super().defer(receiver, message)

    def dead_letter(self, receiver, message, reason=None, description=None, properties=None):
        super().dead_letter(receiver, message, reason, description)


class IgnoresPartitionKey(Mutant):
    """Spreads keyed messages round-robin as if they had no key (PART-KEY-006, PART-KEY-002)."""

    name = "mutant-ignores-partition-key"

    def send(self, sender, messages, batch=False):
        return super().send(sender, [replace(m, partition_key=None) for m in messages], batch)


class PingsDelivered(Mutant):
    """Hands pings to receivers like any message (PAIR-PING-002)."""

    name = "mutant-pings-delivered"
    MARK = "sbconform-mutant-ping"

    def send(self, sender, messages, batch=False):
        return super().send(sender, [self._disguise(m) for m in messages], batch)

    def _disguise(self, message):
        if message.content_type != PING_CONTENT_TYPE:
            return message
        return message.with_changes(content_type=None, application_properties={**message.application_properties, self.MARK: True})

    def receive(self, receiver, max_count=1, max_wait=None):
        out = []
        for m in super().receive(receiver, max_count, max_wait):
            if self.MARK in m.application_properties:
                props = {k: v for k, v in m.application_properties.items() if k != self.MARK}
                m = replace(m, content_type=PING_CONTENT_TYPE, application_properties=props)
            out.append(m)
        return out



# ------------------------------------------------------------------ entity descriptions
class EntityMutant(Mutant):
    """Creates and updates entities with ``_broken`` applied to the properties asked for
    (only on the kinds of entity named in ``kinds``)."""

    kinds: tuple[str, ...] = ("queue", "topic", "subscription")
    dropped: tuple[str, ...] = ()  # properties ignored (the default ``_broken``)

    def _broken(self, properties: dict) -> dict:
        return {k: v for k, v in properties.items() if k not in self.dropped}

    def _apply(self, kind: str, properties: dict) -> dict:
        return self._broken(dict(properties)) if kind in self.kinds else properties

    def create_queue(self, name, **properties):
        return super().create_queue(name, **self._apply("queue", properties))

    def create_topic(self, name, **properties):
        return super().create_topic(name, **self._apply("topic", properties))

    def create_subscription(self, topic_path, name, **properties):
        return super().create_subscription(topic_path, name, **self._apply("subscription", properties))

    def update_entity(self, path, **properties):
        kind = "subscription" if "/subscriptions/" in path.lower() else "queue"  # a topic has what a queue has here
        super().update_entity(path, **self._apply(kind, properties))


class LockDurationIgnored(EntityMutant):
    """Locks every message for the default minute, whatever lock duration the entity has (SETTLE-LOCK-002)."""

    name = "mutant-lock-duration-ignored"
    dropped = ("lock_duration",)


class LockDurationClamped(EntityMutant):
    """Accepts a lock duration over five minutes and quietly uses five (SETTLE-ENT-001)."""

    name = "mutant-lock-duration-clamped"

    def _broken(self, properties):
        if properties.get("lock_duration", 0) > 5 * 60_000:
            properties["lock_duration"] = 5 * 60_000
        return properties


class MaxDeliveryCountIgnored(EntityMutant):
    """Dead-letters after the default ten deliveries, whatever max delivery count the entity has (SETTLE-LOCK-007)."""

    name = "mutant-max-delivery-count-ignored"
    dropped = ("max_delivery_count",)


class DuplicatesNotDetected(EntityMutant):
    """Accepts the duplicate detection setting but never drops a duplicate (SETTLE-DUP-002)."""

    name = "mutant-duplicates-not-detected"
    kinds = ("queue", "topic")

    dropped = ("requires_duplicate_detection", "duplicate_detection_history_time_window")


class DuplicateWindowForever(EntityMutant):
    """Remembers message ids for the longest window allowed, whatever the entity's window (SETTLE-DUP-003)."""

    name = "mutant-duplicate-window-forever"
    kinds = ("queue", "topic")

    def _broken(self, properties):
        if properties.get("requires_duplicate_detection"):
            properties["duplicate_detection_history_time_window"] = 7 * 24 * 3_600_000
        return properties


class DuplicatesAlwaysDetected(EntityMutant):
    """Drops repeated message ids on every queue and topic, duplicate detection asked for or not (SETTLE-DUP-004)."""

    name = "mutant-duplicates-always-detected"
    kinds = ("queue", "topic")

    def _broken(self, properties):
        properties.setdefault("requires_duplicate_detection", True)
        return properties


class DefaultTimeToLiveIgnored(EntityMutant):
    """Lets messages live forever unless they set a time to live: the entity's default is ignored (SETTLE-TTL-001)."""

    name = "mutant-default-ttl-ignored"
    dropped = ("default_message_time_to_live",)


class ExpiryNotDeadLettered(EntityMutant):
    """Drops expired messages even where dead-lettering on expiration is on (SETTLE-TTL-003)."""

    name = "mutant-expiry-not-dead-lettered"
    dropped = ("dead_lettering_on_message_expiration",)


class ForwardDeadLetteredIgnored(EntityMutant):
    """Keeps dead-lettered messages in the entity's own dead-letter subqueue, ForwardDeadLetteredMessagesTo or not (SETTLE-FWD-002)."""

    name = "mutant-forward-dead-lettered-ignored"
    dropped = ("forward_dead_lettered_messages_to",)


class SendDisabledIgnored(EntityMutant):
    """Takes SendDisabled (and Disabled) for Active: a suspended entity still accepts sends (SETTLE-STATUS-001)."""

    name = "mutant-send-disabled-ignored"
    kinds = ("queue", "topic")

    def _broken(self, properties):
        if properties.get("status") in ("SendDisabled", "Disabled"):
            properties["status"] = "Active"
        return properties


class QuotaIgnored(EntityMutant):
    """Gives every queue and topic the largest size: a full entity keeps accepting sends (SETTLE-SEND-005)."""

    name = "mutant-quota-ignored"
    kinds = ("queue", "topic")

    def _broken(self, properties):
        if "max_size_in_megabytes" in properties:
            properties["max_size_in_megabytes"] = 5 * 1024
        return properties


# ---------------------------------------------------------------------- settlement
class RenewLockPretends(Mutant):
    """Answers RenewLock with a new locked-until but does not extend the lock (SETTLE-LOCK-004)."""

    name = "mutant-renew-lock-pretends"

    def renew_lock(self, receiver, message):
        self._token(message)
        return self.now() + self.describe_entity(receiver.path.split("/$")[0]).get("lock_duration", 60_000)


class DropKeepsLocks(Mutant):
    """A dropped connection's locks survive: its messages stay locked and settleable (SETTLE-LOCK-009)."""

    name = "mutant-drop-keeps-locks"

    def drop_connection(self, handle):
        handle.private = self.namespace.connect()


class SecondCompleteAccepted(Mutant):
    """Accepts a second complete of a message it already completed (SETTLE-COMP-002)."""

    name = "mutant-second-complete-accepted"

    def __init__(self) -> None:
        super().__init__()
        self.completed: set = set()

    def complete(self, receiver, message):
        if (receiver.path, message.lock_token) in self.completed:
            return
        super().complete(receiver, message)
        self.completed.add((receiver.path, message.lock_token))


class ReceiveAndDeleteLocks(Mutant):
    """Receive-and-delete receivers really peek-lock and drop the lock token: what they got comes back (SETTLE-RECV-001)."""

    name = "mutant-receive-and-delete-locks"

    def receiver(self, path, mode="peek-lock"):
        handle = super().receiver(path, "peek-lock")
        handle.mode = mode
        return handle

    def receive(self, receiver, max_count=1, max_wait=None):
        if receiver.mode == "peek-lock":
            return super().receive(receiver, max_count, max_wait)
        handle = replace(receiver, mode="peek-lock")
        got = super().receive(handle, max_count, max_wait)
        return [replace(m, lock_token=None, locked_until=None) for m in got]


class ReceivesNewestFirst(Mutant):
    """Hands a receive's messages over newest first (SETTLE-RECV-002, PART-KEY-007)."""

    name = "mutant-receives-newest-first"

    def receive(self, receiver, max_count=1, max_wait=None):
        return list(reversed(super().receive(receiver, max_count, max_wait)))


class LocklessSettleAccepted(Mutant):
    """Accepts settlements of messages received in receive-and-delete mode, doing nothing (SETTLE-RECV-003)."""

    name = "mutant-lockless-settle-accepted"

    def complete(self, receiver, message):
        if message.lock_token is not None:
            super().complete(receiver, message)

    def abandon(self, receiver, message, properties=None):
        if message.lock_token is not None:
            super().abandon(receiver, message, properties)

    def defer(self, receiver, message, properties=None):
        if message.lock_token is not None:
            super().defer(receiver, message, properties)

    def dead_letter(self, receiver, message, reason=None, description=None, properties=None):
        if message.lock_token is not None:
            super().dead_letter(receiver, message, reason, description, properties)


class DeadLetterDropsReason(Mutant):
    """Dead-letters without the reason and description the receiver gave (SETTLE-DLQ-002)."""

    name = "mutant-dead-letter-drops-reason"

    def dead_letter(self, receiver, message, reason=None, description=None, properties=None):
        super().dead_letter(receiver, message, None, None, properties)


class DeadLetterTwiceDeletes(Mutant):
    """Dead-lettering a message of a dead-letter subqueue completes it instead of refusing (SETTLE-DLQ-004)."""

    name = "mutant-dead-letter-twice-deletes"

    def dead_letter(self, receiver, message, reason=None, description=None, properties=None):
        if receiver.path.endswith("/$DeadLetterQueue"):
            super().complete(receiver, message)
        else:
            super().dead_letter(receiver, message, reason, description, properties)


class DeferredLookupQuiet(Mutant):
    """Answers a receive-deferred of a sequence number that is not deferred with nothing, not an error (SETTLE-DEFR-002)."""

    name = "mutant-deferred-lookup-quiet"

    def receive_deferred(self, receiver, sequence_numbers):
        return _quiet(lambda: super(DeferredLookupQuiet, self).receive_deferred(receiver, sequence_numbers),
                      ErrorCode.MESSAGE_NOT_FOUND, answer=[])


class PeekIgnoresStart(Mutant):
    """Peeks from the oldest message whatever sequence number is asked for (SETTLE-PEEK-002)."""

    name = "mutant-peek-ignores-start"

    def peek(self, receiver, max_count=1, from_sequence_number=1):
        return super().peek(receiver, max_count, 1)


class PeekShowsOnlyActive(Mutant):
    """Peek leaves out deferred and scheduled messages (SETTLE-PEEK-003)."""

    name = "mutant-peek-shows-only-active"

    def peek(self, receiver, max_count=1, from_sequence_number=1):
        return [m for m in super().peek(receiver, max_count, from_sequence_number) if m.state == "active"]


# ------------------------------------------------------------ time to live, scheduling
class MessageTimeToLiveIgnored(Mutant):
    """Ignores the time to live a message sets (SETTLE-TTL-002)."""

    name = "mutant-message-ttl-ignored"

    def send(self, sender, messages, batch=False):
        return super().send(sender, [replace(m, time_to_live=None) for m in messages], batch)


class ScheduleSendsNow(Mutant):
    """Enqueues scheduled messages at once (SETTLE-SCHED-001)."""

    name = "mutant-schedule-sends-now"

    def schedule(self, sender, messages, enqueue_time):
        return super().schedule(sender, messages, self.now())


class CancelIgnored(Mutant):
    """Acknowledges the cancellation of a scheduled message but delivers it anyway (SETTLE-SCHED-003)."""

    name = "mutant-cancel-ignored"

    def cancel_scheduled(self, sender, sequence_numbers):
        pass


# ----------------------------------------------------------------------- sessions
class SessionStateNotKept(Mutant):
    """Accepts session state and forgets it (SETTLE-SESS-005)."""

    name = "mutant-session-state-not-kept"

    def set_session_state(self, receiver, state):
        self._session(receiver)


class RenewSessionLockPretends(Mutant):
    """Answers a session lock renewal without extending the session lock (SETTLE-SESS-006)."""

    name = "mutant-renew-session-lock-pretends"

    def renew_session_lock(self, receiver):
        self._session(receiver)
        return self.now() + self.describe_entity(receiver.path).get("lock_duration", 60_000)


class SessionLockShared(Mutant):
    """Lets a second receiver accept a session another receiver holds (SETTLE-SESS-002)."""

    name = "mutant-session-lock-shared"

    def accept_session(self, path, session_id=None, mode="peek-lock", max_wait=None):
        try:
            return super().accept_session(path, session_id, mode, max_wait)
        except ServiceBusError as error:
            if error.code is not ErrorCode.SESSION_CANNOT_BE_LOCKED or session_id is None:
                raise
            return replace(super().receiver(path, mode), session_id=session_id)


class OversizedSessionStateIgnored(Mutant):
    """Answers a session state larger than a message with success, keeping the old state (SETTLE-SESS-008)."""

    name = "mutant-oversized-session-state-ignored"

    def set_session_state(self, receiver, state):
        _quiet(lambda: super(OversizedSessionStateIgnored, self).set_session_state(receiver, state), ErrorCode.MESSAGE_SIZE_EXCEEDED)


class SessionlessAccepted(Mutant):
    """Accepts messages without a session id into a session-enabled entity (SETTLE-SESS-001)."""

    name = "mutant-sessionless-accepted"

    def send(self, sender, messages, batch=False):
        if self.describe_entity(sender.path).get("requires_session"):
            messages = [m if m.session_id is not None else replace(m, session_id="") for m in messages]
        return super().send(sender, messages, batch)


# ------------------------------------------------------------------------ sending
class SendToMissingDropped(Mutant):
    """Accepts (and drops) sends to an entity that does not exist (SETTLE-SEND-007)."""

    name = "mutant-send-to-missing-dropped"

    def sender(self, path):
        try:
            return super().sender(path)
        except ServiceBusError as error:
            if error.code is not ErrorCode.ENTITY_NOT_FOUND:
                raise
            return Handle("sender", path, private=self.namespace.connect())

    def send(self, sender, messages, batch=False):
        try:
            return super().send(sender, messages, batch)
        except ServiceBusError as error:
            if error.code is not ErrorCode.ENTITY_NOT_FOUND:
                raise
            return [None for _ in messages]


class LongIdsTruncated(Mutant):
    """Cuts a MessageId, SessionId or PartitionKey over 128 characters to 128 instead of refusing it (SETTLE-SEND-008)."""

    name = "mutant-long-ids-truncated"

    def send(self, sender, messages, batch=False):
        def cut(value):
            return value[:128] if isinstance(value, str) else value

        return super().send(sender, [replace(m, message_id=cut(m.message_id), session_id=cut(m.session_id),
                                             partition_key=cut(m.partition_key)) for m in messages], batch)



# ------------------------------------------------------------ subtler settlement mutants
class LockedMessageExpires(Mutant):
    """A locked message expires under its lock: completing it past its expiry fails (SETTLE-TTL-004)."""

    name = "mutant-locked-message-expires"

    def complete(self, receiver, message):
        if message.expires_at is not None and self.now() >= message.expires_at:
            self.namespace.abandon(receiver.private, receiver.path, self._token(message))
            raise ServiceBusError(ErrorCode.MESSAGE_LOCK_LOST, "The lock supplied is invalid: the message expired.")
        super().complete(receiver, message)


class DeadLettersExpire(Mutant):
    """Applies time to live in the dead-letter subqueue: expired dead letters are dropped (SETTLE-DLQ-003)."""

    name = "mutant-dead-letters-expire"

    def receive(self, receiver, max_count=1, max_wait=None):
        got = super().receive(receiver, max_count, max_wait)
        if not receiver.path.endswith("/$DeadLetterQueue"):
            return got
        expired = [m for m in got if m.expires_at is not None and self.now() >= m.expires_at]
        for m in expired:
            if m.lock_token is not None:
                super().complete(receiver, m)
        return [m for m in got if m not in expired]


class PeekTakesADelivery(Mutant):
    """Peek locks and releases what it shows, counting a delivery (SETTLE-PEEK-001)."""

    name = "mutant-peek-takes-a-delivery"

    def peek(self, receiver, max_count=1, from_sequence_number=1):
        if receiver.session_id is None and receiver.path.count("/$") == 0 and self.describe_entity(receiver.path).get("requires_session") is False:
            taker = super().receiver(receiver.path)
            for m in super().receive(taker, max_count, 0):
                super().abandon(taker, m)
            super().close_handle(taker)
        return super().peek(receiver, max_count, from_sequence_number)


class RedeliveryGetsNewId(Mutant):
    """Gives a redelivered message a new message id (SETTLE-DUP-001)."""

    name = "mutant-redelivery-new-id"

    def receive(self, receiver, max_count=1, max_wait=None):
        return [m if (m.delivery_count or 1) <= 1 or m.message_id is None else replace(m, message_id=f"{m.message_id}#{m.delivery_count}")
                for m in super().receive(receiver, max_count, max_wait)]


class ClosedSessionStaysLocked(Mutant):
    """Closing a session receiver keeps its session locked until the lock expires (SETTLE-SESS-007)."""

    name = "mutant-closed-session-stays-locked"

    def close_handle(self, handle):
        if handle.session_id is None:
            super().close_handle(handle)


class ReceiveDisabledIgnored(EntityMutant):
    """Takes ReceiveDisabled for Active: a suspended entity still hands out messages (SETTLE-STATUS-002)."""

    name = "mutant-receive-disabled-ignored"

    def _broken(self, properties):
        if properties.get("status") == "ReceiveDisabled":
            properties["status"] = "Active"
        return properties


class OversizedBodyTruncated(Mutant):
    """Cuts a message body over 256 KB down instead of refusing the message (SETTLE-SEND-006)."""

    name = "mutant-oversized-body-truncated"

    def send(self, sender, messages, batch=False):
        return super().send(sender, [replace(m, body=m.body[: 200 * 1024]) if len(m.body) > 256 * 1024 else m for m in messages], batch)


class RejectionsWithoutDetails(Mutant):
    """Rejects sends with an error that carries neither a tracking id nor whether to retry (SETTLE-SEND-002)."""

    name = "mutant-rejections-without-details"

    def send(self, sender, messages, batch=False):
        try:
            return super().send(sender, messages, batch)
        except ServiceBusError as error:
            bare = ServiceBusError(error.code, str(error.args[0]) if error.args else "")
            bare.tracking_id = None
            bare.transient = None
            raise bare from None


# ----------------------------------------------------------------------- partitioning
class SessionKeyMismatchAccepted(Mutant):
    """Accepts a message whose PartitionKey differs from its SessionId, keying it by the session (PART-KEY-003)."""

    name = "mutant-session-key-mismatch-accepted"

    def send(self, sender, messages, batch=False):
        return super().send(sender, [replace(m, partition_key=m.session_id) if m.session_id and m.partition_key else m for m in messages], batch)


class UnkeyedToOnePartition(Mutant):
    """Stores every unkeyed message in one partition instead of spreading them round-robin (PART-NOKEY-001)."""

    name = "mutant-unkeyed-to-one-partition"

    def send(self, sender, messages, batch=False):
        if not self.describe_entity(sender.path).get("enable_partitioning"):
            return super().send(sender, messages, batch)
        return super().send(sender, [m if m.session_id or m.partition_key else replace(m, partition_key="one") for m in messages], batch)


class KeyedSendRedirected(Mutant):
    """Sends a keyed message whose partition is down to another partition (PART-KEY-008)."""

    name = "mutant-keyed-send-redirected"

    def send(self, sender, messages, batch=False):
        try:
            return super().send(sender, messages, batch)
        except ServiceBusError:
            if not any(m.partition_key for m in messages):
                raise
            return super().send(sender, [replace(m, partition_key=None) for m in messages], batch)


class DuplicateByIdOnly(Mutant):
    """Judges duplicates on MessageId alone on a partitioned entity, dropping a repeated id with another PartitionKey (PART-DUP-001)."""

    name = "mutant-duplicate-by-id-only"

    def __init__(self) -> None:
        super().__init__()
        self.seen: set = set()

    def send(self, sender, messages, batch=False):
        d = self.describe_entity(sender.path)
        if not (d.get("enable_partitioning") and d.get("requires_duplicate_detection")):
            return super().send(sender, messages, batch)
        out = []
        for m in messages:
            key = (sender.path, m.message_id)
            out.extend([None] if key in self.seen else super().send(sender, [m], batch))
            self.seen.add(key)
        return out


class PartitioningChangeIgnored(Mutant):
    """Answers an update that changes partitioning with success, leaving partitioning as it was (PART-CREATE-002)."""

    name = "mutant-partitioning-change-ignored"

    def update_entity(self, path, **properties):
        properties.pop("enable_partitioning", None)
        super().update_entity(path, **properties)


# ------------------------------------------------------------------------- rules
class FilterMutant(Mutant):
    """Adds rules with their filters rebuilt by ``_filter`` (and their actions as given)."""

    def _filter(self, f):
        return f

    def add_rule(self, subscription_path, rule):
        from sbreference import Rule

        super().add_rule(subscription_path, Rule(rule.name, self._filter(rule.filter), rule.action))


def _sql_mutant(filter_, evaluator):
    """``filter_`` (a SqlFilter) evaluated by ``evaluator`` (an Evaluator subclass)."""
    from sbreference import SqlFilter

    class Broken(SqlFilter):
        def matches(self, props):
            return evaluator(props).matches(self.parsed)

    if not isinstance(filter_, SqlFilter):
        return filter_
    checked = filter_.checked()
    return Broken(checked.expression, checked.parameters)


USUAL = object()  # a NodeMutant's answer: evaluate this node as the reference does


class NodeMutant(FilterMutant):
    """Evaluates the SQL filter nodes of kind ``kind`` with ``_node`` (USUAL: as the reference does)."""

    kind: str

    def _node(self, evaluator, node):
        raise NotImplementedError

    def _filter(self, f):
        kind, broken = self.kind, self._node

        class E(Evaluator):
            def eval(self, node):
                if node[0] == kind:
                    out = broken(self, node)
                    if out is not USUAL:
                        return out
                return super().eval(node)

        return _sql_mutant(f, E)


class SqlIsNullOnlyWhenMissing(NodeMutant):
    """IS NULL is true only for a missing property, not for one whose value is null (RULES-SQL-005)."""

    name = "mutant-sql-is-null-only-missing"
    kind = "isnull"

    def _node(self, evaluator, node):
        isnull = evaluator.eval(node[1]) is UNKNOWN
        return (not isnull) if node[2] else isnull


class SqlLikeMatchesPrefix(NodeMutant):
    """LIKE matches the start of a string, not the whole string (RULES-SQL-008)."""

    name = "mutant-sql-like-matches-prefix"
    kind = "like"

    def _node(self, evaluator, node):
        value, pattern = evaluator.eval(node[1]), evaluator.eval(node[2])
        escape = evaluator.eval(node[3]) if node[3] is not None else None
        result = like(value, pattern + "%" if isinstance(pattern, str) else pattern, escape)
        return not3(result) if node[4] else result


class SqlNotInUnknownTrue(NodeMutant):
    """NOT IN with a missing left operand is TRUE instead of UNKNOWN (RULES-SQL-007)."""

    name = "mutant-sql-not-in-unknown-true"
    kind = "in"

    def _node(self, evaluator, node):
        return True if node[3] and evaluator.eval(node[1]) is UNKNOWN else USUAL


class SqlNamesCaseSensitive(NodeMutant):
    """Looks user properties up by their exact name in SQL filters (RULES-SQL-012)."""

    name = "mutant-sql-names-case-sensitive"
    kind = "prop"

    def _node(self, evaluator, node):
        return evaluator.props.user.get(node[2], UNKNOWN) if node[1] != "sys" else USUAL


class CorrelationIgnoresCase(FilterMutant):
    """Compares correlation filter strings without regard to case (RULES-CORR-003)."""

    name = "mutant-correlation-ignores-case"

    def _filter(self, f):
        from dataclasses import fields

        from sbreference import CorrelationFilter

        class Broken(CorrelationFilter):
            def matches(self, props):
                low = type(props)({k: v.lower() if isinstance(v, str) else v for k, v in props.system.items()},
                                  {k: v.lower() if isinstance(v, str) else v for k, v in props.user.items()})
                return super().matches(low)

        if not isinstance(f, CorrelationFilter):
            return f
        values = {x.name: getattr(f, x.name) for x in fields(f)}
        values = {k: v.lower() if isinstance(v, str) else v for k, v in values.items()}
        values["properties"] = {k: v.lower() if isinstance(v, str) else v for k, v in f.properties.items()}
        return Broken(**values)


class CorrelationAnyProperty(FilterMutant):
    """Selects a message when any one property a correlation filter names matches (OR, not AND) (RULES-CORR-002)."""

    name = "mutant-correlation-any-property"

    def _filter(self, f):
        from dataclasses import fields

        from sbreference import CorrelationFilter

        class Broken(CorrelationFilter):
            def matches(self, props):
                named = [x.name for x in fields(self) if x.name != "properties" and getattr(self, x.name) is not None]
                parts = [CorrelationFilter(**{n: getattr(self, n)}) for n in named]
                parts += [CorrelationFilter(properties={k: v}) for k, v in self.properties.items()]
                return any(p.matches(props) for p in parts)

        if not isinstance(f, CorrelationFilter):
            return f
        return Broken(**{x.name: getattr(f, x.name) for x in fields(f)})


class NoDefaultRule(Mutant):
    """Creates subscriptions without the $Default rule: a new subscription receives nothing (RULES-RULE-001)."""

    name = "mutant-no-default-rule"

    def create_subscription(self, topic_path, name, **properties):
        path = super().create_subscription(topic_path, name, **properties)
        if any(r.name == "$Default" for r in super().list_rules(path)):
            super().remove_rule(path, "$Default")
        return path


# ------------------------------------------------------------------- transactions
def _transactional(base_client, overrides: dict):
    """A transactional client of the reference with ``overrides`` (method name -> function)."""
    broken = type("Broken" + type(base_client).__name__, (type(base_client),), overrides)
    client = broken.__new__(broken)
    client.__dict__.update(vars(base_client))
    return client


class RollbackCommits(Mutant):
    """Commits a transaction discharged with fail=true (TXN-ROLLBACK-001)."""

    name = "mutant-rollback-commits"

    def transaction_client(self):
        base = type(super().transaction_client())
        return _transactional(super().transaction_client(), {"discharge": lambda c, txn, commit: base.discharge(c, txn, True)})


class TransactionalSendsAtOnce(Mutant):
    """Enqueues messages sent in a transaction at once, not at the commit (TXN-VIS-001)."""

    name = "mutant-transactional-sends-at-once"

    def transaction_client(self):
        base = type(super().transaction_client())

        def send(c, txn, path, messages, via=None):
            if via is not None:
                return base.send(c, txn, path, messages, via)
            c.namespace.send(c.conn, path, list(messages))

        return _transactional(super().transaction_client(), {"send": send})


class TransactionalSettlesAtOnce(Mutant):
    """Applies a settlement made in a transaction at once, not with its outcome (TXN-VIS-002)."""

    name = "mutant-transactional-settles-at-once"

    def transaction_client(self):
        from sbreference.operations import settle as settle_now

        def settle(c, txn, path, message, outcome, reason=None, description=None):
            settle_now(c.namespace, outcome, c.conn, path, message.lock_token, reason=reason, description=description)

        return _transactional(super().transaction_client(), {"settle": settle})


class QuietDischarge(Mutant):
    """Answers a discharge that fails with ``code`` with success."""

    code: ErrorCode

    def transaction_client(self):
        base, code = type(super().transaction_client()), self.code

        def discharge(c, txn, commit):
            _quiet(lambda: base.discharge(c, txn, commit), code)

        return _transactional(super().transaction_client(), {"discharge": discharge})


class UnknownTransactionIgnored(QuietDischarge):
    """Answers a discharge of a transaction it does not know with success (TXN-ERR-001)."""

    name = "mutant-unknown-transaction-ignored"
    code = ErrorCode.TRANSACTION_UNKNOWN



class DeferActsAsAbandon(Mutant):
    """Defer releases the message back to normal receives (SETTLE-DEFR-001)."""

    name = "mutant-defer-acts-as-abandon"

    def defer(self, receiver, message, properties=None):
        super().abandon(receiver, message, properties)


class AbandonNotCounted(Mutant):
    """Abandon releases the message without counting a delivery (SETTLE-ABAN-001)."""

    name = "mutant-abandon-not-counted"

    def __init__(self) -> None:
        super().__init__()
        self.abandons: dict = {}

    def abandon(self, receiver, message, properties=None):
        super().abandon(receiver, message, properties)
        key = (receiver.path, message.sequence_number)
        self.abandons[key] = self.abandons.get(key, 0) + 1

    def receive(self, receiver, max_count=1, max_wait=None):
        return [replace(m, delivery_count=m.delivery_count - self.abandons.get((receiver.path, m.sequence_number), 0))
                if m.delivery_count else m for m in super().receive(receiver, max_count, max_wait)]


class SessionBatchReversed(Mutant):
    """Hands a session's messages over newest first within a receive (SETTLE-SESS-003, PART-SESS-001)."""

    name = "mutant-session-batch-reversed"

    def receive(self, receiver, max_count=1, max_wait=None):
        got = super().receive(receiver, max_count, max_wait)
        return list(reversed(got)) if receiver.session_id is not None else got


class ReenableLosesMessages(Mutant):
    """Re-activating a suspended entity empties it (SETTLE-STATUS-003)."""

    name = "mutant-reenable-loses-messages"

    def update_entity(self, path, **properties):
        suspended = properties.get("status") == "Active" and self.describe_entity(path).get("status") != "Active"
        super().update_entity(path, **properties)
        if suspended:
            drain = super().receiver(path, "receive-and-delete")
            while super().receive(drain, 100, 0):
                pass
            super().close_handle(drain)


class ForwardToMissingAccepted(Mutant):
    """Creates an entity forwarding to a missing one without forwarding, instead of refusing it (SETTLE-FWD-001)."""

    name = "mutant-forward-to-missing-accepted"

    def create_queue(self, name, **properties):
        try:
            return super().create_queue(name, **properties)
        except ServiceBusError as error:
            if error.code is not ErrorCode.ENTITY_NOT_FOUND or "forward_to" not in properties:
                raise
            properties.pop("forward_to")
            return super().create_queue(name, **properties)


class ForwardingReceiverGetsNothing(Mutant):
    """Lets receivers attach to an auto-forwarding entity, receiving nothing, instead of refusing them (SETTLE-FWD-003)."""

    name = "mutant-forwarding-receiver-gets-nothing"

    def receiver(self, path, mode="peek-lock"):
        try:
            return super().receiver(path, mode)
        except ServiceBusError:
            return Handle("receiver", path, mode=mode, private=self.namespace.connect())

    def receive(self, receiver, max_count=1, max_wait=None):
        try:
            return super().receive(receiver, max_count, max_wait)
        except ServiceBusError as error:
            if error.code is not ErrorCode.INVALID_OPERATION:
                raise
            return []


class ShortAutoDeleteClamped(EntityMutant):
    """Accepts an auto-delete-on-idle under five minutes and quietly uses five (SETTLE-ENT-002)."""

    name = "mutant-short-auto-delete-clamped"

    def _broken(self, properties):
        if properties.get("auto_delete_on_idle", 5 * 60_000) < 5 * 60_000:
            properties["auto_delete_on_idle"] = 5 * 60_000
        return properties


class ForeignPropertiesDropped(EntityMutant):
    """Quietly drops the properties a topic does not have (lock duration, sessions...) instead of refusing them (SETTLE-ENT-003)."""

    name = "mutant-foreign-properties-dropped"
    kinds = ("topic",)

    dropped = ("lock_duration", "max_delivery_count", "requires_session", "dead_lettering_on_message_expiration",
               "forward_to", "forward_dead_lettered_messages_to")


class LargeMaxMessageSizeClamped(EntityMutant):
    """Accepts a max message size over 256 KB on Standard and quietly keeps 256 KB (SETTLE-TIER-001)."""

    name = "mutant-large-max-message-size-clamped"
    kinds = ("queue", "topic")

    def _broken(self, properties):
        if properties.get("max_message_size", 0) > 256 * 1024:
            properties.pop("max_message_size")
        return properties


class LargeMaxSizeClamped(EntityMutant):
    """Accepts a max size over 5 GB on Standard and quietly uses 5 GB (SETTLE-TIER-004)."""

    name = "mutant-large-max-size-clamped"
    kinds = ("queue", "topic")

    def _broken(self, properties):
        if properties.get("max_size_in_megabytes", 0) > 5 * 1024 and not properties.get("enable_partitioning"):
            properties["max_size_in_megabytes"] = 5 * 1024
        return properties


class LargePropertyTruncated(Mutant):
    """Cuts an application property over 32 KB down instead of refusing the message (SETTLE-SEND-009)."""

    name = "mutant-large-property-truncated"

    def send(self, sender, messages, batch=False):
        def cut(m):
            props = {k: v[:1024] if isinstance(v, str) and len(v) > 32 * 1024 else v for k, v in m.application_properties.items()}
            return replace(m, application_properties=props)

        return super().send(sender, [cut(m) for m in messages], batch)


class PartitionQuotaIgnored(Mutant):
    """Past the namespace's 100 partitioned entities, creates a non-partitioned one instead of refusing (PART-LIMIT-002)."""

    name = "mutant-partition-quota-ignored"

    def create_queue(self, name, **properties):
        try:
            return super().create_queue(name, **properties)
        except ServiceBusError as error:
            if error.code is not ErrorCode.QUOTA_EXCEEDED or not properties.get("enable_partitioning"):
                raise
            properties.pop("enable_partitioning")
            return super().create_queue(name, **properties)

    def create_topic(self, name, **properties):
        try:
            return super().create_topic(name, **properties)
        except ServiceBusError as error:
            if error.code is not ErrorCode.QUOTA_EXCEEDED or not properties.get("enable_partitioning"):
                raise
            properties.pop("enable_partitioning")
            return super().create_topic(name, **properties)


class UnkeyedTransactionAccepted(Mutant):
    """Gives unkeyed messages sent in a transaction to a partitioned entity a key, instead of refusing them (PART-TXN-001)."""

    name = "mutant-unkeyed-transaction-accepted"

    def send_transaction(self, sends):
        return super().send_transaction([(h, [m if m.session_id or m.partition_key else replace(m, partition_key="txn") for m in ms])
                                         for h, ms in sends])


class PeekNewestFirst(Mutant):
    """Peek returns the newest messages first (PART-PEEK-001, SETTLE-PEEK-002)."""

    name = "mutant-peek-newest-first"

    def peek(self, receiver, max_count=1, from_sequence_number=1):
        everything = []
        start = from_sequence_number
        while True:
            page = super().peek(receiver, 250, start)
            if not page:
                break
            everything.extend(page)
            start = max(m.sequence_number for m in page) + 1
        return sorted(everything, key=lambda m: -m.sequence_number)[:max_count]


class RuleNameReplaced(Mutant):
    """Adding a rule whose name is taken replaces the rule instead of failing (RULES-RULE-004)."""

    name = "mutant-rule-name-replaced"

    def add_rule(self, subscription_path, rule):
        if any(r.name == rule.name for r in super().list_rules(subscription_path)):
            super().remove_rule(subscription_path, rule.name)
        super().add_rule(subscription_path, rule)


class OneCopyPerMatchingRule(FilterMutant):
    """Stores a copy per matching rule even for rules without actions (RULES-RULE-002)."""

    name = "mutant-one-copy-per-matching-rule"

    def add_rule(self, subscription_path, rule):
        from sbreference import Rule, SqlRuleAction

        action = rule.action if rule.action is not None else SqlRuleAction("SET sbconform_mutant = 1")
        super(FilterMutant, self).add_rule(subscription_path, Rule(rule.name, rule.filter, action))


class FalseFilterSelectsAll(FilterMutant):
    """Treats the false filter as the true filter (RULES-BOOL-001)."""

    name = "mutant-false-filter-selects-all"

    def _filter(self, f):
        from sbreference import FalseFilter, TrueFilter

        return TrueFilter() if isinstance(f, FalseFilter) else f


class SqlExistsFalseForNull(NodeMutant):
    """EXISTS is false for a property whose value is null (RULES-SQL-006)."""

    name = "mutant-sql-exists-false-for-null"
    kind = "exists"

    def _node(self, evaluator, node):
        return evaluator.props.get(node[1][1], node[1][2]) not in (None, UNKNOWN)


class SqlTrueDivision(NodeMutant):
    """Divides longs as doubles: 7 / 2 is 3.5 (RULES-SQL-011)."""

    name = "mutant-sql-true-division"
    kind = "arith"

    def _node(self, evaluator, node):
        if node[1] != "/":
            return USUAL
        a, b = evaluator.eval(node[2]), evaluator.eval(node[3])
        return a / b if all(isinstance(v, int) and not isinstance(v, bool) for v in (a, b)) and b else USUAL


class RuleNameNotStamped(Mutant):
    """Delivers the copies made for rules with actions without their RuleName property (RULES-ACT-001)."""

    name = "mutant-rule-name-not-stamped"

    def receive(self, receiver, max_count=1, max_wait=None):
        return [replace(m, application_properties={k: v for k, v in m.application_properties.items() if k != "RuleName"})
                for m in super().receive(receiver, max_count, max_wait)]

    def peek(self, receiver, max_count=1, from_sequence_number=1):
        return [replace(m, application_properties={k: v for k, v in m.application_properties.items() if k != "RuleName"})
                for m in super().peek(receiver, max_count, from_sequence_number)]


class FilterErrorsDropped(EntityMutant):
    """Drops messages whose filter fails to evaluate instead of dead-lettering them (RULES-DLQ-001)."""

    name = "mutant-filter-errors-dropped"
    kinds = ("subscription",)

    def _broken(self, properties):
        properties["dead_lettering_on_filter_evaluation_exceptions"] = False
        return properties



# ------------------------------------------------------------------ a fourth batch
class LockOutlivesItsDuration(EntityMutant):
    """Reports locked-until from the entity's lock duration, but holds every lock a minute (SETTLE-LOCK-002)."""

    name = "mutant-lock-outlives-its-duration"
    dropped = ("lock_duration",)

    def receive(self, receiver, max_count=1, max_wait=None):
        got = super().receive(receiver, max_count, max_wait)
        if receiver.mode != "peek-lock" or receiver.session_id is not None:
            return got
        wanted = self._wanted.get(receiver.path.split("/$")[0])
        return [replace(m, locked_until=self.now() + wanted) if wanted and m.locked_until else m for m in got]

    @property
    def _wanted(self) -> dict:
        return self.__dict__.setdefault("_durations", {})

    def create_queue(self, name, **properties):
        path = super().create_queue(name, **properties)
        if "lock_duration" in properties:
            self._wanted[path] = properties["lock_duration"]
        return path


class ExpiredLockDeadLetters(Mutant):
    """Dead-letters a message whose lock has expired instead of refusing (SETTLE-LOCK-008)."""

    name = "mutant-expired-lock-dead-letters"

    def dead_letter(self, receiver, message, reason=None, description=None, properties=None):
        _quiet(lambda: super(ExpiredLockDeadLetters, self).dead_letter(receiver, message, reason, description, properties),
               ErrorCode.MESSAGE_LOCK_LOST)


class ExpiredLockRenews(Mutant):
    """Renews an expired lock instead of refusing: answers with a new locked-until (SETTLE-LOCK-008)."""

    name = "mutant-expired-lock-renews"

    def renew_lock(self, receiver, message):
        return _quiet(lambda: super(ExpiredLockRenews, self).renew_lock(receiver, message), ErrorCode.MESSAGE_LOCK_LOST,
                      answer=self.now() + 60_000)


class DeadLetterCompleteIgnored(Mutant):
    """Acknowledges completes on a dead-letter subqueue but keeps the message (SETTLE-DLQ-001)."""

    name = "mutant-dead-letter-complete-ignored"

    def complete(self, receiver, message):
        if receiver.path.endswith("/$DeadLetterQueue"):
            self._token(message)
            return
        super().complete(receiver, message)


class DeferredCompleteIgnored(Mutant):
    """Acknowledges the complete of a message received by sequence number but keeps it deferred (SETTLE-DEFR-003)."""

    name = "mutant-deferred-complete-ignored"

    def receive_deferred(self, receiver, sequence_numbers):
        got = super().receive_deferred(receiver, sequence_numbers)
        self.__dict__.setdefault("_deferred", set()).update(m.lock_token for m in got)
        return got

    def complete(self, receiver, message):
        if message.lock_token in self.__dict__.get("_deferred", ()):
            return
        super().complete(receiver, message)


class LongTimeToLiveNotCapped(EntityMutant):
    """Applies the entity's default time to live only to messages that set none: a longer one is not capped (SETTLE-TTL-001)."""

    name = "mutant-long-ttl-not-capped"
    kinds = ("queue",)

    dropped = ("default_message_time_to_live",)

    def create_queue(self, name, **properties):
        default = properties.get("default_message_time_to_live")
        path = super().create_queue(name, **properties)
        self.__dict__.setdefault("_ttl", {})[path] = default
        return path

    def send(self, sender, messages, batch=False):
        default = self.__dict__.get("_ttl", {}).get(sender.path)
        if default is not None:
            messages = [m if m.time_to_live is not None else replace(m, time_to_live=default) for m in messages]
        return super().send(sender, messages, batch)


class ScheduleReturnsOneNumber(Mutant):
    """Schedules a batch but answers with the first sequence number for every message (SETTLE-SCHED-001)."""

    name = "mutant-schedule-returns-one-number"

    def schedule(self, sender, messages, enqueue_time):
        numbers = super().schedule(sender, messages, enqueue_time)
        return [numbers[0]] * len(numbers) if numbers else numbers


class SessionStateClearedOnRelease(Mutant):
    """Clears a session's state when its receiver closes (SETTLE-SESS-005)."""

    name = "mutant-session-state-cleared-on-release"

    def close_handle(self, handle):
        if handle.session_id is not None:
            try:
                super().set_session_state(handle, None)
            except ServiceBusError:
                pass
        super().close_handle(handle)


class ExpiredSessionSettles(Mutant):
    """Completes messages of a session whose lock has expired, instead of refusing (SETTLE-SESS-006)."""

    name = "mutant-expired-session-settles"

    def complete(self, receiver, message):
        _quiet(lambda: super(ExpiredSessionSettles, self).complete(receiver, message), ErrorCode.SESSION_LOCK_LOST)


class BatchKeepsFirstMessage(Mutant):
    """Accepts a batch but stores only its first message (SETTLE-SEND-001)."""

    name = "mutant-batch-keeps-first"

    def send(self, sender, messages, batch=False):
        if not batch or len(messages) < 2:
            return super().send(sender, messages, batch)
        return super().send(sender, list(messages)[:1], batch) + [None] * (len(messages) - 1)


class MessageIdAsPartitionKey(Mutant):
    """Uses the MessageId as partition key on partitioned entities without duplicate detection (PART-KEY-005)."""

    name = "mutant-message-id-as-partition-key"

    def send(self, sender, messages, batch=False):
        d = self.describe_entity(sender.path)
        if not d.get("enable_partitioning") or d.get("requires_duplicate_detection"):
            return super().send(sender, messages, batch)
        return super().send(sender, [replace(m, partition_key=m.message_id) if not (m.session_id or m.partition_key) and m.message_id else m
                                     for m in messages], batch)


class OutageMutant(Mutant):
    """Remembers which partitions of which entities are down (``down(path)``)."""

    def make_partition_unavailable(self, path, partition):
        super().make_partition_unavailable(path, partition)
        self.__dict__.setdefault("_down", set()).add((path, partition))

    def make_partition_available(self, path, partition):
        super().make_partition_available(path, partition)
        self.__dict__.setdefault("_down", set()).discard((path, partition))

    def down(self, path) -> list[int]:
        return [p for q, p in self.__dict__.get("_down", ()) if q == path]


class PartitionOutageStopsEntity(OutageMutant):
    """Refuses every send to a partitioned entity while any of its partitions is down (PART-NOKEY-002, PART-AVAIL-001/002)."""

    name = "mutant-partition-outage-stops-entity"

    def send(self, sender, messages, batch=False):
        if self.down(sender.path):
            raise ServiceBusError(ErrorCode.ENTITY_UNAVAILABLE, f"a partition of {sender.path} is unavailable")
        return super().send(sender, messages, batch)


class UpdateDuringOutageApplied(OutageMutant):
    """Applies an update to a partitioned entity while one of its partitions is down, instead of failing (PART-MGMT-002)."""

    name = "mutant-update-during-outage-applied"

    def update_entity(self, path, **properties):
        down = self.down(path)
        for p in down:
            super().make_partition_available(path, p)
        try:
            super().update_entity(path, **properties)
        finally:
            for p in down:
                super().make_partition_unavailable(path, p)


class LastRuleRemovedSelectsAll(Mutant):
    """Removing a subscription's last rule puts $Default back: a subscription without rules gets every message (RULES-RULE-003)."""

    name = "mutant-last-rule-removed-selects-all"

    def remove_rule(self, subscription_path, name):
        from sbreference import Rule, TrueFilter

        super().remove_rule(subscription_path, name)
        if not super().list_rules(subscription_path):
            super().add_rule(subscription_path, Rule("$Default", TrueFilter(), None))


class SqlGreaterOrEqualStrict(NodeMutant):
    """Evaluates >= as > (RULES-SQL-001)."""

    name = "mutant-sql-greater-or-equal-strict"
    kind = "cmp"

    def _node(self, evaluator, node):
        return compare(">", evaluator.eval(node[2]), evaluator.eval(node[3])) if node[1] == ">=" else USUAL


class SqlMissingIsZero(NodeMutant):
    """Takes a missing property as 0 in arithmetic (RULES-SQL-004, RULES-SQL-009)."""

    name = "mutant-sql-missing-is-zero"
    kind = "arith"

    def _node(self, evaluator, node):
        a, b = (evaluator.eval(n) for n in node[2:4])
        return arithmetic(node[1], 0 if a is UNKNOWN else a, 0 if b is UNKNOWN else b)


class InvalidFilterAccepted(Mutant):
    """Accepts a rule whose SQL filter does not parse, as a filter selecting nothing (RULES-SQL-014)."""

    name = "mutant-invalid-filter-accepted"

    def add_rule(self, subscription_path, rule):
        from sbreference import FalseFilter, Rule

        try:
            super().add_rule(subscription_path, rule)
        except ServiceBusError as error:
            if error.code is not ErrorCode.ARGUMENT_ERROR or any(r.name == rule.name for r in super().list_rules(subscription_path)):
                raise
            super().add_rule(subscription_path, Rule(rule.name, FalseFilter(), None))


class ViaSendsAtOnce(Mutant):
    """Delivers a message sent via a transfer entity in a transaction to its destination at once (TXN-VIA-001)."""

    name = "mutant-via-sends-at-once"

    def transaction_client(self):
        base = type(super().transaction_client())

        def send(c, txn, path, messages, via=None):
            if via is None:
                return base.send(c, txn, path, messages, via)
            c.namespace.send(c.conn, path, list(messages))

        return _transactional(super().transaction_client(), {"send": send})



# ------------------------------------------------------------------ a fifth batch
class ExpiredLockLosesMessage(Mutant):
    """Drops a message whose lock expired instead of delivering it again (SETTLE-LOCK-005)."""

    name = "mutant-expired-lock-loses-message"

    def abandon(self, receiver, message, properties=None):
        super().abandon(receiver, message, properties)
        released = self.__dict__.setdefault("_released", {})
        released[(receiver.path, message.sequence_number)] = released.get((receiver.path, message.sequence_number), 0) + 1

    def receive(self, receiver, max_count=1, max_wait=None):
        released = self.__dict__.setdefault("_released", {})
        out = []
        for m in super().receive(receiver, max_count, max_wait):
            if m.lock_token is not None and m.delivery_count and m.delivery_count > 1 + released.get((receiver.path, m.sequence_number), 0):
                super().complete(receiver, m)
                continue
            out.append(m)
        return out


class ScheduledKeepsItsNumber(Mutant):
    """Delivers a scheduled message under the sequence number its scheduling returned (SETTLE-SCHED-002)."""

    name = "mutant-scheduled-keeps-its-number"

    def schedule(self, sender, messages, enqueue_time):
        numbers = super().schedule(sender, messages, enqueue_time)
        self.__dict__.setdefault("_scheduled", {}).update({(sender.path, m.message_id): n for m, n in zip(messages, numbers)})
        return numbers

    def receive(self, receiver, max_count=1, max_wait=None):
        scheduled = self.__dict__.get("_scheduled", {})
        return [replace(m, sequence_number=scheduled.get((receiver.path, m.message_id), m.sequence_number))
                for m in super().receive(receiver, max_count, max_wait)]


class NextSessionWithoutMessages(Mutant):
    """With no session available, accepting the next session hands over an empty one instead of timing out (SETTLE-SESS-004)."""

    name = "mutant-next-session-without-messages"

    def accept_session(self, path, session_id=None, mode="peek-lock", max_wait=None):
        try:
            return super().accept_session(path, session_id, mode, max_wait)
        except ServiceBusError as error:
            if error.code is not ErrorCode.TIMEOUT or session_id is not None:
                raise
            return super().accept_session(path, "sbconform-mutant-empty", mode, max_wait)


class CountsOnePartition(Mutant):
    """Reports the message counts of one partition of a partitioned entity, not their sum (PART-MGMT-003)."""

    name = "mutant-counts-one-partition"

    def entity_counts(self, path):
        counts = dict(super().entity_counts(path))
        if self.describe_entity(path.split("/$")[0]).get("enable_partitioning") and counts.get("active"):
            peeker = super().receiver(path)
            seen, start = [], 1
            while True:
                page = super().peek(peeker, 250, start)
                if not page:
                    break
                seen.extend(page)
                start = max(m.sequence_number for m in page) + 1
            super().close_handle(peeker)
            first = min((m.partition for m in seen if m.partition is not None), default=None)
            counts["active"] = sum(1 for m in seen if m.partition == first and m.state == "active")
        return counts


class AlwaysAvailable(Mutant):
    """Reports a partitioned entity as available while one of its partitions is down (PART-MGMT-004)."""

    name = "mutant-always-available"

    def entity_counts(self, path):
        counts = dict(super().entity_counts(path))
        if "availability_status" in counts:
            counts["availability_status"] = "available"
        return counts


class TransactionKeysUnified(Mutant):
    """Gives every message of a transaction the first message's partition key instead of refusing differing keys (PART-TXN-002)."""

    name = "mutant-transaction-keys-unified"

    def send_transaction(self, sends):
        first = next((m.partition_key for _, ms in sends for m in ms if m.partition_key and not m.session_id), None)
        if first is None:
            return super().send_transaction(sends)
        return super().send_transaction([(h, [replace(m, partition_key=first) if m.partition_key and not m.session_id else m for m in ms])
                                         for h, ms in sends])


class OneSessionPerTransaction(Mutant):
    """Refuses a transaction sending to several sessions of a non-partitioned entity (PART-TXN-004)."""

    name = "mutant-one-session-per-transaction"

    def send_transaction(self, sends):
        sessions = {m.session_id for _, ms in sends for m in ms if m.session_id}
        if len(sessions) > 1:
            raise ServiceBusError(ErrorCode.INVALID_OPERATION, "a transaction cannot send to several sessions")
        return super().send_transaction(sends)


class ForwardToUpdateIgnored(Mutant):
    """Answers an update setting ForwardTo with success but does not forward (PART-FWD-002)."""

    name = "mutant-forward-to-update-ignored"

    def update_entity(self, path, **properties):
        properties.pop("forward_to", None)
        super().update_entity(path, **properties)


class TimedOutCommitQuiet(QuietDischarge):
    """Answers the commit of a timed-out transaction with success (its work discarded) (TXN-TIMEOUT-001)."""

    name = "mutant-timed-out-commit-quiet"
    code = ErrorCode.TRANSACTION_TIMEOUT


class FailedCommitQuiet(QuietDischarge):
    """Answers a commit that had to roll back with success (TXN-ATOM-001)."""

    name = "mutant-failed-commit-quiet"
    code = ErrorCode.TRANSACTION_ROLLBACK


class CrossEntitySendOutside(Mutant):
    """Sends a transaction's message for another entity at once, outside the transaction, instead of refusing it (TXN-SCOPE-001)."""

    name = "mutant-cross-entity-send-outside"

    def transaction_client(self):
        base = type(super().transaction_client())

        def send(c, txn, path, messages, via=None):
            try:
                base.send(c, txn, path, messages, via)
            except ServiceBusError as error:
                if error.code is not ErrorCode.INVALID_OPERATION:
                    raise
                c.namespace.send(c.conn, path, list(messages))

        return _transactional(super().transaction_client(), {"send": send})



# ------------------------------------------------------------------ a sixth batch
class PartitioningIgnored(EntityMutant):
    """Creates every queue and topic unpartitioned, whatever was asked (PART-CREATE-001)."""

    name = "mutant-partitioning-ignored"
    kinds = ("queue", "topic")
    dropped = ("enable_partitioning",)


class SequenceNumbersNotMonotonic(Mutant):
    """Reports sequence numbers that do not increase with the order of acceptance (SETTLE-SEQ-001, PART-SEQ-001)."""

    name = "mutant-sequence-numbers-not-monotonic"

    @staticmethod
    def _renumbered(got):
        return [replace(m, sequence_number=m.sequence_number + 2 if m.sequence_number % 2 else m.sequence_number) for m in got]

    def receive(self, receiver, max_count=1, max_wait=None):
        return self._renumbered(super().receive(receiver, max_count, max_wait))

    def peek(self, receiver, max_count=1, from_sequence_number=1):
        return self._renumbered(super().peek(receiver, max_count, from_sequence_number))


class BasicIsStandard(Mutant):
    """Makes a Basic namespace that behaves as Standard: topics, sessions, transactions... (SETTLE-TIER-003, TXN-TIER-001)."""

    name = "mutant-basic-is-standard"

    def basic_namespace(self):
        from sbreference import Namespace

        target = ReferenceTarget(Namespace())
        target.capabilities = self.capabilities
        return target


class PremiumPartitionCountIgnored(Mutant):
    """Makes a partitioned Premium namespace with another partition count than asked for (PART-STRUCT-003)."""

    name = "mutant-premium-partition-count-ignored"

    def premium_namespace(self, partition_count):
        return super().premium_namespace(2 if partition_count != 2 else 4)


class TransactionSessionsSplit(Mutant):
    """Sends a partitioned transaction reaching several sessions outside the transaction, instead of refusing it (PART-TXN-003)."""

    name = "mutant-transaction-sessions-split"

    def send_transaction(self, sends):
        def apart():
            return [self.send(h, ms) for h, ms in sends]

        try:
            return super().send_transaction(sends)
        except ServiceBusError as error:
            if error.code is not ErrorCode.INVALID_OPERATION or len({m.session_id for _, ms in sends for m in ms}) < 2:
                raise
            return apart()


class SqlPropertyFunctionUnknown(NodeMutant):
    """property(name) is always UNKNOWN (RULES-SQL-015)."""

    name = "mutant-sql-property-function-unknown"
    kind = "propfn"

    def _node(self, evaluator, node):
        return UNKNOWN


class SqlSystemPropertiesNull(NodeMutant):
    """sys. properties read as null (RULES-SQL-002)."""

    name = "mutant-sql-system-properties-null"
    kind = "prop"

    def _node(self, evaluator, node):
        return None if node[1] == "sys" else USUAL


class SqlDoubledQuoteKept(NodeMutant):
    """A doubled quote in a string constant stays doubled (RULES-SQL-010)."""

    name = "mutant-sql-doubled-quote-kept"
    kind = "const"

    def _node(self, evaluator, node):
        return node[1].replace("'", "''") if isinstance(node[1], str) and "'" in node[1] else USUAL


class SqlDelimitedNamesUnknown(NodeMutant):
    """A property written delimited ([with space]) is never found (RULES-SQL-013)."""

    name = "mutant-sql-delimited-names-unknown"
    kind = "prop"

    def _node(self, evaluator, node):
        return UNKNOWN if node[1] != "sys" and not node[2].isidentifier() else USUAL


class TransactionQuotaIgnored(Mutant):
    """Sends a transaction's 101st message outside the transaction instead of refusing it (TXN-QUOTA-001)."""

    name = "mutant-transaction-quota-ignored"

    def transaction_client(self):
        base = type(super().transaction_client())

        def send(c, txn, path, messages, via=None):
            _quiet(lambda: base.send(c, txn, path, messages, via), ErrorCode.QUOTA_EXCEEDED)

        return _transactional(super().transaction_client(), {"send": send})



# ------------------------------------------------------------------ a seventh batch
class PipelinedSendsLost(Mutant):
    """Of sends in flight together, stores only the first (SETTLE-SEND-003)."""

    name = "mutant-pipelined-sends-lost"

    def send_concurrently(self, sender, messages):
        return super().send(sender, list(messages)[:1]) + [None] * (len(messages) - 1)


class DuplicatesSpreadOverPartitions(Mutant):
    """On a partitioned entity with duplicate detection, spreads copies of one unkeyed MessageId over partitions (PART-KEY-004)."""

    name = "mutant-duplicates-spread-over-partitions"

    def send(self, sender, messages, batch=False):
        d = self.describe_entity(sender.path)
        if not (d.get("enable_partitioning") and d.get("requires_duplicate_detection")):
            return super().send(sender, messages, batch)
        count = self.__dict__.setdefault("_count", [0])
        count[0] += 1
        return super().send(sender, [replace(m, partition_key=f"{m.message_id}-{count[0]}") if m.message_id and not (m.session_id or m.partition_key) else m
                                     for m in messages], batch)


class ActionSystemPropertiesIgnored(Mutant):
    """Applies a rule action's SET on user properties but not on sys. ones (RULES-ACT-003)."""

    name = "mutant-action-system-properties-ignored"

    def add_rule(self, subscription_path, rule):
        from sbreference import Rule, SqlRuleAction

        class Broken(SqlRuleAction):
            def apply(self, message, props):
                out = super().apply(message, props)
                return replace(out, subject=message.subject, to=message.to, correlation_id=message.correlation_id,
                               content_type=message.content_type, reply_to=message.reply_to)

        action = rule.action
        if isinstance(action, SqlRuleAction):
            checked = action.checked()
            action = Broken(checked.expression, checked.parameters)
        super().add_rule(subscription_path, Rule(rule.name, rule.filter, action))


class CorrelationUserPropertiesIgnored(FilterMutant):
    """Matches a correlation filter on its system properties only, ignoring the application properties it names (RULES-CORR-001)."""

    name = "mutant-correlation-user-properties-ignored"

    def _filter(self, f):
        from dataclasses import fields

        from sbreference import CorrelationFilter, TrueFilter

        if not isinstance(f, CorrelationFilter) or not f.properties:
            return f
        system = {x.name: getattr(f, x.name) for x in fields(f) if x.name != "properties" and getattr(f, x.name) is not None}
        return CorrelationFilter(**system) if system else TrueFilter()



# ------------------------------------------------------------------ an eighth batch
class LockNotExclusive(Mutant):
    """Hands a locked message to a competing receiver that finds nothing else (SETTLE-LOCK-001, SETTLE-LOCK-003)."""

    name = "mutant-lock-not-exclusive"

    def receive(self, receiver, max_count=1, max_wait=None):
        got = super().receive(receiver, max_count, max_wait)
        handed = self.__dict__.setdefault("_handed", {})
        handed.update({(receiver.path, m.sequence_number): m for m in got if m.lock_token is not None})
        if got or receiver.mode != "peek-lock" or receiver.session_id is not None:
            return got
        return [handed[(receiver.path, m.sequence_number)] for m in super().peek(receiver, max_count, 1)
                if (receiver.path, m.sequence_number) in handed]


class OneSubscriptionGetsTheMessage(Mutant):
    """Delivers a topic's message to its first subscription only: the others select nothing (SETTLE-TOPIC-001)."""

    name = "mutant-one-subscription-gets-the-message"

    def create_subscription(self, topic_path, name, **properties):
        from sbreference import FalseFilter, Rule

        first = topic_path not in self.__dict__.setdefault("_topics", set())
        self.__dict__["_topics"].add(topic_path)
        path = super().create_subscription(topic_path, name, **properties)
        if not first:
            super().remove_rule(path, "$Default")
            super().add_rule(path, Rule("$Default", FalseFilter(), None))
        return path



class RuleChangeEmptiesSubscription(Mutant):
    """Empties a subscription when its rules change, as if filters applied to stored messages (RULES-RULE-005)."""

    name = "mutant-rule-change-empties-subscription"

    def _empty(self, path):
        drain = super().receiver(path, "receive-and-delete")
        while super().receive(drain, 100, 0):
            pass
        super().close_handle(drain)

    def add_rule(self, subscription_path, rule):
        super().add_rule(subscription_path, rule)
        self._empty(subscription_path)

    def remove_rule(self, subscription_path, name):
        super().remove_rule(subscription_path, name)
        self._empty(subscription_path)


class ExpiredDeferredDropped(Mutant):
    """Drops a deferred message found expired when asked for, instead of dead-lettering it (SETTLE-DEFR-005)."""

    name = "mutant-expired-deferred-dropped"

    def receive_deferred(self, receiver, sequence_numbers):
        try:
            return super().receive_deferred(receiver, sequence_numbers)
        except ServiceBusError as error:
            if error.code is ErrorCode.MESSAGE_NOT_FOUND:
                dlq = super().receiver(receiver.path + "/$DeadLetterQueue")
                for m in super().receive(dlq, 100, 0):
                    (super().complete if m.sequence_number in sequence_numbers else super().abandon)(dlq, m)
                super().close_handle(dlq)
            raise


MUTANTS = [DeliveryCountAlwaysOne, CompleteIgnored, OnlyHolderSettles, ExpiredLockSettles, DeferLosesMessage, AbandonWaitsForExpiry, IgnoresPartitionKey,
           LockDurationIgnored, ReceivesNewestFirst]

#: Mutants of paired-namespace behaviour: the settlement differential machine does not
#: exercise them (tests/test_paired_stateful.py does).
PAIRED_MUTANTS = [PingsDelivered]



class RuleActionsIgnored(Mutant):
    """Accepts rules with actions but never applies them nor copies for them (RULES-ACT-001)."""

    name = "mutant-rule-actions-ignored"

    def add_rule(self, subscription_path, rule):
        from sbreference import Rule

        super().add_rule(subscription_path, Rule(rule.name, rule.filter, None))


class TwoValuedSqlLogic(Mutant):
    """Evaluates SQL filters with two-valued logic: UNKNOWN counts as FALSE at once, so
    NOT (missing = 1) selects the message (RULES-SQL-003/004)."""

    name = "mutant-two-valued-sql"

    def add_rule(self, subscription_path, rule):
        from sbreference import Rule, SqlFilter
        from sbreference.sqlfilter import UNKNOWN, Evaluator

        class TwoValued(Evaluator):
            def eval(self, node):
                out = super().eval(node)
                return False if out is UNKNOWN and node[0] in ("cmp", "like", "in") else out

        class TwoValuedFilter(SqlFilter):
            def matches(self, props):
                return TwoValued(props).matches(self.parsed)

        f = rule.filter
        if isinstance(f, SqlFilter):
            f = TwoValuedFilter(f.expression, f.parameters)
        super().add_rule(subscription_path, Rule(rule.name, f, rule.action))


#: Mutants of subscription rules (tests/test_rules_config.py runs the rules features against them).
RULES_MUTANTS = [RuleActionsIgnored, TwoValuedSqlLogic]

#: caught by scenarios only (the differential machine settles without properties to modify)
SCENARIO_MUTANTS = [IgnoresPropertiesToModify]

#: the mutants of the mutation analysis of the MUST clauses, caught by their scenarios only: the
#: differential machine does not exercise most of what they break (sessions, time to live, rules...)
#: and, where it does, takes seconds to find it (two cheap ones are in MUTANTS)
NEW_MUTANTS = [
    LockDurationClamped, MaxDeliveryCountIgnored, DuplicatesNotDetected, DuplicateWindowForever,
    DuplicatesAlwaysDetected, DefaultTimeToLiveIgnored, ExpiryNotDeadLettered, ForwardDeadLetteredIgnored,
    SendDisabledIgnored, QuotaIgnored, RenewLockPretends, DropKeepsLocks, SecondCompleteAccepted, ReceiveAndDeleteLocks,
    LocklessSettleAccepted, DeadLetterDropsReason, DeadLetterTwiceDeletes, DeferredLookupQuiet,
    PeekIgnoresStart, PeekShowsOnlyActive, MessageTimeToLiveIgnored, ScheduleSendsNow, CancelIgnored,
    SessionStateNotKept, RenewSessionLockPretends, SessionLockShared, OversizedSessionStateIgnored, SessionlessAccepted,
    SendToMissingDropped, LongIdsTruncated,
    LockedMessageExpires, DeadLettersExpire, PeekTakesADelivery, RedeliveryGetsNewId, ClosedSessionStaysLocked,
    ReceiveDisabledIgnored, OversizedBodyTruncated, RejectionsWithoutDetails, SessionKeyMismatchAccepted,
    UnkeyedToOnePartition, KeyedSendRedirected, DuplicateByIdOnly, PartitioningChangeIgnored, SqlIsNullOnlyWhenMissing,
    SqlLikeMatchesPrefix, SqlNotInUnknownTrue, SqlNamesCaseSensitive, CorrelationIgnoresCase, CorrelationAnyProperty,
    NoDefaultRule, RollbackCommits, TransactionalSendsAtOnce, TransactionalSettlesAtOnce, UnknownTransactionIgnored,
    DeferActsAsAbandon, AbandonNotCounted, SessionBatchReversed, ReenableLosesMessages, ForwardToMissingAccepted,
    ForwardingReceiverGetsNothing, ShortAutoDeleteClamped, ForeignPropertiesDropped, LargeMaxMessageSizeClamped,
    LargeMaxSizeClamped, LargePropertyTruncated, PartitionQuotaIgnored, UnkeyedTransactionAccepted, PeekNewestFirst,
    RuleNameReplaced, OneCopyPerMatchingRule, FalseFilterSelectsAll, SqlExistsFalseForNull, SqlTrueDivision,
    RuleNameNotStamped, FilterErrorsDropped,
    LockOutlivesItsDuration, ExpiredLockDeadLetters, ExpiredLockRenews, DeadLetterCompleteIgnored, DeferredCompleteIgnored,
    LongTimeToLiveNotCapped, ScheduleReturnsOneNumber, SessionStateClearedOnRelease, ExpiredSessionSettles,
    BatchKeepsFirstMessage, MessageIdAsPartitionKey, PartitionOutageStopsEntity, UpdateDuringOutageApplied,
    LastRuleRemovedSelectsAll, SqlGreaterOrEqualStrict, SqlMissingIsZero, InvalidFilterAccepted,
    ViaSendsAtOnce,
    ExpiredLockLosesMessage, ScheduledKeepsItsNumber, NextSessionWithoutMessages, CountsOnePartition, AlwaysAvailable,
    TransactionKeysUnified, OneSessionPerTransaction, ForwardToUpdateIgnored, TimedOutCommitQuiet, FailedCommitQuiet,
    CrossEntitySendOutside,
    PartitioningIgnored, SequenceNumbersNotMonotonic, BasicIsStandard, PremiumPartitionCountIgnored,
    TransactionSessionsSplit, SqlPropertyFunctionUnknown, SqlSystemPropertiesNull, SqlDoubledQuoteKept,
    SqlDelimitedNamesUnknown, TransactionQuotaIgnored,
    PipelinedSendsLost, DuplicatesSpreadOverPartitions, ActionSystemPropertiesIgnored,
    CorrelationUserPropertiesIgnored, LockNotExclusive, OneSubscriptionGetsTheMessage, RuleChangeEmptiesSubscription,
    ExpiredDeferredDropped,
]

for _mutant in MUTANTS + PAIRED_MUTANTS + RULES_MUTANTS + SCENARIO_MUTANTS + NEW_MUTANTS:
    register(_mutant.name, lambda _cls=_mutant, **options: _cls())


# ------------------------------------------------------------ the scenario matrix
# ``pytest -p mutants tests/test_features.py`` with SBCONFORM_MUTANT_MATRIX set runs, in one
# process, each scenario named in the matrix once per mutant that names it (the pytest
# start-up and the collection of every feature cost seconds: once for all mutants, not once
# each). Each test's outcome is written as a JSON line to SBCONFORM_MUTANT_RESULTS.
MATRIX = "SBCONFORM_MUTANT_MATRIX"  # JSON: {mutant name: a part of a scenario's test name, or a list of them}
RESULTS = "SBCONFORM_MUTANT_RESULTS"  # a file path


def scenario_parts(parts: str | list[str] | tuple[str, ...]) -> list[str]:
    return [parts] if isinstance(parts, str) else list(parts)


def pytest_generate_tests(metafunc) -> None:
    matrix = json.loads(os.environ.get(MATRIX, "{}"))
    mutants = sorted(m for m, parts in matrix.items() if any(p in metafunc.definition.name for p in scenario_parts(parts)))
    if mutants:
        metafunc.fixturenames.append("sb_mutant")
        metafunc.parametrize("sb_mutant", mutants)


def pytest_runtest_setup(item) -> None:
    from sbconform.pytest_plugin import target_session

    callspec = getattr(item, "callspec", None)
    if callspec is not None and "sb_mutant" in callspec.params:
        target_session(item.config).name = callspec.params["sb_mutant"]
        item.user_properties.append(("sb_mutant", callspec.params["sb_mutant"]))


def pytest_runtest_logreport(report) -> None:
    mutant = dict(report.user_properties).get("sb_mutant") if os.environ.get(RESULTS) else None
    if mutant is not None:
        with open(os.environ[RESULTS], "a", encoding="utf-8") as out:
            out.write(json.dumps({"mutant": mutant, "test": report.nodeid, "when": report.when, "outcome": report.outcome}) + "\n")
