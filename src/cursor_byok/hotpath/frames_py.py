"""Connect envelope framing, pure-Python twin of ext/frames.pyx (the oracle in property tests).

A Connect streaming body is a sequence of envelopes: one flags byte, a 4-byte big-endian payload
length, then the payload. Flag 0x01 marks a compressed payload, 0x02 the end-of-stream message
(JSON trailers). The decoder is incremental: it accepts the body in whatever chunks the server
hands over and never trusts a length: a header announcing more than `max_frame_size` bytes is
rejected as soon as its 5 bytes are in, before anything of that size is buffered.
"""
from __future__ import annotations

import binascii
import operator

from ._gunzip import gunzip_capped
from .errors import CompressionError, FrameTooLarge, HexDecodeError, HotPathError, TruncatedFrame

__all__ = [
    "DEFAULT_MAX_FRAME",
    "FLAG_COMPRESSED",
    "FLAG_DATA",
    "FLAG_END_STREAM",
    "FrameDecoder",
    "decode_hex",
    "encode_end_stream",
    "encode_frame",
    "encode_frames",
]

FLAG_DATA = 0
FLAG_COMPRESSED = 1
FLAG_END_STREAM = 2
DEFAULT_MAX_FRAME = 16 * 1024 * 1024

HEADER_SIZE = 5
_MAX_WIRE_LENGTH = 0xFFFFFFFF
# Compact the buffer once the consumed prefix is this large and at least half of it, so each
# byte is moved O(1) times on average however the body is chunked.
_COMPACT_AT = 64 * 1024

_HEX_DIGITS = b"0123456789abcdefABCDEF"


class FrameDecoder:
    """Incremental Connect envelope decoder: feed() chunks, get complete (flags, payload) frames."""

    __slots__ = ("_buf", "_error", "_gzip", "_max", "_pos")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME, gzip: bool = False) -> None:
        max_frame_size = operator.index(max_frame_size)
        if max_frame_size < 0:
            raise ValueError(f"max_frame_size must be >= 0, got {max_frame_size}")
        self._max = max_frame_size
        self._gzip = bool(gzip)
        self._buf = bytearray()
        self._pos = 0
        self._error: HotPathError | None = None

    @property
    def max_frame_size(self) -> int:
        return self._max

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a complete frame."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[int, bytes]]:
        if self._error is not None:
            raise type(self._error)(*self._error.args)
        buf = self._buf
        buf += data
        frames: list[tuple[int, bytes]] = []
        pos = self._pos
        end = len(buf)
        try:
            while end - pos >= HEADER_SIZE:
                length = int.from_bytes(buf[pos + 1 : pos + HEADER_SIZE], "big")
                if length > self._max:
                    raise FrameTooLarge(f"frame of {length} bytes exceeds the {self._max}-byte limit")
                if end - pos - HEADER_SIZE < length:
                    break
                flags = buf[pos]
                start = pos + HEADER_SIZE
                with memoryview(buf) as view:
                    payload = bytes(view[start : start + length])
                pos = start + length
                if flags & FLAG_COMPRESSED:
                    payload = self._inflate(payload)
                    flags &= ~FLAG_COMPRESSED
                frames.append((flags, payload))
        except HotPathError as exc:
            self._error = exc
            raise
        finally:
            self._pos = pos
        if pos == end:
            buf.clear()
            self._pos = 0
        elif pos >= _COMPACT_AT and pos * 2 >= end:
            del buf[:pos]
            self._pos = 0
        return frames

    def close(self) -> None:
        """Declare end of input; raises TruncatedFrame if a partial frame is buffered."""
        if self._error is not None:
            raise type(self._error)(*self._error.args)
        pending = len(self._buf) - self._pos
        if pending == 0:
            return
        if pending < HEADER_SIZE:
            error: HotPathError = TruncatedFrame(
                f"stream ended inside a frame header ({pending} of {HEADER_SIZE} bytes)"
            )
        else:
            length = int.from_bytes(self._buf[self._pos + 1 : self._pos + HEADER_SIZE], "big")
            error = TruncatedFrame(
                f"stream ended inside a frame ({pending - HEADER_SIZE} of {length} payload bytes)"
            )
        self._error = error
        raise type(error)(*error.args)

    def _inflate(self, payload: bytes) -> bytes:
        if not self._gzip:
            raise CompressionError("compressed frame but no gzip encoding was negotiated")
        return gunzip_capped(payload, self._max)


