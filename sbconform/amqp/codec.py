"""Service Bus on the wire: errors and messages, in both directions, once.

Errors (``conditions``, importable from here): ``CONDITIONS`` (model error code -> AMQP error
condition), ``code_of_condition`` (its inverse, with the aliases the SDKs also map), ``STATUS``
(management status code per error). The server writes with them; the SDK target reads with them.

Messages: ``decode(data)`` turns an encoded AMQP message into the model's ``Message``,
and keeps, in ``WireMessage.wire`` (an ``Envelope``; a ``Message`` subclass, so the model is untouched), every section the broker does not own
exactly as the sender encoded it: the header's durable and priority fields, delivery
annotations, the sender's message annotations, the properties list, the application
properties, the body sections (data, amqp-sequence, amqp-value, or none at all) and the
footer. ``encode(delivery)`` writes the message back out from those bytes, adding what
the broker owns as Service Bus does: the header's delivery count and time to live, the
annotations ``x-opt-sequence-number`` (and ``x-opt-enqueue-sequence-number``), ``x-opt-enqueued-time``, ``x-opt-locked-until``,
``x-opt-message-state``, ``x-opt-scheduled-enqueue-time``, ``x-opt-deadletter-source``,
``x-opt-partition-id``, the dead-letter application properties, and a MessageId when the
sender set none. ``sbspec/wire.md`` gives the source of each of these facts.
"""

from __future__ import annotations

import operator
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

from sbreference import NEVER
from sbreference import Message as ModelMessage
from sbreference.message import DEAD_LETTER_ERROR_DESCRIPTION, DEAD_LETTER_REASON, measured_as_sent

from . import values as v
from .values import WireError, read, read_typed, skip

from .conditions import (  # noqa: F401  (errors, importable from here)
    CODES, CONDITION_ALIASES, CONDITIONS, INTERNAL_ERROR, STATUS, STATUS_CODES, code_of_condition, condition_of, status_of,
)


# ---------------------------------------------------------------- sections
HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES = 0x70, 0x71, 0x72, 0x73, 0x74
DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = 0x75, 0x76, 0x77, 0x78
_SYMBOLIC = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": AMQP_SEQUENCE,
    "amqp:amqp-value:*": AMQP_VALUE,
    "amqp:footer:map": FOOTER,
}
BODY_SECTIONS = (DATA, AMQP_SEQUENCE, AMQP_VALUE)

# message annotations (azure/servicebus/_common/constants.py)
X_SEQUENCE_NUMBER = "x-opt-sequence-number"
X_ENQUEUED_TIME = "x-opt-enqueued-time"
X_LOCKED_UNTIL = "x-opt-locked-until"
X_LOCK_TOKEN = "x-opt-lock-token"
X_MESSAGE_STATE = "x-opt-message-state"
X_SCHEDULED = "x-opt-scheduled-enqueue-time"
X_DEADLETTER_SOURCE = "x-opt-deadletter-source"
X_PARTITION_ID = "x-opt-partition-id"
X_PARTITION_KEY = "x-opt-partition-key"
X_ENQUEUE_SEQUENCE_NUMBER = "x-opt-enqueue-sequence-number"
#: annotations the broker sets; a sender's values for them are replaced, never doubled
BROKER_ANNOTATIONS = frozenset({
    X_SEQUENCE_NUMBER, X_ENQUEUED_TIME, X_LOCKED_UNTIL, X_LOCK_TOKEN, X_MESSAGE_STATE,
    X_SCHEDULED, X_DEADLETTER_SOURCE, X_PARTITION_ID, X_ENQUEUE_SEQUENCE_NUMBER,
})
#: annotations a sender may not set to null: "results in the service rejecting the message" (the Go SDK's live
#: TestNilPartitionKey, https://github.com/Azure/azure-sdk-for-go/blob/main/sdk/messaging/azservicebus/receiver_test.go)
NULL_REFUSED = frozenset({X_SCHEDULED, X_MESSAGE_STATE, X_ENQUEUE_SEQUENCE_NUMBER})
#: a management update-disposition's disposition-status -> the settlement (the trace's operation
#: name, sbreference.operations.SETTLEMENTS); "defered" is how the SDKs spell it on the wire
#: (azure/servicebus/_common/constants.py, MGMT_REQUEST_DISPOSITION_STATUS)
DISPOSITION_STATUS = {"completed": "complete", "abandoned": "abandon", "defered": "defer", "deferred": "defer",
                      "suspended": "dead-letter"}
