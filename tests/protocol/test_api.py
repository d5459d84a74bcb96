"""cursor_byok.protocol public API: errors, status mapping, headers, ids, stream decoding."""
from __future__ import annotations

import base64
import json
import re

import pytest

import cursor_byok.hotpath as hotpath
from cursor_byok.protocol import (
    CONNECT_CODES,
    ConnectError,
    ErrorDetailsSpec,
    RawErrorDetail,
    RequestHeaders,
    StreamDecoder,
    agent_pb2,
    aiserver_pb2,
    connect_error_from,
    internal_error,
    new_error_id,
    encode_server_message,
    encode_server_messages,
    encode_unary,
    end_stream_error,
    end_stream_ok,
    error_body,
    http_status_for,
    new_trace_id,
    parse_end_stream,
    parse_request_headers,
    provider_error,
)
from cursor_byok.protocol import ids


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("canceled", 499), ("unknown", 500), ("invalid_argument", 400), ("deadline_exceeded", 504),
        ("not_found", 404), ("already_exists", 409), ("permission_denied", 403),
        ("resource_exhausted", 429), ("failed_precondition", 400), ("aborted", 409),
        ("out_of_range", 400), ("unimplemented", 501), ("internal", 500), ("unavailable", 503),
        ("data_loss", 500), ("unauthenticated", 401),
    ],
)
def test_http_status_follows_connect_spec(code: str, status: int) -> None:
    assert http_status_for(code) == status
    assert ConnectError(code).http_status == status


def test_all_sixteen_codes_and_nothing_else() -> None:
    assert len(CONNECT_CODES) == 16
    with pytest.raises(ValueError):
        ConnectError("cancelled")  # Connect spells it "canceled"
    assert http_status_for("no-such-code") == 500


def test_error_body_omits_empty_parts() -> None:
    assert error_body(ConnectError("not_found")) == b'{"code":"not_found"}'
    assert json.loads(error_body(ConnectError("internal", "boom"))) == {"code": "internal", "message": "boom"}
    assert end_stream_error(ConnectError("internal")) == hotpath.encode_end_stream(b'{"error":{"code":"internal"}}')
    # Non-ASCII messages are UTF-8, not \u escapes.
    assert error_body(ConnectError("internal", "échec")) == '{"code":"internal","message":"échec"}'.encode()


def test_provider_error_matches_protocol_2_7() -> None:
    err = provider_error("upstream said 529 overloaded")
    assert (err.code, err.message) == ("unavailable", "upstream said 529 overloaded")
    body = json.loads(error_body(err))
    (detail,) = body["details"]
    assert detail["type"] == "aiserver.v1.ErrorDetails"
    assert "=" not in detail["value"]  # base64 without padding
    raw = base64.b64decode(detail["value"] + "=" * (-len(detail["value"]) % 4))
    msg = aiserver_pb2.ErrorDetails.FromString(raw)
    assert msg.error == aiserver_pb2.ErrorDetails.Error.ERROR_PROVIDER_ERROR == 57
    assert msg.details.title == "Provider Error"
    assert msg.details.detail == "upstream said 529 overloaded"
    assert msg.details.is_retryable is True
    assert msg.details.show_request_id is True
    assert msg.details.allow_command_links_potentially_unsafe_please_only_use_for_handwritten_trusted_markdown
    assert msg.details.HasField("should_show_immediate_error")
    assert msg.details.should_show_immediate_error is False
    assert msg.is_expected is True
    # And it parses back to the same error.
    assert parse_end_stream(end_stream_error(err)[5:]) == err
    assert not provider_error("x", retryable=False).details[0].is_retryable


def test_details_as_bytes_and_foreign_types_round_trip() -> None:
    spec = ErrorDetailsSpec(error=aiserver_pb2.ErrorDetails.Error.ERROR_TIMEOUT, title="t")
    foreign = RawErrorDetail("google.rpc.RetryInfo", b"\x0a\x02\x08\x05")
    err = ConnectError("deadline_exceeded", "slow", [spec.to_bytes(), foreign])
    parsed = parse_end_stream(end_stream_error(err)[5:])
    assert parsed is not None
    assert parsed.details == [spec, foreign]
    # Padded, unpadded and URL-safe base64 are all accepted on input.
    value = base64.b64encode(spec.to_bytes()).decode()
    for text in (value, value.rstrip("="), base64.urlsafe_b64encode(spec.to_bytes()).decode()):
        obj = {"error": {"code": "internal", "details": [{"type": "aiserver.v1.ErrorDetails", "value": text}]}}
        assert parse_end_stream(json.dumps(obj).encode()).details == [spec]