def encode_frame(payload: bytes, flags: int = FLAG_DATA) -> bytes:
    """One envelope: flags byte, u32 big-endian length, payload."""
    if not 0 <= flags <= 0xFF:
        raise ValueError(f"frame flags must fit in one byte, got {flags}")
    return b"".join((_header(flags, payload), payload))


def encode_frames(payloads: list[bytes]) -> bytes:
    """Data envelopes for each payload, concatenated (coalesces several frames into one send)."""
    parts: list[bytes] = []
    for payload in payloads:
        parts.append(_header(FLAG_DATA, payload))
        parts.append(payload)
    return b"".join(parts)


def encode_nested_frame(fields: tuple[int, ...], value: bytes, tail: bytes = b"") -> bytes:
    """The data envelope of a protobuf message whose only content is `value`, a length-delimited
    field nested in message fields: `fields` are their numbers from the outermost message to the
    value's own, and `tail` the innermost message's later fields, already encoded. Byte for byte
    what serializing such a message gives (proto3: an empty value is left out, the messages around
    it are not)."""
    if not fields:
        raise ValueError("a nested field needs at least the value's own field number")
    keys = [_field_key(number) for number in fields]
    content = (keys[-1] + _varint(len(value)) + value if value else b"") + tail
    for key in reversed(keys[:-1]):
        content = key + _varint(len(content)) + content
    return encode_frame(content)


def _field_key(number: int) -> bytes:
    if not 1 <= number < 1 << 29:
        raise ValueError(f"protobuf field number {number} is out of range")
    return _varint(number << 3 | 2)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _header(flags: int, payload: bytes) -> bytes:
    length = memoryview(payload).nbytes
    if length > _MAX_WIRE_LENGTH:
        raise ValueError(f"payload of {length} bytes does not fit a 4-byte frame length")
    return bytes((flags,)) + length.to_bytes(4, "big")


def encode_end_stream(json_payload: bytes) -> bytes:
    """The end-of-stream envelope (flag 0x02) carrying the JSON trailer object."""
    return encode_frame(json_payload, FLAG_END_STREAM)


def decode_hex(s: str | bytes) -> bytes:
    """Strict hex decoding: [0-9a-fA-F] only, even length; anything else is HexDecodeError.

    A bad character is reported (by offset) before an odd length is.
    """
    if isinstance(s, str):
        if not s.isascii():
            raise HexDecodeError(_bad_hex_message(s, _first_non_hex(s)))
        raw = s.encode("ascii")
    else:
        raw = bytes(memoryview(s))  # bytes-like only (bytes(int) would zero-fill)
    bad = raw.translate(None, _HEX_DIGITS)
    if bad:
        raise HexDecodeError(_bad_hex_message(raw, raw.index(bad[0])))
    if len(raw) % 2:
        raise HexDecodeError(f"hex string has odd length {len(raw)}")
    return binascii.unhexlify(raw)


_HEX_CHARS = frozenset(_HEX_DIGITS.decode("ascii"))


def _first_non_hex(s: str) -> int:
    return next(index for index, char in enumerate(s) if char not in _HEX_CHARS)


def _bad_hex_message(s: str | bytes, offset: int) -> str:
    unit = s[offset]
    code = ord(unit) if isinstance(unit, str) else unit
    return f"non-hex character {code:#04x} at offset {offset}"
