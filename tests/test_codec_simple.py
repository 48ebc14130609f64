"""The codec's reading of the shape the SDKs send most (``codec._simple``: a properties list8
with a string MessageId and null fields after it, then one data section) gives the message
and envelope the general walk gives, for that shape and for every near miss of it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbconform.amqp import codec, values
from sbconform.amqp.values import WireError


def _general(data: bytes):
    """``codec.decode`` with the simple reading switched off."""
    simple = codec._simple
    codec._simple = lambda data: None
    try:
        return codec.decode(data, 0, assign_message_id=False)
    finally:
        codec._simple = simple


def _decode(data: bytes):
    return codec.decode(data, 0, assign_message_id=False)  # (an assigned MessageId is a fresh UUID each time)


def _outcome(decode, data: bytes):
    try:
        m = decode(data)
    except WireError:
        return "WireError"
    return m, m.wire  # (the envelope is not part of a message's equality)


def _sdk_message(message_id: str, nulls: int, body: bytes, vbin32: bool = False) -> bytes:
    props = values.compound(0xC0, 0xD0, [values.string(message_id)] + [values.null()] * nulls)
    data = values.described(codec.DATA, (b"\xb0" + len(body).to_bytes(4, "big") + body) if vbin32 else values.binary(body))
    return values.described(codec.PROPERTIES, props) + data


def test_an_sdk_batch_message_takes_the_simple_reading() -> None:
    data = _sdk_message("30cea2e3-71fa-4ca5-8ae9-3e7d6bbae581", 12, b"x" * 64)
    m = codec._simple(data)
    assert m is not None and m.message_id == "30cea2e3-71fa-4ca5-8ae9-3e7d6bbae581" and m.body == b"x" * 64
    assert _outcome(_decode, data) == _outcome(_general, data)
    assert codec._simple(_sdk_message("id", 0, b"y" * 300)) is not None  # a vbin32 body over 255 bytes


@pytest.mark.parametrize("data", [
    _sdk_message("id", 3, b"x", vbin32=True),  # a small body in a vbin32: kept as sent, not written again as vbin8
    _sdk_message("id", 3, b"x") + b"\x00",  # something after the data section
    _sdk_message("id", 3, b"x")[:-1],  # a body cut short
    values.described(codec.PROPERTIES, values.compound(0xC0, 0xD0, [values.null(), values.string("to")]))
    + values.described(codec.DATA, values.binary(b"x")),  # no MessageId: the broker assigns one
])
def test_other_shapes_take_the_general_walk(data: bytes) -> None:
    assert codec._simple(data) is None


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=40), st.integers(0, 14), st.binary(max_size=300), st.booleans(),
       st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=3), st.integers(0, 400))
def test_the_simple_reading_agrees_with_the_general_walk(message_id, nulls, body, vbin32, flips, cut) -> None:
    data = bytearray(_sdk_message(message_id, nulls, body, vbin32))
    for at, value in flips:
        if at < len(data):
            data[at] = value
    data = bytes(data[:cut] if cut < len(data) and cut % 2 else data)
    assert _outcome(_decode, data) == _outcome(_general, data)


def test_a_kept_header_is_the_one_written_anew() -> None:
    """``codec.header`` keeps the headers it wrote (most messages share a few): the kept one
    and one written with the cache empty are the same bytes, for every field's form."""
    cases = [(b"\x42", b"\x40", None, 0), (b"\x41", b"\x50\x09", 60_000, 2), (b"\x40", b"\x40", 2**40, 2**40)]
    first = [codec.header(*case) for case in cases]
    kept = dict(codec._HEADERS)
    codec._HEADERS.clear()
    try:
        assert [codec.header(*case) for case in cases] == first == [codec.header(*case) for case in cases]
    finally:
        codec._HEADERS.update(kept)
    assert values.read(first[1], 3)[0] == [True, 9, 60_000, False, 2]
