"""AMQP 1.0 values read in one pass (the recording proxy's hot path): ``decode``.

``values.read`` measures each compound before reading it; ``decode`` reads plain Python
values in one pass over the bytes. Both read the encodings of OASIS AMQP 1.0 part 1 "Types".
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, NamedTuple

from .values import _U32, WireError


class Described(NamedTuple):
    """A described value as ``decode`` returns it (a tuple, like ``read``'s ``(descriptor, value)``)."""

    descriptor: Any
    value: Any


_U16, _S16, _S32, _U64, _S64 = struct.Struct(">H"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">Q"), struct.Struct(">q")
_S8, _F32, _F64 = struct.Struct(">b"), struct.Struct(">f"), struct.Struct(">d")


def _char(b, p: int) -> str:
    n = _U32.unpack_from(b, p)[0]
    return chr(n) if n < 0x110000 else "\ufffd"


#: fixed-width codes: (width, reader) -- timestamps (0x83) as ms since the epoch
_DECODE_FIXED = {
    0x56: (1, lambda b, p: b[p] != 0), 0x51: (1, lambda b, p: _S8.unpack_from(b, p)[0]),
    0x54: (1, lambda b, p: _S8.unpack_from(b, p)[0]), 0x55: (1, lambda b, p: _S8.unpack_from(b, p)[0]),
    0x60: (2, lambda b, p: _U16.unpack_from(b, p)[0]), 0x61: (2, lambda b, p: _S16.unpack_from(b, p)[0]),
    0x70: (4, lambda b, p: _U32.unpack_from(b, p)[0]), 0x71: (4, lambda b, p: _S32.unpack_from(b, p)[0]),
    0x72: (4, lambda b, p: _F32.unpack_from(b, p)[0]), 0x73: (4, _char), 0x74: (4, lambda b, p: bytes(b[p:p + 4])),
    0x80: (8, lambda b, p: _U64.unpack_from(b, p)[0]), 0x81: (8, lambda b, p: _S64.unpack_from(b, p)[0]),
    0x82: (8, lambda b, p: _F64.unpack_from(b, p)[0]), 0x83: (8, lambda b, p: _S64.unpack_from(b, p)[0]),
    0x84: (8, lambda b, p: bytes(b[p:p + 8])), 0x94: (16, lambda b, p: bytes(b[p:p + 16])),
    0x98: (16, lambda b, p: uuid.UUID(bytes=bytes(b[p:p + 16]))),
}


def decode(buf, pos: int = 0) -> tuple[Any, int]:
    """(value, end) of the value at ``pos``, in one pass over the bytes (``read`` measures
    each compound first): plain Python values, described ones as ``Described``, arrays as
    lists, timestamps as ms since the epoch, decimals as their raw bytes, symbols as ``str``.
    Malformed input raises ``WireError``."""
    if pos >= len(buf):
        raise WireError("truncated value")
    code = buf[pos]
    if code == 0x00:
        descriptor, pos = decode(buf, pos + 1)
        value, pos = decode(buf, pos)
        return Described(descriptor, value), pos
    return _decode_code(code, buf, pos + 1)


def _decode_code(code: int, buf, pos: int) -> tuple[Any, int]:
    n = len(buf)
    if code == 0x40:  # the codes frames and messages are mostly made of, first
        return None, pos
    if code == 0x53 or code == 0x52 or code == 0x50:
        if pos >= n:
            raise WireError("truncated value")
        return buf[pos], pos + 1
    if code == 0x41 or code == 0x42:
        return code == 0x41, pos
    if code == 0x43 or code == 0x44:
        return 0, pos
    if code == 0x45:
        return [], pos
    if 0xA0 <= code <= 0xB3:  # binary, string, symbol
        if code >= 0xB0:
            if pos + 4 > n:
                raise WireError("truncated value")
            start = pos + 4
            end = start + _U32.unpack_from(buf, pos)[0]
        else:
            if pos >= n:
                raise WireError("truncated value")
            start = pos + 1
            end = start + buf[pos]
        if end > n or code & 0x0F not in (0, 1, 3):
            raise WireError("truncated value" if end > n else f"unknown AMQP type code 0x{code:02x}")
        raw = bytes(buf[start:end])
        if code & 0x0F == 0:
            return raw, end
        try:
            return raw.decode("utf-8"), end
        except UnicodeDecodeError:
            raise WireError("a string that is not UTF-8") from None
    fixed = _DECODE_FIXED.get(code)
    if fixed is not None:
        width, reader = fixed
        if pos + width > n:
            raise WireError("truncated value")
        return reader(buf, pos), pos + width
    if code in (0xC0, 0xC1, 0xD0, 0xD1, 0xE0, 0xF0):
        if code & 0xF0 in (0xC0, 0xE0):
            if pos + 2 > n:
                raise WireError("truncated value")
            count, first, end = buf[pos + 1], pos + 2, pos + 1 + buf[pos]
        else:
            if pos + 8 > n:
                raise WireError("truncated value")
            count, first, end = _U32.unpack_from(buf, pos + 4)[0], pos + 8, pos + 4 + _U32.unpack_from(buf, pos)[0]
        if end > n:
            raise WireError("truncated value")
        if code >= 0xE0:
            return _decode_array(buf, first, end, count), end
        items = []
        append = items.append
        p = first
        for _ in range(count):
            if p >= end:
                raise WireError("a compound value's items overrun it")
            c = buf[p]  # the commonest items inline (a call per item is most of the cost)
            if c == 0x40:
                append(None)
                p += 1
            elif (c == 0xA1 or c == 0xA3) and p + 1 < end and p + 2 + buf[p + 1] <= end:
                q = p + 2 + buf[p + 1]
                try:
                    append(str(buf[p + 2:q], "utf-8"))
                except UnicodeDecodeError:
                    raise WireError("a string that is not UTF-8") from None
                p = q
            elif (c == 0x52 or c == 0x53 or c == 0x50) and p + 1 < end:
                append(buf[p + 1])
                p += 2
            elif c == 0x41 or c == 0x42:
                append(c == 0x41)
                p += 1
            elif c == 0x43 or c == 0x44:
                append(0)
                p += 1
            elif (c == 0x83 or c == 0x81) and p + 9 <= end:
                append(_S64.unpack_from(buf, p + 1)[0])
                p += 9
            elif c == 0x70 and p + 5 <= end:
                append(_U32.unpack_from(buf, p + 1)[0])
                p += 5
            elif c == 0xA0 and p + 1 < end and p + 2 + buf[p + 1] <= end:
                q = p + 2 + buf[p + 1]
                append(bytes(buf[p + 2:q]))
                p = q
            else:
                item, p = decode(buf, p)
                append(item)
        if code & 0x01:  # a map
            if count % 2:
                raise WireError("a map with an odd number of items")
            try:
                return {items[i]: items[i + 1] for i in range(0, count, 2)}, end
            except TypeError:
                raise WireError("a map key that is not a scalar") from None
        return items, end
    raise WireError(f"unknown AMQP type code 0x{code:02x}")


def _decode_array(buf, p: int, end: int, count: int) -> list:
    descriptor = None
    described = p < end and buf[p] == 0x00
    if described:
        descriptor, p = decode(buf, p + 1)
    if p >= end:
        raise WireError("truncated value")
    element = buf[p]
    p += 1
    items = []
    for _ in range(count):
        if p > end:
            raise WireError("an array's items overrun it")
        item, p = _decode_code(element, buf, p)
        items.append(Described(descriptor, item) if described else item)
    return items
