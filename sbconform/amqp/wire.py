"""Just enough of the AMQP 1.0 type system to read what proton does not expose.

python-qpid-proton's Python API hides a transfer's ``message-format`` field, and a batch
of the azure-servicebus SDK is recognised by exactly that field (``0x80013700``), never
by guessing from the payload. So every byte a client sends passes through a
``FrameScanner`` before proton sees it: it follows the frame boundaries, remembers which
link name each attach gave a handle, and records the message format of each transfer
under (link name, delivery tag). ``data_sections`` splits a batch envelope into the
encoded messages its data sections carry.

Malformed input never raises out of here: the scanner gives up on a connection
(``broken``) and proton, seeing the same bytes, answers with its framing error.
"""

from __future__ import annotations

import struct

from .framing import _FRAME, ATTACH, DETACH, END, TRANSFER  # noqa: F401  (the framing lives in one place)

BATCH_FORMAT = 0x80013700

_U32 = struct.Struct(">I")

#: the performatives the scanner follows
_FOLLOWED = frozenset((TRANSFER, ATTACH, DETACH, END))
DATA_SECTION = 0x75
AMQP_SEQUENCE_SECTION, AMQP_VALUE_SECTION = 0x76, 0x77


from .values import WireError, _width, skip  # noqa: F401  (the primitives live with the codec)


def read_uint(buf: bytes | memoryview, pos: int) -> int | None:
    code = buf[pos]
    if code in (0x40,):
        return None
    if code in (0x43, 0x44):
        return 0
    if code in (0x52, 0x53, 0x50):
        return buf[pos + 1]
    if code == 0x70:
        return _U32.unpack_from(buf, pos + 1)[0]
    if code == 0x80:
        return struct.unpack_from(">Q", buf, pos + 1)[0]
    raise WireError(f"expected an unsigned integer, found code 0x{code:02x}")


def read_bytes(buf: bytes | memoryview, pos: int) -> bytes | None:
    code = buf[pos]
    if code == 0x40:
        return None
    head, size = _width(code, buf, pos + 1)
    if code not in (0xA0, 0xB0, 0xA1, 0xB1, 0xA3, 0xB3):
        raise WireError(f"expected binary or string, found code 0x{code:02x}")
    start = pos + 1 + head
    if start + size > len(buf):
        raise WireError("truncated value")
    return bytes(buf[start:start + size])


def described_list(buf: bytes | memoryview, pos: int) -> tuple[int, list[int], int]:
    """(descriptor code, positions of the list's fields, end) of a described list."""
    if buf[pos] != 0x00:
        raise WireError("expected a described value")
    descriptor = read_uint(buf, pos + 1)
    pos = skip(buf, pos + 1)
    code = buf[pos]
    if code == 0x45:
        return descriptor or 0, [], pos + 1
    if code == 0xC0:
        size, count, first = buf[pos + 1], buf[pos + 2], pos + 3
        end = pos + 2 + size
    elif code == 0xD0:
        size, count = _U32.unpack_from(buf, pos + 1)[0], _U32.unpack_from(buf, pos + 5)[0]
        first, end = pos + 9, pos + 5 + size
    else:
        raise WireError(f"expected a list, found code 0x{code:02x}")
    fields = []
    p = first
    for _ in range(count):
        if p >= min(end, len(buf)):
            break
        fields.append(p)
        p = skip(buf, p)
    return descriptor or 0, fields, end


def data_sections(payload: bytes) -> list[bytes]:
    """The contents of the data sections of an encoded message (a batch's messages). A batch's
    body is data sections, at least one: another body section (amqp-sequence, amqp-value) or none
    is a ``WireError`` (its other sections, the envelope's properties and annotations, are not read)."""
    out = []
    pos = 0
    view = memoryview(payload)
    while pos < len(view):
        if view[pos] != 0x00:
            raise WireError(f"byte {pos}: expected a message section")
        descriptor = read_uint(view, pos + 1)
        value = skip(view, pos + 1)
        end = skip(view, value)
        if descriptor == DATA_SECTION:
            out.append(read_bytes(view, value) or b"")
        elif descriptor in (AMQP_SEQUENCE_SECTION, AMQP_VALUE_SECTION):
            raise WireError("a batch holds its messages in data sections, not an amqp-sequence or amqp-value body")
        pos = end
    if not out:
        raise WireError("a batch without a data section: no message in it")
    return out