def test_connect_error_from_maps_hot_path_errors() -> None:
    cases = {
        hotpath.FrameTooLarge("big"): "resource_exhausted",
        hotpath.TruncatedFrame("cut"): "invalid_argument",
        hotpath.CompressionError("gz"): "invalid_argument",
        hotpath.HexDecodeError("hex"): "invalid_argument",
    }
    for exc, code in cases.items():
        err = connect_error_from(exc)
        assert (err.code, err.message) == (code, str(exc))
    original = ConnectError("aborted", "x")
    assert connect_error_from(original) is original
    from google.protobuf.message import DecodeError

    assert connect_error_from(DecodeError("bad")).code == "invalid_argument"
    opaque = connect_error_from(RuntimeError("secret /home/user/.keys"))
    assert opaque.code == "internal" and "secret" not in opaque.message and "keys" not in opaque.message


def test_internal_errors_carry_an_id_never_the_exception_text() -> None:
    error_id = new_error_id()
    err = internal_error(error_id)
    assert err.code == "internal" and error_id in err.message
    assert new_error_id() != error_id


def test_headers_from_mapping_and_asgi_pairs() -> None:
    mapping = {
        "Connect-Protocol-Version": "1",
        "Connect-Timeout-Ms": "60000",
        "Content-Encoding": "GZIP",
        "X-Request-Id": "req-1",
        "X-Parent-Request-Id": "parent-req",
        "X-Parent-Agent-Tool-Call-Id": "call_abc",
        "X-Cursor-Streaming": "true",
        "Authorization": "Bearer secret",
    }
    expected = RequestHeaders(
        connect_protocol_version="1",
        timeout_ms=60000,
        content_encoding="gzip",
        request_id="req-1",
        parent_request_id="parent-req",
        parent_tool_call_id="call_abc",
        streaming=True,
    )
    assert parse_request_headers(mapping) == expected
    pairs = [(k.lower().encode(), v.encode()) for k, v in mapping.items()]
    assert parse_request_headers(pairs) == expected


def test_headers_of_a_plain_request_and_names_in_any_case() -> None:
    """The IDE's shape (none of the encoding, deadline or parent headers) and pairs whose names
    come in another case read as the same headers from a mapping."""
    plain = {"Host": "127.0.0.1:1", "Content-Type": "application/proto", "Content-Length": "12", "X-Request-Id": " r-1 ",
             "Connect-Protocol-Version": "1", "User-Agent": "connect-es"}
    expected = RequestHeaders(connect_protocol_version="1", request_id="r-1", content_length=12)
    assert parse_request_headers(plain) == expected
    assert parse_request_headers([(k.encode(), v.encode()) for k, v in plain.items()]) == expected
    assert parse_request_headers([(k.lower().encode(), v.encode()) for k, v in plain.items()]) == expected
    assert parse_request_headers([(b"X-Request-Id", b""), (b"content-length", b"x")]) == RequestHeaders()
    timed = [(b"Connect-Timeout-Ms", b"5"), (b"X-Parent-Request-Id", b"p"), (b"X-Parent-Agent-Tool-Call-Id", b"c")]
    assert parse_request_headers(timed) == RequestHeaders(timeout_ms=5, parent_request_id="p", parent_tool_call_id="c")
    with pytest.raises(ConnectError) as raised:
        parse_request_headers([(b"x-parent-request-id", b"p\x01q"), (b"x-parent-agent-tool-call-id", b"c")])
    assert raised.value.code == "invalid_argument"


