"""A message the codec cannot read is refused with a description in the wire's words (what is
wrong, and where), never a Python exception's name, and of bounded length: it goes back to the
client in the rejected outcome's error description."""

from __future__ import annotations

import pytest

pytest.importorskip("proton")

from proton import Message, char  # noqa: E402

from sbconform.amqp.codec import WireError, decode  # noqa: E402


def _encoded(**fields) -> bytes:
    m = Message(**fields)
    m.inferred = True
    return m.encode()


def _refusal(data: bytes) -> str:
    with pytest.raises(WireError) as refused:
        decode(data, 0)
    return str(refused.value)


@pytest.mark.parametrize("data, words", [
    # a string value whose bytes are not UTF-8
    (_encoded(body=b"x", properties={"a": "xy"}).replace(b"\xa1\x02xy", b"\xa1\x02\xff\xfe"), "UTF-8"),
    # a char (0x73) past the last Unicode code point
    (_encoded(body=b"x", properties={"a": char("x")}).replace(b"\x73\x00\x00\x00x", b"\x73\x7f\xff\xff\xff"), "char"),
])
def test_a_value_the_codec_cannot_read_is_described_in_the_wires_words(data: bytes, words: str) -> None:
    text = _refusal(data)
    assert words in text, text
    for name in ("UnicodeDecodeError", "ValueError", "IndexError", "TypeError", "OverflowError"):
        assert name not in text, text


def test_a_refusal_quoting_what_it_found_is_bounded() -> None:
    # a large binary where a section belongs was quoted whole into the description
    data = _encoded(body=b"x") + b"\xb0\x00\x01\x00\x00" + b"\x01" * 65536
    text = _refusal(data)
    assert len(text) < 300, len(text)