class FrameScanner:
    """Follows one connection's incoming bytes; records each transfer's message format."""

    #: bytes of a frame read to find the performative's first fields
    PEEK = 256

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.skip_bytes = 0
        self.names: dict[tuple[int, int], str] = {}  # (channel, handle) -> link name
        self.handles: dict[int, set[int]] = {}  # channel -> the handles ``names`` holds on it (END forgets them)
        self.formats: dict[tuple[str, bytes], int] = {}  # (link name, tag) -> message format
        self.broken = False

    def feed(self, data: bytes) -> None:
        if self.broken:
            return
        try:
            self._feed(data)
        except (WireError, IndexError, struct.error, UnicodeDecodeError):
            self.broken = True
            self.buffer.clear()

    def _feed(self, data: bytes) -> None:
        if self.skip_bytes:
            if len(data) <= self.skip_bytes:
                self.skip_bytes -= len(data)
                return
            data = data[self.skip_bytes:]
            self.skip_bytes = 0
        buf = self.buffer
        buf += data
        pos = 0
        n = len(buf)
        while n - pos >= 8:
            if buf[pos:pos + 4] == b"AMQP":
                pos += 8
                continue
            size, doff, ftype, channel = _FRAME.unpack_from(buf, pos)
            if size < 8 or doff < 2:
                raise WireError("bad frame header")
            want = min(size, self.PEEK)
            if n - pos < want:
                break
            if ftype == 0 and size > doff * 4:
                self._performative(buf, pos + doff * 4, pos + want, channel)
            if n - pos >= size:
                pos += size
            else:
                self.skip_bytes = size - (n - pos)
                pos = n
                break
        del buf[:pos]

    def _performative(self, buf: bytearray, start: int, end: int, channel: int) -> None:
        """The performative in ``buf[start:end]`` (its first bytes at most: ``PEEK``)."""
        if end - start > 2 and buf[start] == 0x00 and buf[start + 1] == 0x53 and buf[start + 2] not in _FOLLOWED:
            return  # (flow, disposition, ...: a small-ulong descriptor read in place, the list not parsed)
        body = memoryview(buf)[start:end]
        try:
            descriptor, fields, _ = described_list(body, 0)
        except (WireError, IndexError, struct.error):
            return  # cut short by PEEK, or not ours to judge: proton will
        if descriptor == TRANSFER and len(fields) >= 3:
            handle = read_uint(body, fields[0])
            tag = read_bytes(body, fields[2])
            if tag is None:
                return  # a continuation frame
            fmt = read_uint(body, fields[3]) if len(fields) >= 4 else None
            name = self.names.get((channel, handle or 0))
            if name is not None and len(self.formats) < 100_000:
                self.formats[(name, tag)] = fmt or 0
        elif descriptor == ATTACH and len(fields) >= 2:
            name = read_bytes(body, fields[0])
            handle = read_uint(body, fields[1])
            if name is not None and len(self.names) < 100_000:
                self.names[(channel, handle or 0)] = name.decode("utf-8", "replace")
                self.handles.setdefault(channel, set()).add(handle or 0)
        elif descriptor == DETACH and len(fields) >= 1:  # the handle is free again: forget it
            handle = read_uint(body, fields[0]) or 0
            self.names.pop((channel, handle), None)
            self.handles.get(channel, set()).discard(handle)
        elif descriptor == END:  # the session's links end with it (AMQP 1.0 part 2, 2.5.5): forget them all
            for handle in self.handles.pop(channel, ()):
                self.names.pop((channel, handle), None)

    def message_format(self, link_name: str, tag: bytes) -> int:
        return self.formats.pop((link_name, tag), 0)
