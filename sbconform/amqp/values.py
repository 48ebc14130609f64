"""AMQP 1.0 primitive values (OASIS AMQP 1.0, part 1 "Types"): read and write.

Reading keeps the AMQP type where Python has no distinct one: a ``Typed(code, value)``
for ulong / uint / symbol / timestamp and the like would be heavy, so ``read`` returns
plain Python values and ``read_typed`` returns ``(type name, value)`` for the few places
that must know (message-id, correlation-id). Writing covers the types the broker itself
emits. Everything the broker passes through is copied as raw bytes, never re-encoded.
"""

from __future__ import annotations

import datetime as dt
import struct
import uuid
from typing import Any


_U32 = struct.Struct(">I")


class WireError(ValueError):
    pass


def in_wire_words(error: Exception) -> str:
    """What a decoding failure means for the sender, not Python's name for it (the description goes
    back in the rejected outcome)."""
    if isinstance(error, UnicodeDecodeError):
        return f"a string or symbol is not valid UTF-8 (byte 0x{error.object[error.start]:02x})"
    if isinstance(error, (IndexError, struct.error)):
        return "a value is cut short"
    if "chr()" in str(error):
        return "a char is not a Unicode code point"
    return f"a value cannot be read ({str(error)[:80]})"


def _width(code: int, buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(header bytes after the code, payload bytes) of the value whose code is ``code``."""
    hi = code >> 4
    if hi == 0x4:
        return 0, 0
    if hi == 0x5:
        return 0, 1
    if hi == 0x6:
        return 0, 2
    if hi == 0x7:
        return 0, 4
    if hi == 0x8:
        return 0, 8
    if hi == 0x9:
        return 0, 16
    if hi in (0xA, 0xC, 0xE):
        if pos >= len(buf):
            raise WireError("truncated value")
        return 1, buf[pos]
    if hi in (0xB, 0xD, 0xF):
        if pos + 4 > len(buf):
            raise WireError("truncated value")
        return 4, _U32.unpack_from(buf, pos)[0]
    raise WireError(f"unknown AMQP type code 0x{code:02x}")


#: size of the values of fixed width, by type code (code byte included)
_FIXED = {code: 1 + {0x4: 0, 0x5: 1, 0x6: 2, 0x7: 4, 0x8: 8, 0x9: 16}[code >> 4]
          for code in range(0x40, 0xA0) if code >> 4 in (0x4, 0x5, 0x6, 0x7, 0x8, 0x9)}


#: codes whose value is a one-byte size then that many bytes (vbin8, str8, sym8, list8, map8,
#: array8) and those with a four-byte size (their 32-bit forms)
_SIZE8 = frozenset(c for c in range(0x100) if c >> 4 in (0xA, 0xC, 0xE))
_SIZE32 = frozenset(c for c in range(0x100) if c >> 4 in (0xB, 0xD, 0xF))


def skip(buf: bytes | memoryview, pos: int) -> int:
    """The position just after the value starting at ``pos``."""
    n = len(buf)
    if pos >= n:
        raise WireError("truncated value")
    code = buf[pos]
    fixed = _FIXED.get(code)
    if fixed is not None:
        end = pos + fixed
    elif code in _SIZE8:
        if pos + 1 >= n:
            raise WireError("truncated value")
        end = pos + 2 + buf[pos + 1]
    elif code in _SIZE32:
        if pos + 5 > n:
            raise WireError("truncated value")
        end = pos + 5 + _U32.unpack_from(buf, pos + 1)[0]
    elif code == 0x00:  # described: descriptor, then the value
        return skip(buf, skip(buf, pos + 1))
    else:
        raise WireError(f"unknown AMQP type code 0x{code:02x}")
    if end > n:
        raise WireError("truncated value")
    return end


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
#: DateTime.MaxValue in AMQP milliseconds (Microsoft.Azure.Amqp's TimeStampEncoding.MaxMilliseconds), and as Python
#: holds it (a microsecond's resolution)
MAX_TIMESTAMP_MS = 253_402_300_799_999
_DATETIME_MAX = dt.datetime.max.replace(tzinfo=dt.timezone.utc)


def timestamp_datetime(ms: int) -> dt.datetime:
    """An AMQP timestamp as Service Bus reads it: Microsoft.Azure.Amqp's TimeStampEncoding.ToDateTime reads a negative
    one as the epoch and one at or past DateTime.MaxValue's milliseconds as DateTime.MaxValue
    (https://github.com/Azure/azure-amqp, src/Encoding/TimeStampEncoding.cs). Every 64-bit value is a date: none is
    refused (the message keeps the bytes as sent; this is the date filters see)."""
    if ms >= MAX_TIMESTAMP_MS:
        return _DATETIME_MAX
    return _EPOCH + dt.timedelta(milliseconds=max(ms, 0))


#: Service Bus's AMQP encodings of .NET values AMQP has no type for (azure-sdk-for-net, AmqpMessageConverter's
#: TryGetAmqpObjectFromNetObject / TryGetNetObjectFromAmqpObject; the same table in Microsoft's "AMQP 1.0 in Service
#: Bus" type mapping): a TimeSpan is its Ticks as a long described by com.microsoft:timespan; a DateTimeOffset its
#: UtcTicks (from 0001-01-01) described by com.microsoft:datetime-offset; a Uri its AbsoluteUri as a string described
#: by com.microsoft:uri.
TIMESPAN, DATETIME_OFFSET, URI = "com.microsoft:timespan", "com.microsoft:datetime-offset", "com.microsoft:uri"
_DOTNET_EPOCH_TICKS = 621_355_968_000_000_000  # DateTime(1970, 1, 1).Ticks


def dotnet_value(descriptor: Any, inner: Any) -> Any:
    """The value a described application property stands for as rules see it (sbreference.timevalues' Span, Instant
    and Uri), or None for a described value that is none of Service Bus's (or one .NET could not read: a
    DateTimeOffset outside DateTime's range): such a one is kept, opaque, as sent."""
    from sbreference.timevalues import Instant, Span, Uri

    if not isinstance(descriptor, Symbol):
        return None
    if descriptor == TIMESPAN and type(inner) is int:  # (a long: read_typed's int; bool is not one)
        return Span(ticks=inner)
    if descriptor == DATETIME_OFFSET and type(inner) is int:
        try:
            return Instant(ticks=inner - _DOTNET_EPOCH_TICKS)
        except OverflowError:
            return None
    if descriptor == URI and type(inner) is str:
        return Uri(inner)
    return None


class Symbol(str):
    """An AMQP symbol (ASCII), distinct from a string."""


class ULong(int):
    """An AMQP ulong, distinct from a long."""


def _fixed(fmt: str, buf, pos: int):
    return struct.unpack_from(fmt, buf, pos)[0]


def read(buf, pos: int = 0) -> tuple[Any, int]:
    """(value, end) of the value at ``pos``."""
    kind, value, end = read_typed(buf, pos)
    return value, end


def read_typed(buf, pos: int = 0) -> tuple[str, Any, int]:
    """(AMQP type name, Python value, end) of the value at ``pos``."""
    if pos >= len(buf):
        raise WireError("truncated value")
    code = buf[pos]
    p = pos + 1
    if code == 0x00:
        _kind, descriptor, p = read_typed(buf, p)
        kind, value, end = read_typed(buf, p)
        return "described", (descriptor, value), end
    end = skip(buf, pos)
    if code == 0x40:
        return "null", None, end
    # the most frequent in Service Bus traffic first: strings, binaries, symbols
    if code == 0xA1:
        return "string", bytes(buf[p + 1:end]).decode("utf-8"), end
    if code == 0xA0:
        return "binary", bytes(buf[p + 1:end]), end
    if code == 0xA3:
        return "symbol", Symbol(bytes(buf[p + 1:end]).decode("ascii", "replace")), end
    if code == 0x41:
        return "boolean", True, end
    if code == 0x42:
        return "boolean", False, end
    if code == 0x56:
        return "boolean", buf[p] != 0, end
    if code == 0x50:
        return "ubyte", buf[p], end
    if code == 0x60:
        return "ushort", _fixed(">H", buf, p), end
    if code == 0x43:
        return "uint", 0, end
    if code == 0x52:
        return "uint", buf[p], end
    if code == 0x70:
        return "uint", _fixed(">I", buf, p), end
    if code == 0x44:
        return "ulong", ULong(0), end
    if code == 0x53:
        return "ulong", ULong(buf[p]), end
    if code == 0x80:
        return "ulong", ULong(_fixed(">Q", buf, p)), end
    if code == 0x51:
        return "byte", _fixed(">b", buf, p), end
    if code == 0x61:
        return "short", _fixed(">h", buf, p), end
    if code == 0x54:
        return "int", _fixed(">b", buf, p), end
    if code == 0x71:
        return "int", _fixed(">i", buf, p), end
    if code == 0x55:
        return "long", _fixed(">b", buf, p), end
    if code == 0x81:
        return "long", _fixed(">q", buf, p), end
    if code == 0x72:
        return "float", _fixed(">f", buf, p), end
    if code == 0x82:
        return "double", _fixed(">d", buf, p), end
    if code == 0x73:
        return "char", chr(_fixed(">I", buf, p)), end
    if code == 0x83:
        return "timestamp", timestamp_datetime(_fixed(">q", buf, p)), end
    if code == 0x98:
        return "uuid", uuid.UUID(bytes=bytes(buf[p:p + 16])), end
    if code in (0x74, 0x84, 0x94):
        return "decimal", bytes(buf[p:end]), end
    if code in (0xA0, 0xB0):
        head = 1 if code == 0xA0 else 4
        return "binary", bytes(buf[p + head:end]), end
    if code in (0xA1, 0xB1):
        head = 1 if code == 0xA1 else 4
        return "string", bytes(buf[p + head:end]).decode("utf-8"), end
    if code in (0xA3, 0xB3):
        head = 1 if code == 0xA3 else 4
        return "symbol", Symbol(bytes(buf[p + head:end]).decode("ascii", "replace")), end
    if code == 0x45:
        return "list", [], end
    if code in (0xC0, 0xD0, 0xC1, 0xD1):
        items = list(_items(buf, pos))
        if code in (0xC0, 0xD0):
            return "list", [read(buf, q)[0] for q in items], end
        out = {}
        for i in range(0, len(items) - 1, 2):
            key = read(buf, items[i])[0]
            out[_hashable(key)] = read(buf, items[i + 1])[0]
        return "map", out, end
    if code in (0xE0, 0xF0):
        return "array", bytes(buf[pos:end]), end  # kept encoded: arrays pass through untouched
    raise WireError(f"unknown AMQP type code 0x{code:02x}")


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(key)
    if isinstance(key, dict):
        return tuple(key.items())
    return key


def _items(buf, pos: int) -> list[int]:
    """Positions of the elements of the list or map at ``pos``."""
    return _bounds(buf, pos)[:-1]


def _bounds(buf, pos: int) -> list[int]:
    """Start of each element of the list or map at ``pos``, then the end of the last."""
    code = buf[pos]
    if code in (0xC0, 0xC1):
        count, first = buf[pos + 2], pos + 3
    elif code in (0xD0, 0xD1):
        count, first = _fixed(">I", buf, pos + 5), pos + 9
    elif code == 0x45:
        return [pos + 1]
    else:
        raise WireError(f"expected a list or map, found code 0x{code:02x}")
    end = skip(buf, pos)
    out = [first]
    p = first
    fixed = _FIXED.get
    for _ in range(count):
        if p >= end:
            raise WireError("a compound value shorter than its count")
        width = fixed(buf[p])  # (a fixed-width element is stepped over here: most of a properties list is nulls)
        p = p + width if width is not None else skip(buf, p)
        out.append(p)
    if p > end:
        raise WireError("a compound value longer than its size")
    return out


def elements(buf, pos: int) -> list[bytes]:
    """The raw encodings of the elements of the list or map at ``pos``."""
    b = _bounds(buf, pos)
    if isinstance(buf, bytes):  # (a slice of bytes is already bytes)
        return [buf[start:end] for start, end in zip(b, b[1:])]
    return [bytes(buf[start:end]) for start, end in zip(b, b[1:])]


# ------------------------------------------------------------------ writing
def null() -> bytes:
    return b"\x40"


def boolean(value: bool) -> bytes:
    return b"\x41" if value else b"\x42"


def uint(value: int) -> bytes:
    if value == 0:
        return b"\x43"
    if value < 256:
        return b"\x52" + bytes([value])
    return b"\x70" + struct.pack(">I", min(value, 0xFFFFFFFF))


def int32(value: int) -> bytes:
    if -128 <= value < 128:
        return b"\x54" + struct.pack(">b", value)
    return b"\x71" + struct.pack(">i", value)


def short(value: int) -> bytes:
    return b"\x61" + struct.pack(">h", value)


def long(value: int) -> bytes:
    if -128 <= value < 128:
        return b"\x55" + struct.pack(">b", value)
    return b"\x81" + struct.pack(">q", value)


def timestamp(epoch_ms: int) -> bytes:
    return b"\x83" + struct.pack(">q", epoch_ms)


def _variable(small: int, large: int, data: bytes) -> bytes:
    if len(data) < 256:
        return bytes([small, len(data)]) + data
    return bytes([large]) + struct.pack(">I", len(data)) + data


def string(value: str) -> bytes:
    return _variable(0xA1, 0xB1, value.encode("utf-8"))


def symbol(value: str) -> bytes:
    return _variable(0xA3, 0xB3, value.encode("ascii"))


def binary(value: bytes) -> bytes:
    return _variable(0xA0, 0xB0, bytes(value))


def uuid_(value: uuid.UUID) -> bytes:
    return b"\x98" + value.bytes


def compound(small: int, large: int, encoded: list[bytes], count: int | None = None) -> bytes:
    """A list or map of ``count`` elements (default: one per item of ``encoded``)."""
    body = b"".join(encoded)
    count = len(encoded) if count is None else count
    if len(body) + 1 < 256 and count < 256:
        return bytes([small, len(body) + 1, count]) + body
    return bytes([large]) + struct.pack(">II", len(body) + 4, count) + body


def map_entries(entries: list[bytes]) -> bytes:
    """A map from its entries, each an encoded key followed by its encoded value."""
    return compound(0xC1, 0xD1, entries, 2 * len(entries))


def list_(encoded: list[bytes]) -> bytes:
    return compound(0xC0, 0xD0, encoded) if encoded else b"\x45"


def map_(encoded: list[bytes]) -> bytes:
    """A map from its keys and values, each already encoded, alternating."""
    return compound(0xC1, 0xD1, encoded)


#: python-qpid-proton's typed values (subclasses of int, float, str, bytes), by class name: the
#: AMQP encoding each stands for, so a value a client sent through proton keeps its type when
#: the broker writes it again (SETTLE-MOD-001's properties to modify). The codec does not import
#: proton: the classes are recognised by name and module.
#: the fixed-width ones: (type code, struct format, how the Python value is read)
_PROTON_FIXED = {
    "char": (0x73, ">I", ord), "timestamp": (0x83, ">q", int), "ulong": (0x80, ">Q", int), "uint": (0x70, ">I", int),
    "ushort": (0x60, ">H", int), "ubyte": (0x50, ">B", int), "byte": (0x51, ">b", int), "short": (0x61, ">h", int),
    "int32": (0x71, ">i", int), "float32": (0x72, ">f", float), "decimal32": (0x74, ">I", int), "decimal64": (0x84, ">Q", int),
}
_PROTON_TYPED = {
    **{name: (lambda v, c=code, f=fmt, read=read: bytes([c]) + struct.pack(f, read(v)))
       for name, (code, fmt, read) in _PROTON_FIXED.items()},
    "symbol": lambda v: symbol(str(v)),
    "decimal128": lambda v: b"\x94" + bytes(v)[:16].ljust(16, b"\x00"),
    "Described": lambda v: b"\x00" + value(v.descriptor) + value(v.value),
}


def value(v: Any) -> bytes:
    """A Python value the broker writes (strings as AMQP strings, ints as longs; proton's
    typed values as their AMQP type)."""
    if v is None:
        return null()
    kind = type(v)
    if kind.__module__.startswith("proton") and kind.__name__ in _PROTON_TYPED:
        return _PROTON_TYPED[kind.__name__](v)
    if isinstance(v, bool):
        return boolean(v)
    if isinstance(v, Symbol):
        return symbol(v)
    if isinstance(v, ULong):
        return b"\x80" + struct.pack(">Q", v)
    if isinstance(v, int):
        return long(v)
    if isinstance(v, float):
        return b"\x82" + struct.pack(">d", v)
    if isinstance(v, str):
        return string(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return binary(bytes(v))
    if isinstance(v, uuid.UUID):
        return uuid_(v)
    if isinstance(v, dt.datetime):
        return timestamp(round((v - _EPOCH).total_seconds() * 1000))
    if isinstance(v, dict):
        out = []
        for k, x in v.items():
            out += [value(k), value(x)]
        return map_(out)
    if isinstance(v, (list, tuple)):
        return list_([value(x) for x in v])
    raise TypeError(f"no AMQP encoding for {type(v).__name__}")


def described(code: int, encoded_value: bytes) -> bytes:
    return b"\x00\x53" + bytes([code]) + encoded_value


from .decode import Described, decode  # noqa: E402  (one-pass reading, re-exported)
