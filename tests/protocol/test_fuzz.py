"""Arbitrary bytes and headers: the codec answers with a value or a ConnectError, nothing else."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cursor_byok.hotpath import encode_frame
from cursor_byok.protocol import (
    MAX_ID_BYTES,
    ConnectError,
    StreamDecoder,
    agent_pb2,
    aiserver_pb2,
    check_id,
    decode_bidi_append,
    parse_end_stream,
    parse_request_headers,
)

SETTINGS = settings(max_examples=300, deadline=None)


@SETTINGS
@given(st.binary(max_size=256), st.booleans())
def test_random_bidi_append_bodies(body: bytes, enveloped: bool) -> None:
    if enveloped:
        body = encode_frame(body)
    try:
        append = decode_bidi_append(body, max_size=4096)
    except ConnectError as err:
        assert err.code in {"invalid_argument", "resource_exhausted"}
    else:
        assert append.request_id and append.raw
        assert append.variant == append.message.WhichOneof("message")


BAD_ID_ENDINGS = ("contains control or unprintable characters", f"is longer than {MAX_ID_BYTES} bytes")


@SETTINGS
@given(st.text(max_size=300))
def test_identifiers_are_printable_and_bounded(value: str) -> None:
    usable = value.isprintable() and len(value.encode()) <= MAX_ID_BYTES
    try:
        check_id("conversation_id", value)
    except ConnectError as err:
        assert not usable and err.code == "invalid_argument" and err.message.endswith(BAD_ID_ENDINGS)
    else:
        assert usable


@SETTINGS
@given(st.binary(max_size=200), st.text(min_size=1, max_size=12), st.integers(0, 2**40))
def test_any_client_bytes_in_a_valid_append(raw: bytes, request_id: str, seqno: int) -> None:
    body = aiserver_pb2.BidiAppendRequest(
        data_binary=raw, request_id=aiserver_pb2.BidiRequestId(request_id=request_id), append_seqno=seqno
    ).SerializeToString()
    try:
        append = decode_bidi_append(body)
    except ConnectError as err:
        assert err.code == "invalid_argument"
        bad_id = err.message.startswith("protocol error: ") and err.message.endswith(BAD_ID_ENDINGS)
        assert bad_id or err.message.startswith(("protobuf decode error: ", "protocol error: BidiAppend data is empty"))
        if err.message.startswith("protocol error: request_id"):
            assert not request_id.isprintable()
    else:
        assert request_id.isprintable()
        assert (append.request_id, append.append_seqno, append.raw) == (request_id, seqno, raw)
        assert append.variant == append.message.WhichOneof("message")


@SETTINGS
@given(st.lists(st.binary(max_size=64), max_size=8), st.integers(1, 17))
def test_stream_chunks(chunks: list[bytes], split: int) -> None:
    decoder = StreamDecoder(agent_pb2.AgentServerMessage, max_frame_size=1024)
    body = b"".join(chunks)
    try:
        for start in range(0, len(body), split):
            decoder.feed(body[start : start + split])
        decoder.close()
    except ConnectError as err:
        assert err.code in {"invalid_argument", "resource_exhausted", "internal", "unknown"}


@SETTINGS
@given(st.binary(max_size=128))
def test_end_stream_payloads(payload: bytes) -> None:
    try:
        parse_end_stream(payload)
    except ConnectError as err:
        assert err.code == "internal"


@SETTINGS
@given(st.dictionaries(st.sampled_from([
    "connect-timeout-ms", "content-encoding", "connect-content-encoding", "x-parent-request-id",
    "x-parent-agent-tool-call-id", "x-request-id", "x-cursor-streaming",
]), st.text(max_size=12)))
def test_header_values(headers: dict[str, str]) -> None:
    try:
        parse_request_headers(headers)
    except ConnectError as err:
        assert err.code in {"invalid_argument", "unimplemented"}
