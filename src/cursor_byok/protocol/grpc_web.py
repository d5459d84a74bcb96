"""gRPC-Web beside Connect (sans-IO): the same envelopes, a different end of stream.

A gRPC-Web body ends with a trailer frame (flag 0x80) whose payload is HTTP/1-style header lines:
`grpc-status` (the gRPC number of the Connect code), `grpc-message` (percent-encoded) and, with
details, `grpc-status-details-bin` (a base64 `google.rpc.Status` carrying each detail as an Any).
Streams are written Connect-first (the run's output is shared by every reader), so a gRPC-Web reader
turns the Connect end-of-stream frame it reaches into this trailer: once per call, off the per-frame
path.
"""
from __future__ import annotations

import base64
import urllib.parse

from cursor_byok.hotpath import FLAG_END_STREAM, encode_frame

from .codec import parse_end_stream
from .errors import ERROR_DETAILS_TYPE, ConnectError, ErrorDetailsSpec, RawErrorDetail

__all__ = ["FLAG_TRAILER", "GRPC_STATUS", "connect_end_to_trailer", "parse_trailer", "trailer_frame"]

FLAG_TRAILER = 0x80
# gRPC status numbers; Connect's codes are the same list under lower-case names.
GRPC_STATUS: dict[str, int] = {
    code: number
    for number, code in enumerate(
        (
            "ok", "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists",
            "permission_denied", "resource_exhausted", "failed_precondition", "aborted", "out_of_range",
            "unimplemented", "internal", "unavailable", "data_loss", "unauthenticated",
        )
    )
}
_CODES = {number: code for code, number in GRPC_STATUS.items()}
_TYPE_PREFIX = "type.googleapis.com/"
_OK_TRAILER = encode_frame(b"grpc-status: 0\r\n", FLAG_TRAILER)
_HEADER = 5


def trailer_frame(err: ConnectError | None) -> bytes:
    """The trailer frame that ends a gRPC-Web body: status 0, or the error with its details."""
    if err is None:
        return _OK_TRAILER
    status = GRPC_STATUS[err.code]
    lines = [f"grpc-status: {status}"]
    if err.message:
        lines.append(f"grpc-message: {urllib.parse.quote(err.message, safe='')}")
    if err.details:
        lines.append(f"grpc-status-details-bin: {_status_details(status, err)}")
    return encode_frame(("\r\n".join(lines) + "\r\n").encode("ascii"), FLAG_TRAILER)


def parse_trailer(payload: bytes) -> ConnectError | None:
    """The error a trailer frame's payload (`trailer_frame`'s) carries; None for grpc-status 0."""
    fields: dict[str, str] = {}
    for line in payload.decode("latin-1").split("\r\n"):
        name, _, value = line.partition(":")
        fields.setdefault(name.strip().lower(), value.strip())
    status = fields.get("grpc-status", "")
    if status == "0":
        return None
    code = _CODES.get(int(status), "unknown") if status.isdigit() else "unknown"
    details: list[RawErrorDetail] = []
    if encoded := fields.get("grpc-status-details-bin"):
        from google.rpc.status_pb2 import Status

        try:
            message = Status.FromString(base64.b64decode(encoded + "=" * (-len(encoded) % 4)))
        except ValueError:  # binascii.Error and protobuf's DecodeError alike
            message = Status()
        details = [RawErrorDetail(d.type_url.removeprefix(_TYPE_PREFIX), d.value) for d in message.details]
    return ConnectError(code, urllib.parse.unquote(fields.get("grpc-message", "")), details)


def _status_details(status: int, err: ConnectError) -> str:
    from google.rpc.status_pb2 import Status

    message = Status(code=status, message=err.message)
    for detail in err.details:
        any_detail = message.details.add()
        if isinstance(detail, RawErrorDetail):
            any_detail.type_url, any_detail.value = _TYPE_PREFIX + detail.type, detail.value
        else:
            value = detail.to_bytes() if isinstance(detail, ErrorDetailsSpec) else bytes(detail)
            any_detail.type_url, any_detail.value = _TYPE_PREFIX + ERROR_DETAILS_TYPE, value
    return base64.b64encode(message.SerializeToString()).decode("ascii").rstrip("=")


def connect_end_to_trailer(body: bytes) -> bytes:
    """`body` (whole envelopes) with its last frame, when that is Connect's end of stream, turned
    into gRPC-Web's trailer frame; anything else is returned as it is."""
    position, last = 0, -1
    while position + _HEADER <= len(body):
        last = position
        position += _HEADER + int.from_bytes(body[position + 1 : position + _HEADER], "big")
    if last < 0 or position != len(body) or not body[last] & FLAG_END_STREAM:
        return body
    return body[:last] + trailer_frame(parse_end_stream(body[last + _HEADER :]))
