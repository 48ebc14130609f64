"""AMQP 1.0 frames as the proxy sees them: the whole frames ``sbconform.amqp.framing``
cuts from each direction (bytes kept exactly as they came), a frame's performative decoded
with the kit's AMQP decoder (``sbconform.amqp.values``), and one re-encoded with
python-qpid-proton's codec (``proton.Data``) when the proxy must change it (the CBS
exchange, the upstream host name).
"""

from __future__ import annotations

import struct
from typing import Any

from proton import Data, Described

from ..amqp import values
from ..amqp.framing import (  # noqa: F401  (the framing lives in sbconform.amqp; re-exported for the proxy's modules)
    ATTACH, BEGIN, CLOSE, DETACH, DISPOSITION, END, FLOW, MAX_FRAME, NAMES, OPEN, SASL_CHALLENGE, SASL_INIT,
    SASL_MECHANISMS, SASL_OUTCOME, SASL_RESPONSE, TRANSFER, Frame, FrameError, Splitter, _FRAME)


def decode(frame: Frame) -> tuple[int | None, list, memoryview]:
    """(descriptor code, fields, payload) of a frame; (None, [], empty) for an empty
    (heartbeat) frame. Raises FrameError if the body is not a described list. Fields
    are plain Python values (``values.decode``); use ``decode_typed`` to change and re-encode."""
    body = frame.body
    if not len(body):
        return None, [], body
    try:
        value, used = values.decode(body, 0)
    except (IndexError, struct.error, ValueError) as error:  # values.WireError is a ValueError
        raise FrameError(f"undecodable performative: {error}") from None
    if not isinstance(value, values.Described) or not isinstance(value.value, list):
        raise FrameError("the frame body is not a described list")
    descriptor = value.descriptor
    code = descriptor if isinstance(descriptor, int) and not isinstance(descriptor, bool) else None
    return code, value.value, body[used:]


def decode_typed(frame: Frame) -> tuple[int | None, list, memoryview]:
    """As ``decode``, with proton's typed values (uint, symbol...), for frames the proxy
    changes and re-encodes (``encode_frame``)."""
    body = frame.body
    data = Data()
    try:
        used = data.decode(bytes(body))
        data.rewind()
        data.next()
        value = data.get_object()
    except Exception as error:  # proton raises its own DataException and others
        raise FrameError(f"undecodable performative: {error}") from None
    if not isinstance(value, Described) or not isinstance(value.value, list):
        raise FrameError("the frame body is not a described list")
    value = _own(value)
    return int(value.descriptor), value.value, body[used:]


def with_payload(frame: Frame, payload_at: int, payload: bytes) -> bytes:
    """The frame with its performative bytes kept as they are and a new payload (a
    transfer's message) from body offset ``payload_at``."""
    head = frame.raw[8:frame.doff * 4]
    perf = bytes(frame.body[:payload_at])
    size = 8 + len(head) + len(perf) + len(payload)
    return _FRAME.pack(size, frame.doff, frame.type, frame.channel) + head + perf + payload


def _own(value: Any) -> Any:
    """``value`` with every binary copied out: proton's ``get_object`` returns binaries as
    memoryviews into the ``Data``'s own memory, which is freed with it."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, Described):
        return Described(value.descriptor, _own(value.value))
    if isinstance(value, list):
        return [_own(v) for v in value]
    if isinstance(value, dict):
        return {_own(k): _own(v) for k, v in value.items()}
    return value


def field(fields: list, index: int, default: Any = None) -> Any:
    return fields[index] if index < len(fields) and fields[index] is not None else default


def encode_frame(frame: Frame, code: int, fields: list, payload: bytes = b"") -> bytes:
    """A frame like ``frame`` (type, channel, extended header) with a new performative."""
    data = Data()
    data.put_object(Described(_ulong(code), fields))
    body = data.encode() + bytes(payload)
    head = frame.raw[8:frame.doff * 4]
    size = 8 + len(head) + len(body)
    return _FRAME.pack(size, frame.doff, frame.type, frame.channel) + head + body


def _ulong(code: int):
    from proton import ulong

    return ulong(code)


def peek(frame: Frame) -> tuple[int | None, int | None]:
    """(descriptor code, first field as an unsigned integer or None) read straight from the
    bytes, without decoding the performative: cheap enough for every frame. (None, None)
    for a header, an empty frame or anything unexpected."""
    if frame.header:
        return None, None
    body = frame.body
    n = len(body)
    # the usual encoding: 0x00 0x53 <code> then the fields' list (AMQP 1.0 part 1.2)
    if n < 4 or body[0] != 0x00 or body[1] != 0x53:
        return None, None
    code, kind = body[2], body[3]
    first_at = 6 if kind == 0xC0 else 12 if kind == 0xD0 else None
    if first_at is None or first_at >= n or not any(body[first_at - 4:first_at] if kind == 0xD0 else body[5:6]):
        return code, None  # an empty list, or not a list
    try:
        first, _ = values.decode(body, first_at)
    except (ValueError, IndexError, struct.error):
        return code, None
    return code, first if isinstance(first, int) and not isinstance(first, bool) else None


def summary(frame: Frame, limit: int = 96) -> str:
    """A short description of a frame for events the proxy cannot interpret."""
    if frame.header:
        return f"protocol header {frame.raw.hex()}"
    head = f"frame type {frame.type} channel {frame.channel} size {len(frame.raw)}"
    try:
        code, fields, payload = decode(frame)
        name = NAMES.get(code, f"descriptor {code}")
        return f"{head}: {name} {str(fields)[:limit]}" + (f" + {len(payload)} payload bytes" if len(payload) else "")
    except FrameError as error:
        return f"{head}: {error}; first bytes {frame.raw[8:8 + 32].hex()}"
