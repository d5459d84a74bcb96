"""BidiAppend request decoding: one AgentClientMessage per unary append (PROTOCOL.md 1.3, 2.8)."""
from __future__ import annotations

import msgspec
from google.protobuf.message import DecodeError

from cursor_byok.hotpath import HexDecodeError, decode_hex

from .codec import DEFAULT_MAX_MESSAGE_SIZE, decode_unary
from .compat import which
from .errors import ConnectError
from .ids import check_client_message_ids, check_id
from .pb import agent_v1_pb2, aiserver_v1_pb2

__all__ = ["BidiAppend", "client_message", "decode_bidi_append"]

_BidiAppendRequest = aiserver_v1_pb2.BidiAppendRequest
_parse_request = _BidiAppendRequest.FromString
_parse_client_message = agent_v1_pb2.AgentClientMessage.FromString


class BidiAppend(msgspec.Struct, frozen=True):
    """One decoded append. Immutable value (a msgspec Struct: constructs ~20x faster than a
    frozen dataclass, and this runs once per client message).

    `raw` is the AgentClientMessage's serialized bytes as received; `binary` says whether they
    came in `data_binary` rather than hex `data`; `variant` is the set oneof field of
    `AgentClientMessage.message`, None when the client sent a variant this schema lacks (its
    bytes survive as unknown fields of `message`).
    """

    request_id: str
    append_seqno: int
    message: agent_v1_pb2.AgentClientMessage
    raw: bytes
    binary: bool
    variant: str | None


def _invalid(message: str) -> ConnectError:
    return ConnectError("invalid_argument", message)


def decode_bidi_append(
    body: bytes,
    *,
    max_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    content_encoding: str = "identity",
) -> BidiAppend:
    """Decode a BidiAppend body (raw protobuf or one envelope) and the client message inside.

    The message may come as hex in `data` (either case) or as bytes in `data_binary`; both
    decode to the same BidiAppend apart from `binary`. If both are set they must agree.
    Errors are ConnectError invalid_argument with the messages of PROTOCOL.md 2.8; every identifier
    the message carries is checked here (`check_client_message_ids`), once, before anyone keys
    anything by it.
    """
    # Runs once per client message: the common case (raw, identity, hex) is kept inline.
    if content_encoding == "identity" and body and body[0] > 1 and len(body) <= max_size:
        try:
            req = _parse_request(body)
        except DecodeError as exc:
            raise _invalid(f"protobuf decode error: {exc}") from None
    else:
        req = decode_unary(body, _BidiAppendRequest, max_size=max_size, content_encoding=content_encoding)
    request_id = req.request_id.request_id
    if not request_id:
        raise _invalid("protocol error: BidiAppend request_id is required")
    check_id("request_id", request_id)
    seqno = req.append_seqno
    if seqno < 0:
        raise _invalid(f"protocol error: BidiAppend append_seqno must be >= 0, got {seqno}")
    data = req.data
    binary = False
    if data:
        try:
            raw = decode_hex(data)
        except HexDecodeError as exc:
            raise _invalid(f"protocol error: invalid BidiAppend hex: {exc}") from None
        if req.data_binary:
            binary = True
            if req.data_binary != raw:
                raise _invalid("protocol error: BidiAppend data and data_binary disagree")
    else:
        raw = req.data_binary
        if not raw:
            raise _invalid("protocol error: BidiAppend data is empty")
        binary = True
    return client_message(request_id, seqno, raw, binary=binary)


def requested_model_id(run_request: agent_v1_pb2.AgentRunRequest) -> str:
    """`requested_model.model_id` when set, else `model_details.model_id` (PROTOCOL.md 2.1)."""
    if run_request.HasField("requested_model") and run_request.requested_model.model_id:
        return run_request.requested_model.model_id
    return run_request.model_details.model_id


def client_message(request_id: str, seqno: int, raw: bytes, *, binary: bool = True) -> BidiAppend:
    """One serialized AgentClientMessage as the append it stands for: a BidiAppend's, or one
    message of a `Run` stream (whose position in the stream is its seqno)."""
    try:
        message = _parse_client_message(raw)
    except DecodeError as exc:
        raise _invalid(f"protobuf decode error: {exc}") from None
    variant = which(message, "message")
    check_client_message_ids(message, variant)
    return BidiAppend(request_id, seqno, message, raw, binary, variant)

