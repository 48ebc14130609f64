"""What ``sbconform serve`` bounds, and what it lets through its door.

``Limits`` holds every resource bound of the server, each with its default and its flag
of ``sbconform serve`` (README, SECURITY.md). ``check_message`` is the door: a message the
broker could not store and send back exactly is refused when it is sent, never stored to
fail later when it is delivered.
"""

from __future__ import annotations

import math

import datetime
import decimal
import operator
import struct
import uuid
from dataclasses import dataclass, fields
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Mapping

from proton import Array, Described, char, decimal32, decimal64, decimal128, symbol, timestamp
from proton import byte, float32, int32, short, ubyte, uint, ulong, ushort

from sbreference import NEVER, ErrorCode, ServiceBusError, paths
from sbreference.message import Delivery as ModelDelivery
from sbreference.message import State, StoredMessage
from sbreference.timevalues import Instant, Span

from ..amqp import codec
from ..amqp.codec import Envelope
from ..amqp.values import value as amqp_value

MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Resource bounds of one server (flags of ``sbconform serve`` in brackets)."""

    #: largest delivery accepted, summed over its continuation frames; past it the
    #: connection is closed (amqp:link:message-size-exceeded) [--max-delivery-size]
    max_delivery_size: int = 4 * MiB
    #: output buffered for one connection; past it the server stops reading from that
    #: peer and stops sending it deliveries until it reads [--max-output-buffer]
    max_output_buffer: int = 8 * MiB
    #: seconds from TCP accept to the client's OPEN [--open-timeout]
    open_timeout: float = 10.0
    #: seconds without a frame before a connection is closed (amqp:resource-limit-exceeded);
    #: advertised in OPEN as idle-time-out, so clients send empty frames [--idle-timeout]
    idle_timeout: float = 240.0
    #: connections open at once; more are accepted and closed at once [--max-connections]
    max_connections: int = 1000
    #: links open at once on one connection; past it the connection is closed
    #: (amqp:resource-limit-exceeded) [--max-links]
    max_links: int = 1000
    #: sessions open at once on one connection; past it the connection is closed
    #: (amqp:resource-limit-exceeded) [--max-sessions]
    max_sessions: int = 1000
    #: CBS tokens (distinct audiences) held by one connection; more are answered 401 [--max-tokens]
    max_tokens: int = 10_000
    #: credit granted to each sending link; transfers beyond it close the link
    #: (amqp:link:transfer-limit-exceeded) [--link-credit]
    link_credit: int = 1000
    #: largest frame the server accepts and advertises in OPEN (max-frame-size); a larger
    #: frame is a framing error that closes the connection (AMQP 1.0 2.7.1) [--max-frame-size]
    max_frame_size: int = MiB
    #: seconds the listener pauses when the process is out of file descriptors [--accept-backoff]
    accept_backoff: float = 0.5
    #: seconds a connection the server closed has to read its CLOSE before the socket is
    #: closed anyway [--close-grace]
    close_grace: float = 2.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < math.inf:  # nan fails too
                raise ValueError(f"{f.name}: expected a positive finite number, got {value!r}")
        if self.max_frame_size < MIN_MAX_FRAME_SIZE:
            raise ValueError(f"max_frame_size: AMQP allows no less than {MIN_MAX_FRAME_SIZE} bytes, got {self.max_frame_size}")


#: AMQP 1.0 2.7.1: MIN-MAX-FRAME-SIZE, the least max-frame-size a peer may advertise
MIN_MAX_FRAME_SIZE = 512

#: the longest entity path the server reads (an address, a token's name): a queue or topic name
#: is at most 260 characters, a subscription's 50 (sbspec/wire.md 4, [naming]), so with
#: '/Subscriptions/', a subqueue and '/$management' no path that names anything is near this;
#: a longer one is refused before anything else looks at it
MAX_PATH = 1024


# AMQP 1.0 part 3, 3.2.5: "The keys of this map are restricted to be of type string (which
# excludes the possibility of a null key) and the values are restricted to be of simple
# types only, that is, excluding map, list, and array types."
_SIMPLE = (
    type(None), bool, int, float, str, bytes, symbol, char, timestamp, uuid.UUID, ubyte, ushort, uint, ulong,
    byte, short, int32, float32, decimal32, decimal64, decimal128, datetime.datetime, decimal.Decimal,
)


class Refused(ValueError):
    """A message the broker does not accept; the text says why (refused with
    ``com.microsoft:argument-error``)."""


def check_message(message: Any) -> None:
    """Raise ``Refused`` for application properties outside AMQP's rules (a model
    ``Message``: its ``application_properties``)."""
    props = message.application_properties
    if props is None:
        return
    if type(props) is not dict and not isinstance(props, Mapping):  # (a dict first: the ABC's check is slow)
        raise Refused("application-properties is not a map")
    for key, value in props.items():
        if type(key) is not str:  # a symbol is a str subclass: refused too
            raise Refused(f"application property key {key!r} is not a string (AMQP 1.0 part 3, 3.2.5)")
        if isinstance(value, (dict, list, Array)):
            raise Refused(f"application property {key!r} holds a {type(value).__name__}, not a simple value (AMQP 1.0 part 3, 3.2.5)")
        if isinstance(value, (tuple, Described, Instant, Span)):
            continue  # a described value (Service Bus's own: com.microsoft:datetime-offset, timespan, uri, as the codec reads them)
        if not isinstance(value, _SIMPLE):
            raise Refused(f"application property {key!r} holds a {type(value).__name__}, not a simple value (AMQP 1.0 part 3, 3.2.5)")


def check_storable(message: Any, now: int, epoch_ms: int) -> None:
    """The door of every message stored, sent or scheduled: ``Refused`` for one this server could
    not deliver again: its application properties outside AMQP's rules (``check_message``), or,
    unless it is ``plain``, anything the encoder fails on (tried on a stand-in record with the
    broker's fields set to extreme values). ``now``: the model's time; ``epoch_ms``: its time 0."""
    check_message(message)
    if plain(message):
        return
    state = State.SCHEDULED if message.scheduled_enqueue_time is not None else State.ACTIVE
    stored = StoredMessage(message, 2**62, now, NEVER, 0, state, 0, 0)
    stored.lock_token, stored.locked_until = 2**64 - 1, now + 3_600_000
    stored.dead_letter_reason = stored.dead_letter_description = stored.dead_letter_source = "x"
    try:
        codec.encode(ModelDelivery(stored), epoch_ms)
    except Exception as error:  # noqa: BLE001 - whatever the encoder objects to
        raise Refused(f"it could not be delivered again ({type(error).__name__}: {error})") from None


def check_size(namespace: Any, path: str, size: int) -> None:
    """A message (or a batch) of ``size`` bytes as sent, for the entity at ``path``: refused
    (message-size-exceeded) past the entity's maximum message size. [quotas]: "The message size
    includes the size of properties (system and user) and the size of payload" (the batch's
    limit is the same). Each message decoded carries its size as sent too (``Message.wire_size``),
    which the model's limit and the entity's quota count (sbspec/wire.md 4)."""
    entity = namespace.entities.get(paths.entity_key(path))
    limit = None if entity is None else entity.description.max_message_size
    if limit is not None and size > limit:
        raise ServiceBusError(ErrorCode.MESSAGE_SIZE_EXCEEDED,
                              f"The message of {size} bytes as sent exceeds the maximum message size of {limit} bytes.", transient=False)


_PLAIN = frozenset({str, bytes, bool, float, type(None)})
_INT_BOUND = 2**62


def _all_plain(values: Iterable[Any]) -> bool:
    """Each value a plain scalar: a string, bytes, a bool, a float or None, or an int within 2**62."""
    for value in values:
        kind = type(value)
        if kind is int:
            if not -_INT_BOUND < value < _INT_BOUND:
                return False
        elif kind not in _PLAIN:
            return False
    return True


_FIELDS: dict[type, Callable[[Any], tuple]] = {}
_second = operator.itemgetter(1)


def plain(message: Any) -> bool:
    """Every field of a model message (and every application property value) a plain
    scalar within range: such a message is encoded again by construction, so the server
    skips its trial encoding (half of a send's cost). Anything else is tried.

    The envelope a message came in (``amqp.codec.Envelope``) is raw bytes the codec itself
    cut out of the frame and writes back verbatim; what the encoder writes anew from it is
    its decoded property values (``texts``) and the assigned MessageId: those are checked."""
    values_of = _FIELDS.get(type(message))
    if values_of is None:
        names = tuple(f.name for f in fields(message) if f.name != "application_properties")
        values_of = _FIELDS[type(message)] = operator.attrgetter(*names)
    for value in values_of(message):  # (``_all_plain``'s rule, inline: most values are plain at the first test)
        kind = type(value)
        if kind in _PLAIN:
            continue
        if kind is int:
            if not -_INT_BOUND < value < _INT_BOUND:
                return False
        elif kind is Envelope:  # written back as it came but for these two
            if not (_all_plain(map(_second, value.texts)) and _all_plain((value.assigned_message_id,))):
                return False
        else:
            return False
    return _all_plain(message.application_properties.values())


def properties_to_modify(raw: Any) -> dict[str, Any] | None:
    """SETTLE-MOD-001: the application properties a settlement asks to modify, as the model
    takes them (the modified outcome's message-annotations, the rejected outcome's error info,
    update-disposition's ``properties-to-modify``: keys are symbols or strings on the wire).
    Held to the same rules as a sent message's properties, and each value must be one the
    broker can write back; anything else is refused as an argument error."""
    try:
        return _properties_to_modify(raw)
    except Refused as error:
        raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"The properties to modify were refused: {error}", transient=False) from None


def _properties_to_modify(raw: Any) -> dict[str, Any] | None:
    if not raw:
        return None
    if not isinstance(raw, Mapping):
        raise Refused("properties-to-modify is not a map")
    props = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise Refused(f"property to modify {key!r}: its name is not a string")
        props[str(key)] = bytes(value) if isinstance(value, memoryview) else value  # proton's binary
    check_message(SimpleNamespace(application_properties=props))
    for key, value in props.items():
        try:
            amqp_value(value)
        except (TypeError, ValueError, OverflowError, struct.error) as error:
            raise Refused(f"property to modify {key!r}: {error}") from None
    return props
