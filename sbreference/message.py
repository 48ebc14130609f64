"""Messages: what a sender hands over, and what the broker keeps about it.

``Message`` holds the properties a sender may set. ``StoredMessage`` is the broker's
record of one accepted copy of it in one store, with the system properties Service Bus
assigns (sequence number, enqueued time, expiry, delivery count, lock). ``Delivery`` is
the immutable snapshot a receiver gets when the broker hands a message over.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Mapping

#: Application properties carrying dead-letter information (as the SDKs read them).
DEAD_LETTER_REASON = "DeadLetterReason"
DEAD_LETTER_ERROR_DESCRIPTION = "DeadLetterErrorDescription"

#: Dead-letter reasons the broker itself uses.
MAX_DELIVERY_COUNT_EXCEEDED = "MaxDeliveryCountExceeded"
TTL_EXPIRED = "TTLExpiredException"

#: Fixed per-message overhead of the model's size metric (header, annotations, framing).
MESSAGE_OVERHEAD = 64


@dataclass(frozen=True, slots=True)
class Message:
    """A message as a sender builds it. Times are model milliseconds."""

    body: bytes = b""
    message_id: str | None = None
    session_id: str | None = None
    partition_key: str | None = None
    time_to_live: int | None = None
    scheduled_enqueue_time: int | None = None
    content_type: str | None = None
    correlation_id: str | None = None
    subject: str | None = None
    to: str | None = None
    reply_to: str | None = None
    reply_to_session_id: str | None = None
    application_properties: Mapping[str, Any] = field(default_factory=dict)
    _size: int = field(default=-1, init=False, repr=False, compare=False)
    #: DeadLetterSource (the x-opt-deadletter-source annotation): set by the broker, never by a
    #: sender, on a message it auto-forwards from a dead-letter subqueue (SETTLE-FWD-002;
    #: ``with_dead_letter_source``). Kept by ``with_changes``.
    dead_letter_source: str | None = field(default=None, init=False, repr=False, compare=False)
    #: The message's size as the transport measured it (every section as sent: annotations,
    #: footer, the encoding of each property), when a transport gave it (``measured_as_sent``):
    #: ``message_size`` counts at least this. ``with_changes`` keeps it, grown or shrunk by what
    #: the change does to the model's own measure.
    wire_size: int | None = field(default=None, init=False, repr=False, compare=False)

    def with_changes(self, **changes: Any) -> "Message":
        changed = replace(self, **changes)
        if self.dead_letter_source is not None:
            _set_dead_letter_source(changed, self.dead_letter_source)
        if self.wire_size is not None:
            _set_wire_size(changed, max(0, self.wire_size + _model_size(changed) - _model_size(self)))
        return changed


def _value_size(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, bool):
        return 1
    if isinstance(value, (int, float)):
        return 8
    return len(str(value).encode("utf-8"))


#: Writes a message's measured size on it (the slot's own setter: a frozen Message refuses setattr).
_keep_size = Message.__dict__["_size"].__set__
_set_dead_letter_source = Message.__dict__["dead_letter_source"].__set__
_set_wire_size = Message.__dict__["wire_size"].__set__


def measured_as_sent(message: Message, size: int) -> Message:
    """``message`` (fresh from a transport, not yet shared) with its size as it arrived: the
    whole encoded message, ``size`` bytes. [quotas] (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-quotas):
    the message size "includes the size of properties (system and user) and the size of
    payload", and the entity's size quota counts its messages: bytes in annotations or a
    footer the model does not read are counted too (``message_size``)."""
    _set_wire_size(message, size)
    _keep_size(message, -1)  # (measured again)
    return message


def with_dead_letter_source(message: Message, source: str) -> Message:
    """SETTLE-FWD-002: the message as the broker auto-forwards it out of the dead-letter subqueue
    of ``source``. ServiceBusReceivedMessage.DeadLetterSource
    (https://learn.microsoft.com/dotnet/api/azure.messaging.servicebus.servicebusreceivedmessage.deadlettersource):
    "Only set in messages that have been dead-lettered and subsequently auto-forwarded from the
    dead-letter queue to another entity. Indicates the entity in which the message was dead-lettered."
    """
    changed = message.with_changes()
    _set_dead_letter_source(changed, source)
    return changed


def message_size(message: Message) -> int:
    """The model's size of a message in bytes.

    Body, plus every string property and application property (key and value), plus a
    fixed overhead. It is not the AMQP-encoded size, but it grows the same way: moving a
    property under another name, or adding one, makes the message larger (PAIR-SIZE-001).
    A message whose transport measured it (``wire_size``, ``measured_as_sent``) is at least that.

    Measured once and kept on the message when it has application properties or a transport's
    size; a message with neither is measured again if asked again (a send asks once), as keeping
    it costs a call through the frozen dataclass's slot setter on every send.
    """
    size = message._size
    if size >= 0:
        return size
    size = _model_size(message)
    if message.wire_size is not None:
        if message.wire_size > size:
            size = message.wire_size
    elif not message.application_properties:
        return size
    _keep_size(message, size)
    return size


def _model_size(message: Message) -> int:
    """The model's own measure of a message (``message_size`` without the transport's)."""
    size = MESSAGE_OVERHEAD + len(message.body)
    for value in (
        message.message_id,
        message.session_id,
        message.partition_key,
        message.content_type,
        message.correlation_id,
        message.subject,
        message.to,
        message.reply_to,
        message.reply_to_session_id,
    ):
        if value is not None:  # an ASCII string is its length; anything else is measured (bytes, UTF-8)
            size += len(value) if type(value) is str and value.isascii() else _value_size(value)
    if message.time_to_live is not None:
        size += 8
    if message.scheduled_enqueue_time is not None:
        size += 8
    if message.application_properties:
        for key, value in message.application_properties.items():
            size += len(key.encode("utf-8")) + _value_size(value)
    return size


#: SETTLE-SEND-009: "Maximum message property size for each property is 32 KB. Cumulative size of
#: all properties can't exceed 64 KB. This limit applies to the entire header of the brokered
#: message, which has both user properties and system properties" (Service Bus quotas).
PROPERTY_LIMIT = 32 * 1024
HEADER_LIMIT = 64 * 1024


def header_size(message: Message) -> int:
    """The model's size of a message's header: everything the model's own measure counts but the
    body and the fixed overhead (system properties, application property keys and values; not
    the transport's ``wire_size``, which counts the body's encoding too)."""
    if message.wire_size is None:
        return message_size(message) - MESSAGE_OVERHEAD - len(message.body)
    return _model_size(message) - MESSAGE_OVERHEAD - len(message.body)


def header_problem(message: Message) -> str | None:
    """Why the broker refuses this message's header (SETTLE-SEND-009), or None. Cheap when the
    whole header is under one property's limit (no property can then be over it)."""
    header = header_size(message)
    if header <= PROPERTY_LIMIT:
        return None
    for key, value in message.application_properties.items():
        size = len(key.encode("utf-8")) + _value_size(value)
        if size > PROPERTY_LIMIT:
            return f"the property {key!r} is {size} bytes, over the {PROPERTY_LIMIT} bytes a property may hold"
    if header > HEADER_LIMIT:
        return f"its properties are {header} bytes, over the {HEADER_LIMIT} bytes of a message header"
    return None


