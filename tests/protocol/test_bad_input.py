"""Malformed input never crashes the codec: each case is a ConnectError with a specific code."""
from __future__ import annotations

import gzip

import pytest

from cursor_byok.hotpath import FLAG_COMPRESSED, encode_frame
from cursor_byok.protocol import (
    ConnectError,
    StreamDecoder,
    agent_pb2,
    aiserver_pb2,
    decode_bidi_append,
    decode_stream,
    decode_unary,
    end_stream_ok,
    parse_end_stream,
    parse_request_headers,
)

REQUEST_ID = aiserver_pb2.BidiRequestId(request_id="req-1")
HEARTBEAT = agent_pb2.AgentClientMessage(client_heartbeat=agent_pb2.ClientHeartbeat()).SerializeToString()


def _append(**fields: object) -> bytes:
    fields.setdefault("request_id", REQUEST_ID)
    return aiserver_pb2.BidiAppendRequest(**fields).SerializeToString()


def _raises(code: str, fn, *args, **kwargs) -> ConnectError:
    with pytest.raises(ConnectError) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, info.value
    return info.value


# --- BidiAppend (PROTOCOL.md 2.8) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        bytes.fromhex("0a05616263"),  # field 1 announces 5 bytes, 3 follow
        bytes.fromhex("0f"),  # wire type 7 does not exist
        bytes.fromhex("08ffffffffffffffffffff01"),  # varint longer than 10 bytes
    ],
    ids=["overrun", "bad-wire-type", "long-varint"],
)
def test_body_not_protobuf(body: bytes) -> None:
    err = _raises("invalid_argument", decode_bidi_append, body)
    assert err.message.startswith("protobuf decode error: ")
    _raises("invalid_argument", decode_unary, body, agent_pb2.BidiRequestId)


def test_client_message_not_protobuf() -> None:
    err = _raises("invalid_argument", decode_bidi_append, _append(data="0a05616263"))
    assert err.message.startswith("protobuf decode error: ")
    err = _raises("invalid_argument", decode_bidi_append, _append(data_binary=b"\x0f"))
    assert err.message.startswith("protobuf decode error: ")


def test_hex_with_odd_length() -> None:
    err = _raises("invalid_argument", decode_bidi_append, _append(data=HEARTBEAT.hex() + "0"))
    assert err.message.startswith("protocol error: invalid BidiAppend hex: ")


@pytest.mark.parametrize("data", ["3a0g", "3a 0", "zz", "3a\u00e900"])
def test_hex_with_non_hex_characters(data: str) -> None:
    err = _raises("invalid_argument", decode_bidi_append, _append(data=data))
    assert err.message.startswith("protocol error: invalid BidiAppend hex: ")


def test_missing_request_id() -> None:
    body = aiserver_pb2.BidiAppendRequest(data=HEARTBEAT.hex()).SerializeToString()
    err = _raises("invalid_argument", decode_bidi_append, body)
    assert err.message == "protocol error: BidiAppend request_id is required"
    body = _append(data=HEARTBEAT.hex(), request_id=aiserver_pb2.BidiRequestId(request_id=""))
    _raises("invalid_argument", decode_bidi_append, body)


def test_empty_data() -> None:
    err = _raises("invalid_argument", decode_bidi_append, _append(append_seqno=3))
    assert err.message == "protocol error: BidiAppend data is empty"


def test_data_and_data_binary_disagree() -> None:
    other = agent_pb2.AgentClientMessage(prewarm_request=agent_pb2.PrewarmRequest()).SerializeToString()
    _raises("invalid_argument", decode_bidi_append, _append(data=HEARTBEAT.hex(), data_binary=other))


def test_negative_seqno() -> None:
    _raises("invalid_argument", decode_bidi_append, _append(data=HEARTBEAT.hex(), append_seqno=-1))


def test_unknown_oneof_variant_is_kept_not_crashed_on() -> None:
    # AgentClientMessage field 40 (not in the schema), holding a small sub-message.
    unknown = bytes.fromhex("c202020801")
    for body in (_append(data=unknown.hex()), _append(data_binary=unknown), encode_frame(_append(data=unknown.hex()))):
        append = decode_bidi_append(body)
        assert append.variant is None
        assert append.message.WhichOneof("message") is None
        assert append.raw == unknown
        assert append.message.SerializeToString() == unknown  # unknown field preserved


# --- frames: caps, truncation, compression ------------------------------------------------------


def test_frame_longer_than_the_cap() -> None:
    announced = encode_frame(HEARTBEAT)[:1] + (1 << 30).to_bytes(4, "big")
    _raises("resource_exhausted", decode_unary, announced + b"\x00" * 16, agent_pb2.AgentClientMessage)
    big = encode_frame(_append(data="3a00" * 300))
    _raises("resource_exhausted", decode_bidi_append, big, max_size=1000)
    _raises("resource_exhausted", decode_bidi_append, _append(data="3a00" * 300), max_size=1000)
    decoder = StreamDecoder(agent_pb2.AgentServerMessage, max_frame_size=1024)
    _raises("resource_exhausted", decoder.feed, b"\x00" + (1025).to_bytes(4, "big"))