#: ServiceBusMessageState (azure/servicebus/_common/constants.py): Active 0, Deferred 1, Scheduled 2
MESSAGE_STATES = {"deferred": 1, "scheduled": 2}
#: properties fields (AMQP 1.0 part 3, 3.2.4)
MESSAGE_ID, USER_ID, TO, SUBJECT, REPLY_TO, CORRELATION_ID, CONTENT_TYPE = 0, 1, 2, 3, 4, 5, 6
GROUP_ID = 10
REPLY_TO_GROUP_ID = 12
#: AMQP types an application property may not hold (3.2.5: "simple types only, that is, excluding map, list,
#: and array types"; described values stay: Service Bus has its own, com.microsoft:timespan and others)
COMPOUND_KINDS = frozenset({"list", "map", "array"})
#: the properties fields the model reads (and a rule action may change), by list index
MODEL_FIELDS = ((MESSAGE_ID, "message_id"), (TO, "to"), (SUBJECT, "subject"), (REPLY_TO, "reply_to"),
                (CORRELATION_ID, "correlation_id"), (CONTENT_TYPE, "content_type"), (GROUP_ID, "session_id"),
                (REPLY_TO_GROUP_ID, "reply_to_session_id"))


@dataclass(frozen=True, slots=True)
class Envelope:
    """What the sender encoded and the broker passes through, as raw AMQP bytes."""

    durable: bytes = b"\x42"  # header field 0 (false)
    priority: bytes = b"\x40"  # header field 1 (null: the default, 4)
    delivery_annotations: bytes = b""  # the whole section, or nothing
    annotations: tuple[tuple[str, bytes], ...] = ()  # (key, raw key + value) the sender set
    properties: tuple[bytes, ...] | None = None  # raw fields of the properties list; None: no section
    properties_section: bytes = b""  # the whole section as sent, when it has a MessageId and writing ``properties`` again gives these bytes
    application: tuple[tuple[str, bytes], ...] | None = None  # (key, raw key + value); None: no section
    application_section: bytes = b""  # the whole application-properties section as sent
    body: bytes = b""  # the body sections; b"": the message had none (unless data_body)
    data_body: bool = False  # the body is one data section holding the model's body, as ``_data_prefix`` encodes it
    footer: bytes = b""  # the whole section, or nothing
    texts: tuple[tuple[int, Any], ...] = ()  # (properties index, the model's value) as decoded
    application_values: Any = None  # the application properties as decoded (a rule action may change them)
    assigned_message_id: str | None = None  # the broker's, for a message sent without one


@dataclass(frozen=True, slots=True)
class WireMessage(ModelMessage):
    """The model's message with the envelope it came in (the model sees a plain ``Message``;
    its ``with_changes`` keeps the envelope)."""

    wire: Envelope | None = field(default=None, compare=False, repr=False)


def sections(data: bytes | memoryview) -> list[tuple[int, int, int, int]]:
    """(section code, start, start of its value, end) of each section of an encoded message."""
    out = []
    pos = 0
    n = len(data)
    while pos < n:
        if data[pos] != 0x00:
            raise WireError(f"byte {pos}: expected a message section, found 0x{data[pos]:02x}")
        if pos + 2 < n and data[pos + 1] == 0x53:  # a small-ulong descriptor: how every SDK writes them
            descriptor = code = data[pos + 2]
            value_at = pos + 3
        else:
            kind, descriptor, value_at = read_typed(data, pos + 1)
            code = _SYMBOLIC.get(descriptor) if kind == "symbol" else descriptor
        if not isinstance(code, int) or not HEADER <= code <= FOOTER:
            raise WireError(f"byte {pos}: {descriptor!r} is not a message section")
        end = skip(data, value_at)
        out.append((code, pos, value_at, end))
        pos = end
    return out