def with_properties_modified(message: Message, properties: Mapping[str, Any] | None) -> Message:
    """SETTLE-MOD-001: the message as a settlement with properties to modify leaves it: those
    application properties set (added or replaced), the others as they were. Their header
    must stay within SETTLE-SEND-009's quota: if it would not, ``header_problem`` says why and
    the caller refuses the settlement (our reading: the docs name no outcome; see OP-025)."""
    if not properties:
        return message
    return message.with_changes(application_properties={**message.application_properties, **properties})


class State(str, Enum):
    """Where a message copy stands. The first four are live states of a store."""

    ACTIVE = "active"  # available to receivers
    LOCKED = "locked"  # delivered under a peek-lock, not yet settled
    DEFERRED = "deferred"  # set aside; receivable only by sequence number
    SCHEDULED = "scheduled"  # waiting for its scheduled enqueue time
    DEAD_LETTERED = "dead-lettered"  # in the dead-letter subqueue
    COMPLETED = "completed"  # settled positively, or received and deleted
    EXPIRED = "expired"  # time to live passed, dropped (no dead-lettering)
    CANCELLED = "cancelled"  # a scheduled message cancelled before its time
    DISCARDED = "discarded"  # never stored (duplicate, or a ping: PAIR-PING-002)

    def __str__(self) -> str:
        return self.value


#: The states the settlement cycle moves every message through, as plain module constants:
#: reading ``State.ACTIVE`` goes through the enum's metaclass, about ten times the cost of
#: reading a global, and the cycle reads them on every message.
ACTIVE, LOCKED, COMPLETED = State.ACTIVE, State.LOCKED, State.COMPLETED