def test_truncated_frame() -> None:
    frame = encode_frame(_append(data=HEARTBEAT.hex()))
    _raises("invalid_argument", decode_bidi_append, frame[:-1])
    _raises("invalid_argument", decode_bidi_append, frame[:3])
    decoder = StreamDecoder(agent_pb2.AgentServerMessage)
    assert decoder.feed(frame[:-2]) == []
    _raises("invalid_argument", decoder.close)


def test_trailing_bytes_after_a_unary_envelope() -> None:
    frame = encode_frame(_append(data=HEARTBEAT.hex()))
    _raises("invalid_argument", decode_bidi_append, frame + frame)
    _raises("invalid_argument", decode_bidi_append, frame + b"\x00")


def test_gzip_flag_without_gzip_encoding() -> None:
    body = _append(data=HEARTBEAT.hex())
    compressed = encode_frame(gzip.compress(body), FLAG_COMPRESSED)
    _raises("invalid_argument", decode_bidi_append, compressed)
    # Negotiated, the same frame is fine.
    assert decode_bidi_append(compressed, content_encoding="gzip").variant == "client_heartbeat"
    decoder = StreamDecoder(agent_pb2.AgentServerMessage)
    _raises("invalid_argument", decoder.feed, compressed)


def test_corrupt_gzip() -> None:
    body = _append(data=HEARTBEAT.hex())
    packed = bytearray(gzip.compress(body))
    packed[12] ^= 0xFF  # inside the deflate stream
    corrupt_frame = encode_frame(bytes(packed), FLAG_COMPRESSED)
    _raises("invalid_argument", decode_bidi_append, corrupt_frame, content_encoding="gzip")
    # Whole-body gzip (content-encoding: gzip), corrupt.
    _raises("invalid_argument", decode_bidi_append, bytes(packed), content_encoding="gzip")
    _raises("invalid_argument", decode_bidi_append, gzip.compress(body)[:-6], content_encoding="gzip")
    assert decode_bidi_append(gzip.compress(body), content_encoding="gzip").request_id == "req-1"
    decoder = StreamDecoder(agent_pb2.AgentServerMessage, gzip=True)
    _raises("invalid_argument", decoder.feed, corrupt_frame)


def test_gzip_bomb_is_capped() -> None:
    bomb = gzip.compress(agent_pb2.BidiRequestId(request_id="a" * 200_000).SerializeToString())
    assert len(bomb) < 1000
    _raises("invalid_argument", decode_unary, bomb, agent_pb2.BidiRequestId, max_size=10_000, content_encoding="gzip")
    ok = decode_unary(bomb, agent_pb2.BidiRequestId, max_size=300_000, content_encoding="gzip")
    assert len(ok.request_id) == 200_000


# --- streams and trailers -----------------------------------------------------------------------


def test_data_after_end_of_stream() -> None:
    frame = encode_frame(agent_pb2.AgentServerMessage().SerializeToString())
    _raises("invalid_argument", decode_stream, end_stream_ok() + frame)


def test_undecodable_stream_message() -> None:
    _raises("invalid_argument", decode_stream, encode_frame(b"\x0f"))


@pytest.mark.parametrize("payload", [b"not json", b"[1,2]", b"\xff\xfe", b""])
def test_malformed_end_stream_payload(payload: bytes) -> None:
    _raises("internal", parse_end_stream, payload)


def test_error_object_with_unrecognized_code_reads_as_unknown() -> None:
    err = parse_end_stream(b'{"error":{"code":"teapot","message":"x"}}')
    assert err is not None and err.code == "unknown" and err.message == "x"


# --- headers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-5", "abc", "1.5", "12345678901", " "])
def test_invalid_timeout(value: str) -> None:
    _raises("invalid_argument", parse_request_headers, {"connect-timeout-ms": value})


@pytest.mark.parametrize("header", ["content-encoding", "connect-content-encoding"])
@pytest.mark.parametrize("value", ["br", "zstd", "gzip, br", "deflate"])
def test_unsupported_encoding(header: str, value: str) -> None:
    _raises("unimplemented", parse_request_headers, {header: value})


@pytest.mark.parametrize(
    "headers",
    [
        {"x-parent-request-id": "parent-1"},
        {"x-parent-agent-tool-call-id": "call-1"},
        [(b"x-parent-request-id", b"parent-1"), (b"x-parent-agent-tool-call-id", b"")],
    ],
)
def test_one_parent_header_alone(headers) -> None:
    _raises("invalid_argument", parse_request_headers, headers)
