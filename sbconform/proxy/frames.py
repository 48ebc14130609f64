"""AMQP 1.0 frames as the proxy sees them: split a byte stream into protocol headers and
whole frames (bytes kept exactly as they came), decode a frame's performative with
the kit's AMQP decoder (``sbconform.amqp.values.decode``), and re-encode one with
python-qpid-proton's codec (``proton.Data``) when the proxy must change it (the CBS
exchange, the upstream host name).

AMQP 1.0 framing (OASIS AMQP 1.0, part 2.3): a protocol header is ``AMQP`` + 4 bytes; a
frame is ``size:uint32 doff:uint8 type:uint8 channel:uint16``, then ``doff*4 - 8`` bytes
of extended header, then the body: a performative (a described list) and, for a
transfer, the payload (message bytes) up to ``size``. Type 0 is an AMQP frame, 1 SASL.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from proton import Data, Described

from ..amqp import values

_FRAME = struct.Struct(">IBBH")

#: performative descriptor codes (part 2.7)
OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
SASL_MECHANISMS, SASL_INIT, SASL_CHALLENGE, SASL_RESPONSE, SASL_OUTCOME = range(0x40, 0x45)
NAMES = {OPEN: "open", BEGIN: "begin", ATTACH: "attach", FLOW: "flow", TRANSFER: "transfer", DISPOSITION: "disposition",
         DETACH: "detach", END: "end", CLOSE: "close", SASL_MECHANISMS: "sasl-mechanisms", SASL_INIT: "sasl-init",
         SASL_CHALLENGE: "sasl-challenge", SASL_RESPONSE: "sasl-response", SASL_OUTCOME: "sasl-outcome"}

#: the largest frame the proxy accepts (a connection sending a bigger one is closed):
#: Service Bus Premium allows 100 MB messages, which the SDKs split into frames of the
#: negotiated max-frame-size (at most a few MB in practice)
MAX_FRAME = 64 * 1024 * 1024


class FrameError(ValueError):
    """The byte stream is not AMQP framing (the connection cannot be followed)."""


@dataclass
class Frame:
    """One unit of the stream: a protocol header (``header`` True) or a frame."""

    raw: bytes
    header: bool = False
    type: int = 0
    channel: int = 0
    doff: int = 2

    @property
    def body(self) -> memoryview:
        return memoryview(self.raw)[self.doff * 4:]


class Splitter:
    """Incremental splitter of one direction of a connection. ``feed(data)`` returns the
    whole units now available; a partial frame waits for its remaining bytes."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.buf = bytearray()
        self.max_frame = max_frame

    def pending(self) -> int:
        return len(self.buf)

    def feed(self, data: bytes) -> list[Frame]:
        buf = self.buf
        buf += data
        out: list[Frame] = []
        pos, n = 0, len(buf)
        while n - pos >= 8:
            if buf[pos:pos + 4] == b"AMQP":
                out.append(Frame(bytes(buf[pos:pos + 8]), header=True))
                pos += 8
                continue
            size, doff, ftype, channel = _FRAME.unpack_from(buf, pos)
            if size < 8 or doff < 2 or doff * 4 > size:
                raise FrameError(f"bad frame header (size {size}, doff {doff})")
            if size > self.max_frame:
                raise FrameError(f"frame of {size} bytes exceeds the proxy's limit of {self.max_frame}")
            if n - pos < size:
                break
            out.append(Frame(bytes(buf[pos:pos + size]), False, ftype, channel, doff))
            pos += size
        if pos:
            del buf[:pos]
        return out


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