class StoredMessage:
    """The broker's record of one message copy in one store.

    The identity part (message, sequence number, enqueued time, expiry, dead-letter
    information) never changes while the record lives, except the application properties a
    settlement modifies (SETTLE-MOD-001: ``message`` is replaced; ``size`` stays the size
    it was sent with, which the entity's quota counted); moving a message to the
    dead-letter subqueue makes a new record. The rest (state, delivery count, lock)
    is the settlement state machine's.
    """

    __slots__ = (
        "message",
        "sequence_number",
        "enqueued_time",
        "expires_at",
        "size",
        "dead_letter_reason",
        "dead_letter_description",
        "dead_letter_source",
        "state",
        "delivery_count",
        "lock_token",
        "locked_until",
        "holder",
        "deferred",
        "partition",
    )

    def __init__(
        self,
        message: Message,
        sequence_number: int,
        enqueued_time: int,
        expires_at: int,
        size: int,
        state: State = State.ACTIVE,
        delivery_count: int = 0,
        partition: int | None = None,
    ) -> None:
        self.message = message
        self.sequence_number = sequence_number
        self.enqueued_time = enqueued_time
        self.expires_at = expires_at
        self.size = size
        self.dead_letter_reason: str | None = None
        self.dead_letter_description: str | None = None
        self.dead_letter_source: str | None = None
        self.state = state
        self.delivery_count = delivery_count
        self.lock_token: int | None = None
        self.locked_until: int | None = None
        self.holder: int | None = None
        self.deferred = False  # was deferred before this lock (abandon returns it there)
        self.partition = partition

    @property
    def session_id(self) -> str | None:
        return self.message.session_id

    def copy(self) -> "StoredMessage":
        """An independent record with the same state (the message itself is immutable and shared)."""
        c = StoredMessage.__new__(StoredMessage)
        c.message = self.message
        c.sequence_number = self.sequence_number
        c.enqueued_time = self.enqueued_time
        c.expires_at = self.expires_at
        c.size = self.size
        c.dead_letter_reason = self.dead_letter_reason
        c.dead_letter_description = self.dead_letter_description
        c.dead_letter_source = self.dead_letter_source
        c.state = self.state
        c.delivery_count = self.delivery_count
        c.lock_token = self.lock_token
        c.locked_until = self.locked_until
        c.holder = self.holder
        c.deferred = self.deferred
        c.partition = self.partition
        return c

    def __repr__(self) -> str:
        return (
            f"StoredMessage(seq={self.sequence_number}, id={self.message.message_id!r}, "
            f"state={self.state}, dc={self.delivery_count}, lock={self.lock_token})"
        )


class Delivery:
    """What a receiver (or a peek) sees of a message at the moment it is handed over.

    It copies what may change later (state, delivery count, lock) and reads the rest
    from the stored record, whose identity part never changes.
    """

    __slots__ = ("_stored", "delivery_count", "lock_token", "locked_until", "state")

    def __init__(self, stored: StoredMessage, state: State | None = None) -> None:
        self._stored = stored
        # Shown as .NET shows it: the service's count of failed deliveries plus one, so
        # the first delivery (and a peek of a fresh message) shows 1 (SETTLE-LOCK-010).
        self.delivery_count = stored.delivery_count + 1
        self.lock_token = stored.lock_token
        self.locked_until = stored.locked_until
        self.state = stored.state if state is None else state

    message = property(lambda self: self._stored.message)
    sequence_number = property(lambda self: self._stored.sequence_number)
    enqueued_time = property(lambda self: self._stored.enqueued_time)
    expires_at = property(lambda self: self._stored.expires_at)
    session_id = property(lambda self: self._stored.message.session_id)
    # The broker's own record first; else what the message carries (a message forwarded out of a
    # dead-letter subqueue keeps them as application properties: SETTLE-FWD-002).
    dead_letter_reason = property(
        lambda self: self._stored.dead_letter_reason
        if self._stored.dead_letter_reason is not None
        else self._stored.message.application_properties.get(DEAD_LETTER_REASON)
    )
    dead_letter_description = property(
        lambda self: self._stored.dead_letter_description
        if self._stored.dead_letter_description is not None
        else self._stored.message.application_properties.get(DEAD_LETTER_ERROR_DESCRIPTION)
    )
    dead_letter_source = property(  # the record's, else the message's (forwarded from a dead-letter subqueue)
        lambda self: self._stored.dead_letter_source
        if self._stored.dead_letter_source is not None
        else self._stored.message.dead_letter_source
    )
    partition = property(lambda self: self._stored.partition)
    message_id = property(lambda self: self._stored.message.message_id)

    @property
    def application_properties(self) -> dict[str, Any]:
        props = dict(self.message.application_properties)
        if self.dead_letter_reason is not None:
            props[DEAD_LETTER_REASON] = self.dead_letter_reason
        if self.dead_letter_description is not None:
            props[DEAD_LETTER_ERROR_DESCRIPTION] = self.dead_letter_description
        return props

    def __repr__(self) -> str:
        return (
            f"Delivery(seq={self.sequence_number}, id={self.message_id!r}, dc={self.delivery_count}, "
            f"lock={self.lock_token}, state={self.state})"
        )