def _entries(data, pos: int) -> list[tuple[Any, bytes]]:
    """(key, raw key + value) of each entry of the map at ``pos``."""
    raw = v.elements(data, pos)
    out = []
    for i in range(0, len(raw) - 1, 2):
        key = read(raw[i], 0)[0]
        out.append((key, raw[i] + raw[i + 1]))
    return out


_NULL = ("null", None)  # (type name, value) of a null field


def _text(kind: str, value: Any) -> str | None:
    """A message-id or correlation-id as the model (and .NET's ``MessageId``) reads it."""
    if value is None:
        return None
    if kind == "binary":
        return value.hex()
    return str(value)


def decode(data: bytes | memoryview, epoch_ms: int, assign_message_id: bool = True) -> ModelMessage:
    """The model's message for an encoded AMQP message; ``epoch_ms``: the model's time 0 in
    epoch milliseconds. Without a message-id, the broker assigns one (``assign_message_id``).
    Whatever is wrong with the bytes, the error is a ``WireError``."""
    try:  # measured as it arrived: the entity's quota and size limit count every section (sbspec/wire.md 1)
        return measured_as_sent(_decode(data, epoch_ms, assign_message_id), len(data))
    except WireError:
        raise
    except (IndexError, ValueError, TypeError, OverflowError, struct.error, UnicodeDecodeError) as error:
        raise WireError(f"malformed message: {v.in_wire_words(error)}") from None


