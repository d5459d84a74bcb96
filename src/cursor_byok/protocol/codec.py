"""Connect codec: unary bodies, server-stream frames and end-of-stream trailers (sans-IO).

Framing itself (envelopes, size caps, gzip) is the hot path's job (`cursor_byok.hotpath`, compiled
or its pure twin); this module adds protobuf and Connect semantics on top and turns every
failure into a ConnectError with the code the client must see.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TypeVar

import msgspec
from google.protobuf.message import DecodeError, Message

from cursor_byok.hotpath import (
    FLAG_END_STREAM,
    FrameDecoder,
    HotPathError,
    encode_end_stream,
    encode_frame,
    encode_frames,
)

from .errors import ConnectError, connect_error_from
from .pb import agent_v1_pb2

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "SERVER_HEARTBEAT_FRAME",
    "DecodedStream",
    "StreamDecoder",
    "decode_message",
    "decode_stream",
    "decode_unary",
    "encode_server_message",
    "encode_server_messages",
    "encode_unary",
    "end_stream_error",
    "end_stream_ok",
    "parse_end_stream",
]

M = TypeVar("M", bound=Message)

DEFAULT_MAX_MESSAGE_SIZE = 16 * 1024 * 1024
_GZIP_MAGIC = b"\x1f\x8b"
_END_STREAM_OK = encode_end_stream(b"{}")


def _heartbeat_frame() -> bytes:
    msg = agent_v1_pb2.AgentServerMessage()
    msg.interaction_update.heartbeat.SetInParent()
    return encode_frame(msg.SerializeToString())


# The reply to every client_heartbeat append (PROTOCOL.md 1.4): bytes 00 00000004 0a026a00.
SERVER_HEARTBEAT_FRAME = _heartbeat_frame()


def decode_message(payload: bytes, message_type: type[M]) -> M:
    """Parse protobuf bytes; failure is ConnectError invalid_argument `protobuf decode error: …`."""
    try:
        return message_type.FromString(payload)
    except DecodeError as exc:
        raise ConnectError("invalid_argument", f"protobuf decode error: {exc}") from None


def decode_unary(
    body: bytes,
    message_type: type[M],
    *,
    max_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    content_encoding: str = "identity",
) -> M:
    """Decode a unary request body: raw protobuf, or exactly one Connect envelope.

    The body is enveloped when byte 0 is 0 (data) or 1 (compressed): a protobuf message never
    starts with 0x00 or 0x01 (field number 0), so the two forms cannot be confused. An envelope
    must fill the body exactly (length in bytes 1..4 == len(body) - 5). With
    `content_encoding="gzip"` a gzip body (magic 1f 8b) is inflated first and a compressed
    envelope is accepted.
    """
    gzip = content_encoding == "gzip"
    if gzip and body[:2] == _GZIP_MAGIC:
        body = _inflate_body(body, max_size)
    size = len(body)
    if size and body[0] <= 1:
        if size >= 5 and body[0] == 0:
            length = int.from_bytes(body[1:5], "big")
            if length == size - 5 and length <= max_size:
                return decode_message(body[5:], message_type)
        # Anything unusual (compressed, oversized, truncated, trailing bytes) goes through the
        # hot-path decoder so the error matches what a stream would get.
        return decode_message(_read_single_frame(body, max_size, gzip), message_type)
    if size > max_size:
        raise ConnectError("resource_exhausted", f"message of {size} bytes exceeds the {max_size}-byte limit")
    return decode_message(body, message_type)


def _read_single_frame(body: bytes, max_size: int, gzip: bool) -> bytes:
    decoder = FrameDecoder(max_frame_size=max_size, gzip=gzip)
    try:
        frames = decoder.feed(body)
        decoder.close()
    except HotPathError as exc:
        raise connect_error_from(exc) from None
    if len(frames) != 1 or frames[0][0] != 0:
        raise ConnectError(
            "invalid_argument", f"a unary body must be one data envelope, got {len(frames)} frames"
        )
    return frames[0][1]


def _inflate_body(body: bytes, max_size: int) -> bytes:
    # The hot path owns capped gzip inflation (stops one byte past the cap, so a decompression
    # bomb never materialises); a whole-body gzip is inflated by presenting it as one
    # compressed envelope.
    if len(body) > max_size:
        raise ConnectError("resource_exhausted", f"body of {len(body)} bytes exceeds the {max_size}-byte limit")
    return _read_single_frame(encode_frame(body, 1), max_size, True)


def encode_unary(msg: Message) -> bytes:
    """A unary response body: the raw protobuf (content-type application/proto)."""
    return msg.SerializeToString()


def encode_server_message(msg: Message) -> bytes:
    """One data envelope carrying a serialized message (normally an AgentServerMessage)."""
    return encode_frame(msg.SerializeToString())


def encode_server_messages(msgs: Iterable[Message]) -> bytes:
    """Data envelopes for several messages, concatenated so they go out in one send."""
    return encode_frames([m.SerializeToString() for m in msgs])


def end_stream_ok() -> bytes:
    """The end-of-stream frame of a stream that ended normally: flag 0x02, payload `{}`."""
    return _END_STREAM_OK


def _compact_json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def end_stream_error(err: ConnectError) -> bytes:
    """The end-of-stream frame carrying `{"error": {code, message?, details?}}`."""
    return encode_end_stream(_compact_json({"error": err.to_json_obj()}))


def parse_end_stream(payload: bytes) -> ConnectError | None:
    """Read an end-of-stream JSON payload: None for a normal end, else the ConnectError it holds.

    A payload that is not a JSON object is itself an error (`internal`), raised.
    """
    try:
        obj = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConnectError("internal", f"malformed end-of-stream JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ConnectError("internal", "end-of-stream payload is not a JSON object")
    error = obj.get("error")
    if error is None:
        return None
    return ConnectError.from_json_obj(error)


class DecodedStream(msgspec.Struct, frozen=True):
    """A whole Connect stream body: its data messages and how it ended."""

    messages: list[Message]
    ended: bool  # an end-of-stream frame was seen
    error: ConnectError | None  # the error it carried, None for `{}` (or no end frame)


class StreamDecoder:
    """Incremental Connect stream reader: feed() body chunks, get decoded messages.

    The end-of-stream frame is not returned as a message; it sets `ended` and `error`. Data
    after it, an oversized, truncated or wrongly compressed frame, or undecodable protobuf raise
    ConnectError.
    """

    __slots__ = ("_frames", "_type", "ended", "error")

    def __init__(
        self,
        message_type: type[Message],
        *,
        max_frame_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        gzip: bool = False,
    ) -> None:
        self._type = message_type
        self._frames = FrameDecoder(max_frame_size=max_frame_size, gzip=gzip)
        self.ended = False
        self.error: ConnectError | None = None

    def feed(self, data: bytes) -> list[Message]:
        try:
            frames = self._frames.feed(data)
        except HotPathError as exc:
            raise connect_error_from(exc) from None
        out: list[Message] = []
        parse = self._type.FromString
        for flags, payload in frames:
            if self.ended:
                raise ConnectError("invalid_argument", "data after the end-of-stream frame")
            if flags & FLAG_END_STREAM:
                self.ended = True
                self.error = parse_end_stream(payload)
                continue
            try:
                out.append(parse(payload))
            except DecodeError as exc:
                raise ConnectError("invalid_argument", f"protobuf decode error: {exc}") from None
        return out

    def close(self) -> None:
        """Declare the body complete; a partial frame left over is ConnectError invalid_argument."""
        try:
            self._frames.close()
        except HotPathError as exc:
            raise connect_error_from(exc) from None


def decode_stream(
    body: bytes,
    message_type: type[Message] = agent_v1_pb2.AgentServerMessage,
    *,
    max_frame_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    gzip: bool = False,
) -> DecodedStream:
    """Decode a complete stream body (e.g. a RunSSE response) in one call."""
    decoder = StreamDecoder(message_type, max_frame_size=max_frame_size, gzip=gzip)
    messages = decoder.feed(body)
    decoder.close()
    return DecodedStream(messages, decoder.ended, decoder.error)
