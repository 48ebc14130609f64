"""AMQP 1.0 framing (OASIS AMQP 1.0, part 2.3), in one place for every reader of raw bytes
(the server's ``wire.FrameScanner``, the recording proxy's relay): a protocol header is
``AMQP`` + 4 bytes; a frame is ``size:uint32 doff:uint8 type:uint8 channel:uint16``, then
``doff*4 - 8`` bytes of extended header, then the body: a performative (a described list)
and, for a transfer, the payload (message bytes) up to ``size``. Type 0 is an AMQP frame,
1 SASL. ``Splitter`` cuts a stream into whole frames, bytes kept exactly as they came.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

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