def _decode(data: bytes | memoryview, epoch_ms: int, assign_message_id: bool) -> ModelMessage:
    if not isinstance(data, bytes):  # (slices of bytes are bytes: each field is copied out once)
        data = bytes(data)
    simple = _simple(data)
    if simple is not None:
        return simple
    durable, priority = b"\x42", b"\x40"
    ttl = None
    delivery_annotations = footer = application_section = b""
    annotations: list[tuple[str, bytes]] = []
    props: list[bytes] | None = None
    properties_section = b""
    application: list[tuple[str, bytes]] | None = None
    app_values: dict[str, Any] = {}
    body_parts: list[bytes] = []
    model_body: list[bytes] = []
    partition_key = scheduled = None
    fields: dict[int, tuple[str, Any]] = {}
    for code, start, at, end in sections(data):
        if code == HEADER:
            raw = v.elements(data, at) if data[at] != 0x45 else []
            if len(raw) > 0:
                durable = raw[0]
                if durable[0] not in (0x40, 0x41, 0x42, 0x56):
                    raise WireError("header: durable is not a boolean")
            if len(raw) > 1:
                priority = raw[1]
                if priority[0] not in (0x40, 0x50):
                    raise WireError("header: priority is not a ubyte")
            if len(raw) > 2:
                if raw[2][0] not in (0x40, 0x43, 0x52, 0x70):  # 3.2.1: ttl is milliseconds, a uint
                    raise WireError("header: ttl is not a uint")
                ttl = read(raw[2], 0)[0] or None
        elif code == DELIVERY_ANNOTATIONS:
            delivery_annotations = bytes(data[start:end])
        elif code == MESSAGE_ANNOTATIONS:
            for key, raw in _entries(data, at):
                name = str(key)
                if name in NULL_REFUSED and raw[skip(raw, 0)] == 0x40:  # sbspec/wire.md 1: Service Bus rejects these
                    raise WireError(f"message annotation {name} is null")
                if name == X_PARTITION_KEY:
                    partition_key = read(raw, skip(raw, 0))[0]
                elif name == X_SCHEDULED:  # a DateTime: an AMQP timestamp (null: refused above)
                    kind, when, _ = read_typed(raw, skip(raw, 0))
                    if kind != "timestamp":
                        raise WireError(f"message annotation {X_SCHEDULED} holds a {kind}, not a timestamp")
                    scheduled = _ms(when) - epoch_ms
                if name not in BROKER_ANNOTATIONS:
                    annotations.append((name, raw))
        elif code == PROPERTIES:
            props = v.elements(data, at) if data[at] != 0x45 else []
            for index in (MESSAGE_ID, TO, SUBJECT, REPLY_TO, CORRELATION_ID, CONTENT_TYPE, GROUP_ID, REPLY_TO_GROUP_ID):
                if index < len(props):
                    raw = props[index]
                    fields[index] = _NULL if raw == b"\x40" else read_typed(raw, 0)[:2]
            if (data[start + 1] == 0x53 and at == start + 3 and data[at] == 0xC0 and sum(map(len, props)) == end - at - 3
                    and props and props[MESSAGE_ID] != b"\x40"):
                # a small-ulong descriptor, a list8 and nothing after its last field, as encode writes it,
                # with a MessageId (none for the broker to assign)
                properties_section = data[start:end]
        elif code == APPLICATION_PROPERTIES:
            application_section = bytes(data[start:end])
            application = []
            for key, raw in _entries(data, at):
                # AMQP 1.0 part 3, 3.2.5: string keys, simple values; anything else this broker
                # could not hand back as an application property, so it is refused at the door
                if raw[0] not in (0xA1, 0xB1):
                    raise WireError(f"application property key {key!r} is not a string (AMQP 1.0 part 3, 3.2.5)")
                kind, value, _ = read_typed(raw, skip(raw, 0))
                if kind in COMPOUND_KINDS:
                    raise WireError(f"application property {str(key)!r} holds a {kind}, not a simple value (AMQP 1.0 part 3, 3.2.5)")
                name = str(key)
                application.append((name, raw))
                app_values[name] = (v.dotnet_value(*value) or value) if kind == "described" else value  # (.NET's TimeSpan...)
        elif code in BODY_SECTIONS:
            body_parts.append((code, start, end))
            if code == DATA:
                model_body.append(read(data, at)[0])
            elif code == AMQP_VALUE and data[at] in (0xA0, 0xB0, 0xA1, 0xB1):
                value = read(data, at)[0]
                model_body.append(value.encode("utf-8") if isinstance(value, str) else value)
            else:
                model_body.append(bytes(data[at:end]))
        elif code == FOOTER:
            footer = bytes(data[start:end])

    texts = {index: _text(kind, value) for index, (kind, value) in fields.items()}
    text = texts.get

    message_id = text(MESSAGE_ID)
    # Without a message-id the broker assigns one (what comes back out carries it), but the
    # message was sent without one: it is no partition or duplicate-detection key (PART-KEY-009)
    assigned_id = uuid.uuid4().hex if message_id is None and assign_message_id else None
    # one data section encoded as this codec encodes it (the common case): the envelope keeps no
    # second copy of the payload, it is written again from the model's body (memory: one copy)
    data_body = (len(body_parts) == 1 and body_parts[0][0] == DATA
                 and bytes(data[body_parts[0][1]:body_parts[0][2] - len(model_body[0])]) == _data_prefix(len(model_body[0])))
    envelope = Envelope(
        durable=durable, priority=priority, delivery_annotations=delivery_annotations,
        annotations=tuple(annotations), properties=None if props is None else tuple(props), properties_section=properties_section,
        application=None if application is None else tuple(application), application_section=application_section,
        body=b"" if data_body else b"".join(bytes(data[a:b]) for _, a, b in body_parts), data_body=data_body, footer=footer,
        texts=tuple([(index, _model_text(index, text(index))) for index, _ in MODEL_FIELDS]),
        assigned_message_id=assigned_id,
        application_values=dict(app_values) if application is not None else None,
    )
    return WireMessage(
        body=b"".join(model_body),
        message_id=message_id,
        session_id=text(GROUP_ID) or None,
        partition_key=None if partition_key is None else str(partition_key),
        time_to_live=ttl,
        scheduled_enqueue_time=scheduled,
        content_type=text(CONTENT_TYPE) or None,
        correlation_id=text(CORRELATION_ID),
        subject=text(SUBJECT),
        to=text(TO),
        reply_to=text(REPLY_TO),
        reply_to_session_id=text(REPLY_TO_GROUP_ID) or None,
        application_properties=app_values,
        wire=envelope,
    )


