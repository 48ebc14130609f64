"""A small AMQP 1.0 decoder (OASIS AMQP 1.0 part 1, "Types"), for the proxy's hot path.

python-qpid-proton's ``Data.get_object`` builds every value through Python-level calls
per node and is the proxy's largest cost per frame; this decoder reads the same encoding
straight from the bytes. Values: null -> None, booleans, integers (all widths; timestamps
as ms), floats, char -> str, uuid -> ``uuid.UUID``, binary -> bytes, string and symbol ->
str, list and array -> list, map -> dict, described -> ``proton.Described`` (so code
may test ``isinstance(x, Described)`` whichever decoder made it). Decimals come back as
their raw bytes. Malformed input raises ``CodecError``. Encoding (the rare frames the proxy
changes) stays with proton.
"""

from __future__ import annotations

import struct
import uuid

from proton import Described

_B = struct.Struct(">b")
_H = struct.Struct(">H")
_h = struct.Struct(">h")
_I = struct.Struct(">I")
_i = struct.Struct(">i")
_Q = struct.Struct(">Q")
_q = struct.Struct(">q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")


class CodecError(ValueError):
    pass


def decode_value(buf: bytes, pos: int = 0):
    """(value, position after it)."""
    if pos >= len(buf):
        raise CodecError("truncated value")
    code = buf[pos]
    if code == 0x00:
        descriptor, pos = decode_value(buf, pos + 1)
        value, pos = decode_value(buf, pos)
        return Described(descriptor, value), pos
    return _by_code(code, buf, pos + 1)


def _need(buf: bytes, end: int) -> None:
    if end > len(buf):
        raise CodecError("truncated value")


def _by_code(code: int, buf: bytes, pos: int):
    # the codes frames and Service Bus messages are mostly made of, first
    if code == 0x40:
        return None, pos
    if code == 0x53 or code == 0x52 or code == 0x50:
        if pos >= len(buf):
            raise CodecError("truncated value")
        return buf[pos], pos + 1
    if code == 0x41:
        return True, pos
    if code == 0x42:
        return False, pos
    if code == 0x43 or code == 0x44:
        return 0, pos
    if code == 0xA1 or code == 0xA3 or code == 0xA0:
        if pos >= len(buf):
            raise CodecError("truncated value")
        end = pos + 1 + buf[pos]
        if end > len(buf):
            raise CodecError("truncated value")
        raw = buf[pos + 1:end]
        if code == 0xA0:
            return bytes(raw), end
        try:
            return str(raw, "utf-8"), end
        except UnicodeDecodeError:
            raise CodecError("a string that is not UTF-8") from None
    fixed = _FIXED.get(code)
    if fixed is not None:
        width, read = fixed
        _need(buf, pos + width)
        return read(buf, pos), pos + width
    if code in (0xB0, 0xB1, 0xB3):
        _need(buf, pos + 4)
        size, pos = _I.unpack_from(buf, pos)[0], pos + 4
        end = pos + size
        _need(buf, end)
        raw = bytes(buf[pos:end])
        if code == 0xB0:
            return raw, end
        try:
            return raw.decode("utf-8"), end
        except UnicodeDecodeError:
            raise CodecError("a string that is not UTF-8") from None
    if code == 0x45:
        return [], pos
    if code in (0xC0, 0xC1, 0xD0, 0xD1):
        if code < 0xD0:
            _need(buf, pos + 2)
            size, count, first = buf[pos], buf[pos + 1], pos + 2
            end = pos + 1 + size
        else:
            _need(buf, pos + 8)
            size, count = _I.unpack_from(buf, pos)[0], _I.unpack_from(buf, pos + 4)[0]
            first, end = pos + 8, pos + 4 + size
        _need(buf, end)
        items = []
        p = first
        for _ in range(count):
            if p >= end:
                raise CodecError("a compound value's items overrun it")
            c = buf[p]
            if c == 0x00:
                v, p = decode_value(buf, p)
            else:
                v, p = _by_code(c, buf, p + 1)
            items.append(v)
        if code in (0xC1, 0xD1):
            if count % 2:
                raise CodecError("a map with an odd number of items")
            try:
                return {items[i]: items[i + 1] for i in range(0, count, 2)}, end
            except TypeError:  # an unhashable key
                raise CodecError("a map key that is not a scalar") from None
        return items, end
    if code in (0xE0, 0xF0):
        if code == 0xE0:
            _need(buf, pos + 2)
            size, count, first = buf[pos], buf[pos + 1], pos + 2
            end = pos + 1 + size
        else:
            _need(buf, pos + 8)
            size, count = _I.unpack_from(buf, pos)[0], _I.unpack_from(buf, pos + 4)[0]
            first, end = pos + 8, pos + 4 + size
        _need(buf, end)
        p = first
        descriptor = None
        described = buf[p] == 0x00
        if described:
            descriptor, p = decode_value(buf, p + 1)
        _need(buf, p + 1)
        element = buf[p]
        p += 1
        items = []
        for _ in range(count):
            if p > end:
                raise CodecError("an array's items overrun it")
            v, p = _by_code(element, buf, p)
            items.append(Described(descriptor, v) if described else v)
        return items, end
    raise CodecError(f"unknown AMQP type code 0x{code:02x}")


_FIXED = {
    0x40: (0, lambda b, p: None),
    0x41: (0, lambda b, p: True),
    0x42: (0, lambda b, p: False),
    0x56: (1, lambda b, p: b[p] != 0),
    0x43: (0, lambda b, p: 0),
    0x44: (0, lambda b, p: 0),
    0x50: (1, lambda b, p: b[p]),
    0x52: (1, lambda b, p: b[p]),
    0x53: (1, lambda b, p: b[p]),
    0x51: (1, lambda b, p: _B.unpack_from(b, p)[0]),
    0x54: (1, lambda b, p: _B.unpack_from(b, p)[0]),
    0x55: (1, lambda b, p: _B.unpack_from(b, p)[0]),
    0x60: (2, lambda b, p: _H.unpack_from(b, p)[0]),
    0x61: (2, lambda b, p: _h.unpack_from(b, p)[0]),
    0x70: (4, lambda b, p: _I.unpack_from(b, p)[0]),
    0x71: (4, lambda b, p: _i.unpack_from(b, p)[0]),
    0x72: (4, lambda b, p: _f.unpack_from(b, p)[0]),
    0x73: (4, lambda b, p: chr(_I.unpack_from(b, p)[0]) if _I.unpack_from(b, p)[0] < 0x110000 else "\ufffd"),
    0x74: (4, lambda b, p: bytes(b[p:p + 4])),
    0x80: (8, lambda b, p: _Q.unpack_from(b, p)[0]),
    0x81: (8, lambda b, p: _q.unpack_from(b, p)[0]),
    0x82: (8, lambda b, p: _d.unpack_from(b, p)[0]),
    0x83: (8, lambda b, p: _q.unpack_from(b, p)[0]),
    0x84: (8, lambda b, p: bytes(b[p:p + 8])),
    0x94: (16, lambda b, p: bytes(b[p:p + 16])),
    0x98: (16, lambda b, p: uuid.UUID(bytes=bytes(b[p:p + 16]))),
}
