"""Strict hex decoding on both implementations, then twin == compiled on corrupted input."""
from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cursor_byok.hotpath import HexDecodeError

from .conftest import BOUNDED, SOAK, outcome, twin_and_compiled


@pytest.mark.parametrize("text", ["", "00", "0aff", "DEADbeef", "0123456789abcdefABCDEF"])
def test_decodes_lower_and_upper_case(frames: ModuleType, text: str) -> None:
    assert frames.decode_hex(text) == bytes.fromhex(text)
    assert frames.decode_hex(text.encode()) == bytes.fromhex(text)
    assert frames.decode_hex(bytearray(text.encode())) == bytes.fromhex(text)


def test_one_mebibyte_round_trips(frames: ModuleType) -> None:
    blob = bytes(range(256)) * 4096
    assert frames.decode_hex(blob.hex()) == blob
    assert frames.decode_hex(blob.hex().upper().encode()) == blob


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("abc", "hex string has odd length 3"),
        ("0", "hex string has odd length 1"),
        ("0g", "non-hex character 0x67 at offset 1"),
        ("ab cd", "non-hex character 0x20 at offset 2"),
        (" abcd", "non-hex character 0x20 at offset 0"),
        ("abcd\n", "non-hex character 0x0a at offset 4"),
        ("ab\x00c", "non-hex character 0x00 at offset 2"),
        ("0x12", "non-hex character 0x78 at offset 1"),
        ("é0", "non-hex character 0xe9 at offset 0"),
        ("00€", "non-hex character 0x20ac at offset 2"),
        ("z€", "non-hex character 0x7a at offset 0"),
        ("abc ", "non-hex character 0x20 at offset 3"),
    ],
)
def test_rejects_malformed_hex(frames: ModuleType, text: str, message: str) -> None:
    with pytest.raises(HexDecodeError) as info:
        frames.decode_hex(text)
    assert info.value.code == "invalid_argument"
    assert str(info.value) == message


def test_rejects_non_ascii_bytes(frames: ModuleType) -> None:
    with pytest.raises(HexDecodeError, match="0xff at offset 2"):
        frames.decode_hex(b"ab\xff0")


def test_rejects_non_text_input(frames: ModuleType) -> None:
    with pytest.raises(TypeError):
        frames.decode_hex(1234)


hex_alphabet = "0123456789abcdefABCDEF"


def check_hex_corruptions(data: st.DataObject) -> None:
    twin, compiled = twin_and_compiled("frames")
    raw = data.draw(st.binary(max_size=200))
    chars = list("".join(c.upper() if data.draw(st.booleans()) else c for c in raw.hex()))
    for _ in range(data.draw(st.integers(0, 3))):
        action = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        position = data.draw(st.integers(0, len(chars)))
        noise = data.draw(st.one_of(st.characters(), st.sampled_from(list(hex_alphabet + " \t\n\x00g"))))
        if action == "insert":
            chars.insert(position, noise)
        elif chars and position < len(chars):
            if action == "delete":
                del chars[position]
            else:
                chars[position] = noise
    text = "".join(chars)
    expected = outcome(lambda: twin.decode_hex(text))
    assert outcome(lambda: compiled.decode_hex(text)) == expected
    if text.isascii():
        assert outcome(lambda: compiled.decode_hex(text.encode())) == expected
        assert outcome(lambda: twin.decode_hex(text.encode())) == expected
    if text == raw.hex() or text.lower() == raw.hex():
        assert expected == ("ok", raw)


def check_arbitrary_bytes(data: st.DataObject) -> None:
    twin, compiled = twin_and_compiled("frames")
    blob = data.draw(st.binary(max_size=64))
    assert outcome(lambda: compiled.decode_hex(blob)) == outcome(lambda: twin.decode_hex(blob))


@BOUNDED
@given(st.data())
def test_twins_agree_on_corrupted_hex(data: st.DataObject) -> None:
    check_hex_corruptions(data)


@BOUNDED
@given(st.data())
def test_twins_agree_on_arbitrary_bytes(data: st.DataObject) -> None:
    check_arbitrary_bytes(data)


@pytest.mark.soak
@pytest.mark.timeout(1800)
@SOAK
@given(st.data())
def test_soak_twins_agree_on_corrupted_hex(data: st.DataObject) -> None:
    check_hex_corruptions(data)


@pytest.mark.soak
@pytest.mark.timeout(1800)
@SOAK
@given(st.data())
def test_soak_twins_agree_on_arbitrary_bytes(data: st.DataObject) -> None:
    check_arbitrary_bytes(data)