_NULLS = b"\x40" * 255
_LATER_TEXTS = tuple((index, None) for index, _ in MODEL_FIELDS if index != MESSAGE_ID)


def _simple(data: bytes) -> ModelMessage | None:
    """The shape the SDKs send most (each message of a batch): a properties list8 with a string
    MessageId and every later field null, then one data section (vbin8, or vbin32 over 255
    bytes) and nothing else. Read without ``_decode``'s walk, to the same message and
    envelope (tests/test_codec_simple.py); None for any other shape."""
    if data[:4] != b"\x00\x53\x73\xc0" or data[6:7] != b"\xa1" or len(data) < 8:
        return None
    end = 5 + data[4]
    id_end = 8 + data[7]
    nulls = data[5] - 1  # the fields after the MessageId
    if end - id_end != nulls or data[id_end:end] != _NULLS[:nulls] or data[end:end + 3] != b"\x00\x53\x75":
        return None
    head = data[end + 3:end + 8]
    if head[:1] == b"\xa0" and len(head) >= 2:
        body_at = end + 5
        size = head[1]
    elif head[:1] == b"\xb0" and len(head) == 5 and (size := int.from_bytes(head[1:], "big")) > 255:
        body_at = end + 8
    else:
        return None
    if body_at + size != len(data):
        return None
    message_id = data[8:id_end].decode("utf-8")
    envelope = Envelope(properties=(data[6:id_end],) + (b"\x40",) * nulls, properties_section=data[:end], data_body=True,
                        texts=((MESSAGE_ID, message_id),) + _LATER_TEXTS)
    return WireMessage(body=data[body_at:], message_id=message_id, application_properties={}, wire=envelope)


def _ms(when: Any) -> int:
    return round(when.timestamp() * 1000)


# ---------------------------------------------------------------- encoding
def header(durable: bytes, priority: bytes, ttl: int | None, delivery_count: int) -> bytes:
    """The header section, every field written out: a receiver reads delivery-count from it
    (the Python SDK shows None, not 0, when the header is missing). Most messages share a few
    headers: the first ``_HEADERS_KEPT`` written are kept."""
    key = (durable, priority, ttl, delivery_count)
    section = _HEADERS.get(key)
    if section is None:
        fields = b"".join((durable, priority, b"\x40" if ttl is None else b"\x70" + min(ttl, 0xFFFFFFFF).to_bytes(4, "big"),
                           b"\x42\x70", min(delivery_count, 0xFFFFFFFF).to_bytes(4, "big")))
        section = v.described(HEADER, v.compound(0xC0, 0xD0, [fields], 5))
        if len(_HEADERS) < _HEADERS_KEPT:
            _HEADERS[key] = section
    return section


_HEADERS: dict[tuple[bytes, bytes, int | None, int], bytes] = {}
_HEADERS_KEPT = 4096


#: the keys of the annotations the broker sets, encoded once
_SEQUENCE_NUMBER_KEY, _ENQUEUED_TIME_KEY, _LOCKED_UNTIL_KEY, _MESSAGE_STATE_KEY, _SCHEDULED_KEY, _DEADLETTER_SOURCE_KEY, _PARTITION_ID_KEY = (
    v.symbol(key) for key in (X_SEQUENCE_NUMBER, X_ENQUEUED_TIME, X_LOCKED_UNTIL, X_MESSAGE_STATE, X_SCHEDULED,
                              X_DEADLETTER_SOURCE, X_PARTITION_ID))
