"""Small AMQP helpers the server's modules share: the symbols Service Bus speaks on links,
entity paths from addresses, lock tokens as UUIDs, and the two ways the server builds an
AMQP error (from a model error, or its own)."""

from __future__ import annotations

import os
import uuid
from hashlib import blake2b
from hmac import compare_digest
from typing import Any
from urllib.parse import urlparse

from cproton_ffi import ffi as _ffi
from cproton_ffi import lib as _lib
from proton import Array, Condition, Delivery, symbol

from sbreference import ServiceBusError, paths

from ..amqp import codec

A = symbol
#: update-disposition's disposition-status -> the model's settlement
SESSION_FILTER = A("com.microsoft:session-filter")
LOCKED_UNTIL_UTC = A("com.microsoft:locked-until-utc")
ATTACH_TIMEOUT = A("com.microsoft:timeout")
TRACKING_ID = A("com.microsoft:tracking-id")
ENTITY_TYPE = A("com.microsoft:entity-type")
#: .NET's MessagingEntityType: Queue 0, Topic 1, Subscriber 2
ENTITY_TYPES = {"queue": 0, "topic": 1, "subscription": 2}
#: how long a next-available-session attach waits when the client names no timeout: the
#: service's default operation timeout (the Python SDK itself waits 65 s for the ATTACH)
SESSION_WAIT_MS = 60_000
DOTNET_EPOCH_TICKS = 621_355_968_000_000_000
TRACKING = A("com.microsoft:tracking-id")
#: the addresses of the nodes that take requests (not entities)
NODES = ("$cbs", "$sbconform")


def is_node(address: str) -> bool:
    """``$cbs``, ``$sbconform`` or a ``$management`` node: requests, each authorized on its own."""
    return address in NODES or address.endswith("$management")


#: Service Bus lock tokens are GUIDs no client can predict, and a token is all a receiver of the
#: entity needs to settle or renew a message through $management (SETTLE-LOCK-011). The model's
#: tokens count up; on the wire each is the count in the high 64 bits and a MAC of it, keyed by
#: this process's random key, in the low 64: a token made up from another names no lock.
_LOCK_KEY = os.urandom(16)
_LOW = 2**64 - 1


def _lock_mac(token: int) -> bytes:
    return blake2b(token.to_bytes(8, "big"), key=_LOCK_KEY, digest_size=8).digest()


def _lock_wire(token: int) -> int:
    return token << 64 | int.from_bytes(_lock_mac(token), "big")


def lock_uuid(token: int) -> uuid.UUID:
    """The lock token the client sees for the model's lock ``token`` (1 to 2**64 - 1)."""
    return uuid.UUID(int=_lock_wire(token))


def model_token(value: uuid.UUID) -> int:
    """The model's lock token a client's token names; 0 (no lock) for one this server never gave."""
    wire = value.int
    token = wire >> 64
    # the MAC compared in constant time (hmac.compare_digest), as sas.check_grant compares signatures
    return token if 0 < token <= _LOW and compare_digest(_lock_mac(token), (wire & _LOW).to_bytes(8, "big")) else 0


def lock_tag(token: int) -> bytes:
    """The delivery tag of a message delivered under ``token``: the lock token as .NET's
    Guid bytes (``lock_uuid(token).bytes_le``, without building the UUID)."""
    b = _lock_wire(token).to_bytes(16, "big")
    return b[3::-1] + b[5:3:-1] + b[7:5:-1] + b[8:]


def entity_path(address: str | None) -> str:
    """'amqps://localhost:5672/q1/$DeadLetterQueue' -> 'q1/$DeadLetterQueue'."""
    if not address:
        return ""
    if "://" in address:
        try:
            path = urlparse(address).path
            return path[1:] if path.startswith("/") else path  # one slash: 'sb://ns//q' names no entity (links._authorize)
        except ValueError:  # no URL ('amqps://[abc/q': an IPv6 host never closed): its path all the same
            path = address.split("://", 1)[1].partition("/")[2]
            return path.split("?", 1)[0].split("#", 1)[0]
    return address[1:] if address.startswith("/") else address


def entity_at(namespace: Any, path: str) -> Any:
    """The queue, topic or subscription ``path`` names (its dead-letter subqueue's path: the same), or
    None if there is none now: one lookup, no resolution (no fault, status or idleness applied)."""
    parsed = paths.parse(path)
    entity = namespace.entities.get(parsed.key)
    if entity is None or parsed.subscription is None:
        return entity
    return (getattr(entity, "subscriptions", None) or {}).get(parsed.subscription_key)


def canonical(namespace: Any, path: str) -> str:
    """``path`` as its entity spells it (names are case-insensitive; a trailing slash dropped), or
    as given when it names nothing: what the model is handed. The model keeps what it resolved
    by the path as given, so every spelling of a path (2**n of n letters) was an entry more."""
    entity = entity_at(namespace, path)
    if entity is None:
        return path
    return entity.path + paths.parse(path).suffix  # "", its dead-letter or transfer dead-letter queue (TXN-VIA-003)


def values(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, Array):
        return list(value.elements)
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def delivery_tag(delivery: Delivery) -> bytes:
    return tag_of(delivery._impl)


_unpack = _ffi.unpack


def tag_of(impl: Any) -> bytes:
    """The tag of proton's C delivery ``impl`` (as sent: ``Delivery.tag`` decodes it as text)."""
    tag = _lib.pn_delivery_tag(impl)
    if not tag.size:  # (none at all: a client's transfer the wrong way on a link, NULL to unpack)
        return b""
    return _unpack(tag.start, tag.size)  # (ffi.unpack: bytes in one call, no buffer object)


def condition(error: ServiceBusError) -> Condition:
    """The AMQP error for a model error. The info map is always present (with the
    tracking id): the SDK reads the error's third field and fails on a shorter list."""
    return Condition(codec.condition_of(error.code), error.text, {TRACKING: error.tracking_id})


def error(condition: str, text: str) -> Condition:
    """An AMQP error the server raises itself, with the same info map as ``condition``."""
    return Condition(condition, text, {TRACKING: f"sbconform-{uuid.uuid4()}"})


def binary(value: Any, field: str) -> bytes:
    """A request's binary field ([rr]: schedule-message's message, set-session-state's state) as
    bytes; anything else is a bad request (``bytes()`` of a number allocates that many bytes)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise ValueError(f"{field} is not binary but a {type(value).__name__}")


def opt_str(value: Any) -> str | None:
    return None if value is None else str(value)
