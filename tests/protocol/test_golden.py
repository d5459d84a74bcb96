"""Golden tests against shared/cursor-wire/fixtures: decode what the wire carries, and encode
byte-for-byte what the server must send."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cursor_byok.hotpath import encode_end_stream, encode_frame
from cursor_byok.protocol import (
    SERVER_HEARTBEAT_FRAME,
    BidiAppend,
    ConnectError,
    ErrorDetailsSpec,
    agent_pb2,
    aiserver_pb2,
    decode_bidi_append,
    decode_stream,
    decode_unary,
    encode_server_message,
    encode_server_messages,
    end_stream_error,
    end_stream_ok,
    error_body,
    model_not_found_error,
    parse_end_stream,
)

MISSING_MODEL = "cursor-byok-nonexistent-model-20261006-005e91c3d3b6"
EXPECTED_DETAIL = ErrorDetailsSpec(
    error=aiserver_pb2.ErrorDetails.Error.ERROR_BAD_MODEL_NAME,
    title="AI Model Not Found",
    detail=f"Unknown model ID: {MISSING_MODEL}",
    is_retryable=False,
    show_request_id=False,
    is_expected=True,
)


def _hex_file(path: Path) -> bytes:
    return bytes.fromhex(path.read_text(encoding="ascii").strip())


# --- upstream model-not-found error -------------------------------------------------------------


def test_model_not_found_frame_decodes(fixtures_dir: Path) -> None:
    frame = _hex_file(fixtures_dir / "model_not_found_end_stream.frame.hex")
    payload = (fixtures_dir / "model_not_found_end_stream.json").read_bytes().strip()
    result = decode_stream(frame)
    assert result.messages == [] and result.ended
    err = result.error
    assert err is not None
    assert (err.code, err.message) == ("not_found", "Error")
    assert err.details == [EXPECTED_DETAIL]
    assert err.details[0].error == 5  # ERROR_BAD_MODEL_NAME
    assert parse_end_stream(payload) == err
    assert err.http_status == 404


def test_model_not_found_details_bytes_match_fixture(fixtures_dir: Path) -> None:
    pb = _hex_file(fixtures_dir / "model_not_found_error_details.pb.hex")
    assert EXPECTED_DETAIL.to_bytes() == pb
    assert ErrorDetailsSpec.from_proto(aiserver_pb2.ErrorDetails.FromString(pb)) == EXPECTED_DETAIL


def test_model_not_found_encoder_reproduces_fixture(fixtures_dir: Path) -> None:
    fixture = json.loads((fixtures_dir / "model_not_found_end_stream.json").read_bytes())
    ours = model_not_found_error(MISSING_MODEL)
    frame = end_stream_error(ours)
    # Identical except that we write base64 without padding (as Cursor's own errors do).
    detail = fixture["error"]["details"][0]
    detail["value"] = detail["value"].rstrip("=")
    expected = json.dumps(fixture, separators=(",", ":")).encode()
    assert frame == encode_end_stream(expected)
    assert frame[0] == 0x02 and int.from_bytes(frame[1:5], "big") == len(frame) - 5
    assert decode_stream(frame).error == ours
    assert parse_end_stream(frame[5:]) == parse_end_stream(json.dumps(fixture).encode())
    # The unary (non-stream) form is the bare error object.
    assert json.loads(error_body(ours)) == fixture["error"]


# --- anchor wire examples: server frames ----------------------------------------------------------


def _server(**update: object) -> agent_pb2.AgentServerMessage:
    return agent_pb2.AgentServerMessage(interaction_update=agent_pb2.InteractionUpdate(**update))


def _heartbeat() -> agent_pb2.AgentServerMessage:
    return _server(heartbeat=agent_pb2.HeartbeatUpdate())


def _text_delta() -> agent_pb2.AgentServerMessage:
    return _server(text_delta=agent_pb2.TextDeltaUpdate(text="Hello"))


def _turn_ended() -> agent_pb2.AgentServerMessage:
    return _server(turn_ended=agent_pb2.TurnEndedUpdate(input_tokens=12, output_tokens=3))


@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("server_heartbeat_frame", _heartbeat),
        ("server_text_delta_frame", _text_delta),
        ("server_turn_ended_frame", _turn_ended),
    ],
)
def test_server_frames_encode_byte_for_byte(anchor_frames: dict, name: str, build) -> None:
    expected = bytes.fromhex(anchor_frames[name]["hex"])
    assert encode_server_message(build()) == expected
    decoded = decode_stream(expected)
    assert decoded.messages == [build()] and not decoded.ended


def test_server_frames_decode_as_described(anchor_frames: dict) -> None:
    body = b"".join(
        bytes.fromhex(anchor_frames[n]["hex"])
        for n in ("server_heartbeat_frame", "server_text_delta_frame", "server_turn_ended_frame", "end_stream_ok_frame")
    )
    result = decode_stream(body)
    assert result.ended and result.error is None
    hb, td, te = result.messages
    assert hb.interaction_update.WhichOneof("message") == "heartbeat"
    assert td.interaction_update.text_delta.text == "Hello"
    assert not td.interaction_update.text_delta.is_server_notice
    ended = te.interaction_update.turn_ended
    assert (ended.input_tokens, ended.output_tokens) == (12, 3)
    assert not ended.HasField("cache_read_tokens")  # unset when unknown


def test_heartbeat_reply_constant(anchor_frames: dict) -> None:
    assert SERVER_HEARTBEAT_FRAME == bytes.fromhex(anchor_frames["server_heartbeat_frame"]["hex"])
    assert SERVER_HEARTBEAT_FRAME[5:] == bytes.fromhex("0a026a00")


def test_coalesced_frames_equal_concatenation(anchor_frames: dict) -> None:
    names = ("server_heartbeat_frame", "server_text_delta_frame", "server_turn_ended_frame")
    expected = b"".join(bytes.fromhex(anchor_frames[n]["hex"]) for n in names)
    assert encode_server_messages([_heartbeat(), _text_delta(), _turn_ended()]) == expected
    assert encode_server_messages([]) == b""


def test_end_stream_ok(anchor_frames: dict) -> None:
    frame = bytes.fromhex(anchor_frames["end_stream_ok_frame"]["hex"])
    assert end_stream_ok() == frame
    assert parse_end_stream(frame[5:]) is None


@pytest.mark.parametrize(
    ("name", "code", "message"),
    [
        ("end_stream_cancelled_frame", "canceled", "run was cancelled"),
        ("end_stream_slow_subscriber_frame", "unavailable", "client consumed run output too slowly"),
    ],
)
def test_end_stream_errors(anchor_frames: dict, name: str, code: str, message: str) -> None:
    frame = bytes.fromhex(anchor_frames[name]["hex"])
    assert frame[5:] == anchor_frames[name]["json"].encode()
    err = ConnectError(code, message)
    assert end_stream_error(err) == frame  # message present, details omitted
    assert parse_end_stream(frame[5:]) == err


# --- anchor wire examples: request bodies -------------------------------------------------------


@pytest.mark.parametrize("name", ["bidi_append_client_heartbeat_raw", "bidi_append_client_heartbeat_enveloped"])
def test_bidi_append_heartbeat_bodies(anchor_frames: dict, name: str) -> None:
    append = decode_bidi_append(bytes.fromhex(anchor_frames[name]["hex"]))
    assert append.request_id == "req-1"
    assert append.append_seqno == 1
    assert append.variant == "client_heartbeat"
    assert append.raw == bytes.fromhex("3a00")
    assert append.binary is False
    assert append.message == agent_pb2.AgentClientMessage(client_heartbeat=agent_pb2.ClientHeartbeat())


@pytest.mark.parametrize("name", ["run_sse_request_raw", "run_sse_request_enveloped"])
def test_run_sse_request_bodies(anchor_frames: dict, name: str) -> None:
    req = decode_unary(bytes.fromhex(anchor_frames[name]["hex"]), agent_pb2.BidiRequestId)
    assert req.request_id == "req-1"


# --- BidiAppend forms: hex (either case) or binary, raw or enveloped ----------------------------


def _run_request_message() -> agent_pb2.AgentClientMessage:
    msg = agent_pb2.AgentClientMessage()
    run = msg.run_request
    run.requested_model.model_id = "byok-sonnet"
    run.conversation_id = "conv-1"
    run.run_id = "run-7"
    user = run.action.user_message_action.user_message
    user.text = "héllo, wörld"
    user.message_id = "m-1"
    user.mode = agent_pb2.AGENT_MODE_AGENT
    return msg


def _bodies(msg: agent_pb2.AgentClientMessage) -> dict[str, bytes]:
    raw = msg.SerializeToString()
    rid = aiserver_pb2.BidiRequestId(request_id="0b7c2f7e-7d0b-4f7e-9a8e-3f1f5c0c7a11")
    forms = {
        "hex_lower": aiserver_pb2.BidiAppendRequest(data=raw.hex(), request_id=rid, append_seqno=0),
        "hex_upper": aiserver_pb2.BidiAppendRequest(data=raw.hex().upper(), request_id=rid, append_seqno=0),
        "binary": aiserver_pb2.BidiAppendRequest(data_binary=raw, request_id=rid, append_seqno=0),
        "both": aiserver_pb2.BidiAppendRequest(data=raw.hex(), data_binary=raw, request_id=rid, append_seqno=0),
    }
    bodies: dict[str, bytes] = {}
    for name, req in forms.items():
        body = req.SerializeToString()
        bodies[f"{name}_raw"] = body
        bodies[f"{name}_enveloped"] = encode_frame(body)
    return bodies


def test_all_bidi_append_forms_decode_to_the_same_message() -> None:
    msg = _run_request_message()
    raw = msg.SerializeToString()
    decoded = {name: decode_bidi_append(body) for name, body in _bodies(msg).items()}
    assert len(decoded) == 8
    for name, append in decoded.items():
        assert append.message == msg, name
        assert append.raw == raw, name
        assert append.variant == "run_request", name
        assert append.append_seqno == 0
        assert append.request_id == "0b7c2f7e-7d0b-4f7e-9a8e-3f1f5c0c7a11"
        assert append.binary is (not name.startswith("hex")), name
    assert decoded["hex_lower_raw"].message.run_request.action.user_message_action.user_message.text == "héllo, wörld"


def test_bidi_append_is_an_immutable_value() -> None:
    bodies = _bodies(_run_request_message())
    append = decode_bidi_append(bodies["hex_lower_raw"])
    with pytest.raises(AttributeError):
        append.request_id = "other"  # type: ignore[misc]
    same = BidiAppend(append.request_id, 0, _run_request_message(), append.raw, False, "run_request")
    assert append == same
    assert decode_bidi_append(bodies["binary_raw"]) != same  # differs only in `binary`