def test_headers_defaults_and_encodings() -> None:
    assert parse_request_headers({}) == RequestHeaders()
    assert parse_request_headers([]).content_encoding == "identity"
    assert parse_request_headers({"connect-content-encoding": "gzip"}).content_encoding == "gzip"
    assert parse_request_headers({"content-encoding": "identity"}).content_encoding == "identity"
    assert parse_request_headers({"x-cursor-streaming": "false"}).streaming is False
    assert parse_request_headers({"connect-timeout-ms": "0"}).timeout_ms == 0
    assert parse_request_headers([(b"content-length", b"14098")]).content_length == 14098
    assert parse_request_headers([]).content_length is None
    assert parse_request_headers({"content-length": "-1"}).content_length is None
    # The first of repeated ASGI headers wins.
    assert parse_request_headers([(b"x-request-id", b"a"), (b"x-request-id", b"b")]).request_id == "a"


def test_ids() -> None:
    trace = new_trace_id()
    assert re.fullmatch(r"[0-9a-f]{32}", trace)
    assert len({new_trace_id() for _ in range(1000)}) == 1000
    for name in ("RequestId", "CursorRunId", "RunId", "ConversationId", "AgentSessionId", "MessageId",
                 "InjectionId", "ToolCallId", "ExecId", "TraceId"):
        new_type = getattr(ids, name)
        assert new_type.__doc__ and len(new_type.__doc__) > 30, name
    assert ids.ExecId(7) == 7 and ids.RequestId("r") == "r"


def test_stream_decoder_handles_any_chunking() -> None:
    msgs = [
        agent_pb2.AgentServerMessage(
            interaction_update=agent_pb2.InteractionUpdate(text_delta=agent_pb2.TextDeltaUpdate(text=f"t{i}"))
        )
        for i in range(20)
    ]
    err = ConnectError("canceled", "run was cancelled")
    body = encode_server_messages(msgs) + end_stream_error(err)
    for chunk in (1, 2, 3, 7, 64, len(body)):
        decoder = StreamDecoder(agent_pb2.AgentServerMessage)
        out = []
        for start in range(0, len(body), chunk):
            out.extend(decoder.feed(body[start : start + chunk]))
        decoder.close()
        assert out == msgs and decoder.ended and decoder.error == err


def test_encoders_match_the_twin_framing() -> None:
    msg = agent_pb2.AgentServerMessage(
        interaction_update=agent_pb2.InteractionUpdate(text_delta=agent_pb2.TextDeltaUpdate(text="x" * 300))
    )
    payload = msg.SerializeToString()
    twin = hotpath.twins["frames"]
    assert encode_server_message(msg) == twin.encode_frame(payload)
    assert encode_server_messages([msg, msg]) == twin.encode_frames([payload, payload])
    assert encode_unary(msg) == payload
    assert end_stream_ok() == twin.encode_end_stream(b"{}")


@pytest.fixture(params=["active", "python-twin"])
def framing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the active hot path and again with the pure twin swapped in."""
    if request.param == "python-twin":
        from cursor_byok.protocol import bidi, codec

        twin = hotpath.twins["frames"]
        for name in ("FrameDecoder", "encode_frame", "encode_frames", "encode_end_stream"):
            monkeypatch.setattr(codec, name, getattr(twin, name))
        monkeypatch.setattr(bidi, "decode_hex", twin.decode_hex)
    return str(request.param)


def test_codec_behaves_the_same_on_either_framing(framing: str) -> None:
    from cursor_byok.protocol import decode_bidi_append, decode_stream

    client = agent_pb2.AgentClientMessage(client_heartbeat=agent_pb2.ClientHeartbeat())
    req = aiserver_pb2.BidiAppendRequest(
        data=client.SerializeToString().hex().upper(),
        request_id=aiserver_pb2.BidiRequestId(request_id="r"),
        append_seqno=4,
    ).SerializeToString()
    enveloped = hotpath.encode_frame(req)
    assert decode_bidi_append(enveloped).variant == "client_heartbeat"
    for bad, code in ((enveloped[:-1], "invalid_argument"), (enveloped[:1] + b"\xff\xff\xff\xff", "resource_exhausted")):
        with pytest.raises(ConnectError) as info:
            decode_bidi_append(bad)
        assert info.value.code == code
    server = agent_pb2.AgentServerMessage(
        interaction_update=agent_pb2.InteractionUpdate(heartbeat=agent_pb2.HeartbeatUpdate())
    )
    body = encode_server_message(server) + end_stream_ok()
    result = decode_stream(body)
    assert result.messages == [server] and result.ended and result.error is None
