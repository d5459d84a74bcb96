"""gRPC-Web's end of stream and request headers (sans-IO); the routes are tested end to end in
tests/e2e/test_connect_rules.py and by Buf's clients in tests/clients/connect."""
from __future__ import annotations

import base64

import pytest
from google.rpc.status_pb2 import Status
from hypothesis import given, strategies as st

from cursor_byok import hotpath
from cursor_byok.protocol import (
    CONNECT_CODES,
    GRPC_STATUS,
    ConnectError,
    RawErrorDetail,
    aiserver_pb2,
    connect_end_to_trailer,
    encode_server_message,
    end_stream_error,
    end_stream_ok,
    parse_request_headers,
    parse_trailer,
    provider_error,
    trailer_frame,
)


def trailer_fields(frame: bytes) -> dict[str, str]:
    [(flags, payload)] = hotpath.FrameDecoder().feed(frame)
    assert flags == 0x80
    lines = payload.decode("ascii").split("\r\n")
    assert lines[-1] == ""
    return dict(line.split(": ", 1) for line in lines[:-1])


def test_every_connect_code_has_its_grpc_number() -> None:
    assert set(GRPC_STATUS) == CONNECT_CODES | {"ok"}
    assert (GRPC_STATUS["ok"], GRPC_STATUS["canceled"], GRPC_STATUS["unauthenticated"]) == (0, 1, 16)


def test_an_ok_trailer() -> None:
    assert trailer_fields(trailer_frame(None)) == {"grpc-status": "0"}


def test_an_error_trailer_carries_code_message_and_details() -> None:
    err = provider_error("rate limited: 50% of quota\nused", retryable=False)
    fields = trailer_fields(trailer_frame(err))
    assert fields["grpc-status"] == "14"
    assert fields["grpc-message"] == "rate%20limited%3A%2050%25%20of%20quota%0Aused"
    status = Status.FromString(base64.b64decode(fields["grpc-status-details-bin"] + "=="))
    assert (status.code, status.message) == (14, err.message)
    [detail] = status.details
    assert detail.type_url == "type.googleapis.com/aiserver.v1.ErrorDetails"
    assert aiserver_pb2.ErrorDetails.FromString(detail.value).error == aiserver_pb2.ErrorDetails.Error.ERROR_PROVIDER_ERROR


def test_a_detail_of_another_type_keeps_its_type() -> None:
    fields = trailer_fields(trailer_frame(ConnectError("internal", "x", [RawErrorDetail("acme.v1.Thing", b"\x08\x01")])))
    [detail] = Status.FromString(base64.b64decode(fields["grpc-status-details-bin"] + "==")).details
    assert (detail.type_url, detail.value) == ("type.googleapis.com/acme.v1.Thing", b"\x08\x01")


def test_a_trailer_reads_back_as_the_error_it_was_made_of() -> None:
    [(_, ok)] = hotpath.FrameDecoder().feed(trailer_frame(None))
    assert parse_trailer(ok) is None
    err = ConnectError("resource_exhausted", "slow down: 50% / minute", [RawErrorDetail("x.v1.Other", b"\x08\x01")])
    [(_, payload)] = hotpath.FrameDecoder().feed(trailer_frame(err))
    back = parse_trailer(payload)
    assert back is not None and (back.code, back.message, back.details) == (err.code, err.message, err.details)


def test_the_end_of_a_connect_body_becomes_the_trailer() -> None:
    data = encode_server_message(aiserver_pb2.BidiAppendResponse()) + encode_server_message(aiserver_pb2.ErrorDetails(error=3))
    err = ConnectError("unavailable", "gone")
    assert connect_end_to_trailer(data + end_stream_error(err)) == data + trailer_frame(err)
    assert connect_end_to_trailer(end_stream_ok()) == trailer_frame(None)


@given(st.lists(st.binary(max_size=40), max_size=5), st.integers(min_value=0, max_value=4))
def test_a_body_without_an_end_frame_is_left_as_it_is(payloads: list[bytes], cut: int) -> None:
    """Data frames only, or a body that does not end on a frame boundary: nothing to turn."""
    body = b"".join(hotpath.encode_frame(p) for p in payloads)
    assert connect_end_to_trailer(body) == body
    whole = body + end_stream_ok()
    assert connect_end_to_trailer(whole[: len(whole) - 1 - cut]) == whole[: len(whole) - 1 - cut]


@pytest.mark.parametrize(
    ("value", "ms"), [("5S", 5000), ("250m", 250), ("3M", 180_000), ("1H", 3_600_000), ("1500u", 1), ("7n", 1), ("0m", 0)]
)
def test_grpc_timeout_in_milliseconds(value: str, ms: int) -> None:
    assert parse_request_headers({"grpc-timeout": value}).timeout_ms == ms


@pytest.mark.parametrize("value", ["", "S", "5", "5s", "123456789m", "-1S", "1.5S"])
def test_a_malformed_grpc_timeout_is_invalid_argument(value: str) -> None:
    with pytest.raises(ConnectError) as raised:
        parse_request_headers({"grpc-timeout": value})
    assert raised.value.code == "invalid_argument"


def test_grpc_encoding_is_read_like_connects() -> None:
    assert parse_request_headers({"grpc-encoding": "gzip"}).content_encoding == "gzip"
    with pytest.raises(ConnectError) as raised:
        parse_request_headers({"grpc-encoding": "snappy"})
    assert raised.value.code == "unimplemented"