_ENQUEUE_SEQUENCE_NUMBER_KEY = v.symbol(X_ENQUEUE_SEQUENCE_NUMBER)
_TIMESTAMP, _LONG, _SMALL = struct.Struct(">Bq").pack, struct.Struct(">Bq").pack, struct.Struct(">Bb").pack
#: the message-state annotation by the delivery's state (``MESSAGE_STATES``; Active, 0, for any other)
_STATE_ENTRIES = {state: _MESSAGE_STATE_KEY + v.int32(number) for state, number in MESSAGE_STATES.items()}
_ACTIVE_ENTRY = _MESSAGE_STATE_KEY + v.int32(0)


def encode(d: Any, epoch_ms: int, lock_token: bool = True) -> bytes:
    """A delivery (``sbreference.Delivery``) as Service Bus sends it to a receiver or a peek.
    ``lock_token``: the message is delivered under a lock (peeks carry no locked-until)."""
    m = d.message
    wire = getattr(m, "wire", None)
    env: Envelope = wire if isinstance(wire, Envelope) else _envelope_of(m, epoch_ms)
    # the effective time to live (the entity's default caps the message's: SETTLE-TTL-001)
    enqueued, expires = d.enqueued_time, d.expires_at
    ttl = expires - enqueued if expires < NEVER else None
    out = [header(env.durable, env.priority, ttl, max(d.delivery_count - 1, 0))]
    if env.delivery_annotations:
        out.append(env.delivery_annotations)
    entries = [raw for _key, raw in env.annotations]
    sequence_number = d.sequence_number  # (a long as v.long writes it, a timestamp as v.timestamp)
    number = _SMALL(0x55, sequence_number) if -128 <= sequence_number < 128 else _LONG(0x81, sequence_number)
    entries.append(_SEQUENCE_NUMBER_KEY + number)
    entries.append(_ENQUEUE_SEQUENCE_NUMBER_KEY + number)  # EnqueuedSequenceNumber: the same here (sbspec/wire.md 2)
    entries.append(_ENQUEUED_TIME_KEY + _TIMESTAMP(0x83, epoch_ms + enqueued))
    if lock_token and (locked_until := d.locked_until) is not None:
        entries.append(_LOCKED_UNTIL_KEY + _TIMESTAMP(0x83, epoch_ms + locked_until))
    entries.append(_STATE_ENTRIES.get(d.state, _ACTIVE_ENTRY))  # (a State is a str: its value)
    if m.scheduled_enqueue_time is not None:
        entries.append(_SCHEDULED_KEY + v.timestamp(epoch_ms + m.scheduled_enqueue_time))
    if d.dead_letter_source is not None:
        entries.append(_DEADLETTER_SOURCE_KEY + v.string(d.dead_letter_source))
    if d.partition is not None:
        entries.append(_PARTITION_ID_KEY + v.short(d.partition))
    out.append(v.described(MESSAGE_ANNOTATIONS, v.map_entries(entries)))
    if env.properties_section and env.texts == _texts_of(m):
        out.append(env.properties_section)  # as sent: nothing to assign (decode), nothing changed since
    else:
        props = _properties(m, env)
        if props is not None:
            out.append(v.described(PROPERTIES, v.list_(props)))
    extra = {}  # the broker's dead-letter properties; a sender's own (the model reads them too) go out as sent
    own = m.application_properties
    if (reason := d.dead_letter_reason) is not None and not _same(reason, own.get(DEAD_LETTER_REASON)):
        extra[DEAD_LETTER_REASON] = reason
    if (description := d.dead_letter_description) is not None and not _same(description, own.get(DEAD_LETTER_ERROR_DESCRIPTION)):
        extra[DEAD_LETTER_ERROR_DESCRIPTION] = description
    changed = env.application_values is not None and _changed(env.application_values, m.application_properties)
    if env.application_section and not extra and not changed:
        out.append(env.application_section)
    elif env.application is not None or extra or m.application_properties:
        current = m.application_properties
        before = env.application_values or {}
        app = [raw for key, raw in (env.application or ())
               if key not in extra and key in current and (not changed or _same(before.get(key), current[key]))]
        kept = {key for key, raw in (env.application or ()) if key not in extra and key in current
                and (not changed or _same(before.get(key), current[key]))}
        if changed or env.application is None:
            app += [v.string(k) + v.value(x) for k, x in current.items() if k not in kept and k not in extra]
        app += [v.string(k) + v.string(x) for k, x in extra.items()]
        out.append(v.described(APPLICATION_PROPERTIES, v.map_entries(app)))
    if env.data_body:
        out.append(_data_prefix(len(m.body)) + m.body)
    else:
        out.append(env.body if env.body or wire is not None else v.described(DATA, v.binary(m.body)))
    if env.footer:
        out.append(env.footer)
    return b"".join(out)


_MODEL_INDEXES = tuple(index for index, _ in MODEL_FIELDS)
_model_values = operator.attrgetter(*(attr for _, attr in MODEL_FIELDS))


def _texts_of(m: ModelMessage) -> tuple[tuple[int, Any], ...]:
    """The message's values of the properties fields the model reads, as ``Envelope.texts`` holds them."""
    return tuple(zip(_MODEL_INDEXES, _model_values(m)))


def _properties(m: ModelMessage, env: Envelope) -> list[bytes] | None:
    """The fields of the properties section the message goes out with (None: no section)."""
    props = list(env.properties) if env.properties is not None else []
    message_id = m.message_id if m.message_id is not None else env.assigned_message_id
    if message_id is not None and (not props or props[MESSAGE_ID] == b"\x40"):
        if props:
            props[MESSAGE_ID] = v.string(message_id)  # assigned by the broker
        else:
            props = [v.string(message_id)]
    if env.texts:  # what a rule action changed is written anew (RULES-ACT-*); the rest as sent
        decoded = dict(env.texts)
        for index, attr in MODEL_FIELDS:
            value = getattr(m, attr, None)
            if index == MESSAGE_ID or value == decoded.get(index):
                continue
            while len(props) <= index:
                props.append(v.null())
            props[index] = v.null() if value is None else (v.symbol(value) if index == CONTENT_TYPE else v.string(value))
    return props if props or env.properties is not None else None


def _data_prefix(n: int) -> bytes:
    """A data section's bytes before its payload of ``n`` bytes (vbin8 below 256, else vbin32)."""
    return b"\x00\x53\x75" + (b"\xa0" + bytes([n]) if n < 256 else b"\xb0" + n.to_bytes(4, "big"))


def _same(a: Any, b: Any) -> bool:
    return a is b or (type(a) is type(b) and a == b)


def _changed(before: dict, now: dict) -> bool:
    """Application properties changed since they were decoded: a key added or removed, or a
    value changed in value or only in type (``True`` for ``1``: SETTLE-MOD-001, RULES-ACT-*)."""
    if now is before:
        return False
    if now != before:
        return True
    return any(not _same(before[key], value) for key, value in now.items())


def _model_text(index: int, value: Any) -> Any:
    return value or None if index in (GROUP_ID, REPLY_TO_GROUP_ID, CONTENT_TYPE) else value


def _envelope_of(m: ModelMessage, epoch_ms: int) -> Envelope:
    """The envelope of a message made by the model rather than received (no wire form)."""
    s = lambda x: v.null() if x is None else v.string(x)  # noqa: E731
    props = [s(m.message_id), v.null(), s(m.to), s(m.subject), s(m.reply_to), s(m.correlation_id),
             v.null() if m.content_type is None else v.symbol(m.content_type), v.null(), v.null(), v.null(), s(m.session_id),
             v.null(), s(getattr(m, "reply_to_session_id", None))]
    while props and props[-1] == b"\x40":
        props.pop()
    annotations = ()
    if m.partition_key is not None:
        annotations = ((X_PARTITION_KEY, v.symbol(X_PARTITION_KEY) + v.string(m.partition_key)),)
    application = tuple((k, v.string(k) + v.value(x)) for k, x in m.application_properties.items()) or None
    return Envelope(annotations=annotations, properties=tuple(props) or None, application=application,
                    body=v.described(DATA, v.binary(m.body)))
