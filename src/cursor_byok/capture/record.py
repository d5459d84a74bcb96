"""An exchange as a capture keeps it: decoded through the project's own protos, redacted. Runs in
the writer's thread, after the exchange ended, never on the loop while it streams."""
from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from ..hotpath import FLAG_END_STREAM, FrameDecoder, HotPathError
from ..protocol import (
    BIDI_APPEND_PATH, FLAG_TRAILER, RUN_PATH, RUN_SSE_PATH, ConnectError, agent_pb2, aiserver_pb2, decode_unary, error_body,
    parse_request_headers, parse_trailer,
)
from .redact import Redactor
from .tap import Exchange

__all__ = ["record_of"]

GroupKey = tuple[str, str]  # (file kind, key): the exchanges of one stream share it


def record_of(exchange: Exchange, redactor: Redactor, serial: int, pace: Callable[[], None]) -> tuple[GroupKey, dict[str, Any]]:
    """The stream an exchange belongs to and what the capture keeps of it (times absolute, in the
    loop's clock: the writer makes them offsets from the stream's start). `serial`: a number no
    other exchange of this capture has; `pace()` is called after each frame of a stream."""
    try:  # Connect's encoding headers or gRPC-Web's, read as the gateway reads them
        encoding = parse_request_headers(exchange.request_headers).content_encoding
    except ConnectError:  # refused by the gateway too: its body is kept undecoded
        encoding = "identity"
    out: dict[str, Any] = {
        "path": redactor.path(exchange.path),
        "method": exchange.method,
        "at": exchange.started,
        "duration_ms": round((exchange.ended - exchange.started) * 1000, 1),
        "request_headers": redactor.headers(exchange.request_headers),
        "status": exchange.status,
        "response_headers": redactor.headers(exchange.response_headers),
    }
    if exchange.truncated:
        out["truncated"] = True
    if exchange.disconnected is not None:
        out["client_disconnected_at"] = exchange.disconnected
    body = b"".join(chunk for _, chunk in exchange.incoming)
    at = exchange.incoming[0][0] if exchange.incoming else exchange.started
    if exchange.path == BIDI_APPEND_PATH:
        key, frame = _append(body, encoding, redactor)
        out["frames"] = [{"dir": "client", "at": at, **frame}, *_unary_answer(exchange, redactor)]
        return ("agent-sse", key), out
    if exchange.path == RUN_SSE_PATH:
        try:
            request = decode_unary(body, agent_pb2.BidiRequestId, content_encoding=encoding)
            key, first = request.request_id, redactor.frame(request.SerializeToString(), agent_pb2.BidiRequestId)
        except ConnectError:
            key, first = f"undecodable-{serial}", redactor.opaque(body)
        out["frames"] = [{"dir": "client", "at": at, **first}, *_stream(exchange.outgoing, "server", agent_pb2.AgentServerMessage, redactor, pace)]
        return ("agent-sse", redactor.scrub(key)), out
    if exchange.path == RUN_PATH:
        client = _stream(exchange.incoming, "client", agent_pb2.AgentClientMessage, redactor, pace)
        server = _stream(exchange.outgoing, "server", agent_pb2.AgentServerMessage, redactor, pace)
        out["frames"] = sorted(client + server, key=lambda f: f["at"])
        return ("agent-run", str(serial)), out
    out["frames"] = [{"dir": "client", "at": at, **redactor.opaque(body)}, *_unary_answer(exchange, redactor)]
    return ("rpc", str(serial)), out


def _append(body: bytes, encoding: str, redactor: Redactor) -> tuple[str, dict[str, Any]]:
    try:
        request = decode_unary(body, aiserver_pb2.BidiAppendRequest, content_encoding=encoding)
    except ConnectError:
        return "undecodable", redactor.opaque(body)
    if request.data:
        try:
            raw, form = bytes.fromhex(request.data), "hex"
        except ValueError:
            raw, form = b"", "bad-hex"
    else:
        raw, form = request.data_binary, "binary"
    request_id = redactor.scrub(request.request_id.request_id)
    envelope = {"request_id": request_id, "append_seqno": request.append_seqno, "encoding": form}
    return request_id, {"append": envelope, **redactor.frame(raw, agent_pb2.AgentClientMessage)}


def _unary_answer(exchange: Exchange, redactor: Redactor) -> list[dict[str, Any]]:
    body = b"".join(chunk for _, chunk in exchange.outgoing)
    at = exchange.outgoing[0][0] if exchange.outgoing else exchange.ended
    answer: dict[str, Any] = {"dir": "server", "at": at, "status": exchange.status}
    if exchange.status != 200 and body[:1] == b"{":
        answer["error"] = _error_json(body, redactor)
    elif body:
        answer.update(redactor.opaque(body))
        if (error := _grpc_web_error(exchange, body)) is not None:
            answer["error"] = _error_json(error_body(error), redactor)
    return [answer]


def _grpc_web_error(exchange: Exchange, body: bytes) -> ConnectError | None:
    """A gRPC-Web reply's error: in its trailer frame, the body's last (its status is 200)."""
    if not dict(exchange.response_headers).get(b"content-type", b"").startswith(b"application/grpc-web"):
        return None
    try:
        frames = FrameDecoder().feed(body)
    except HotPathError:
        return None
    return parse_trailer(frames[-1][1]) if frames and frames[-1][0] & FLAG_TRAILER else None


def _stream(
    chunks: list[tuple[float, bytes]], direction: str, message_type: type, redactor: Redactor, pace: Callable[[], None]
) -> list[dict[str, Any]]:
    decoder = FrameDecoder(gzip=True)
    frames: list[dict[str, Any]] = []
    for at, chunk in chunks:
        try:
            parsed = decoder.feed(chunk)
        except HotPathError as exc:
            frames.append({"dir": direction, "at": at, "unparsable": str(exc)[:200], **redactor.opaque(chunk)})
            return frames
        for flags, payload in parsed:
            if flags & FLAG_END_STREAM:
                frames.append({"dir": direction, "at": at, "end_stream": _error_json(payload, redactor)})
            elif flags & FLAG_TRAILER:  # gRPC-Web's end of stream: recorded as Connect's
                error = parse_trailer(payload)
                frames.append({"dir": direction, "at": at, "end_stream": {} if error is None else _error_json(error_body(error), redactor)})
            else:
                frames.append({"dir": direction, "at": at, **redactor.frame(payload, message_type)})
            pace()
    return frames


def _error_json(payload: bytes, redactor: Redactor) -> dict[str, Any]:
    """An end-of-stream or unary error body: code kept, message scrubbed of secrets, details kept
    only as their types (and their bytes with content)."""
    try:
        doc = json.loads(payload)
    except ValueError:
        return redactor.opaque(payload)
    if not isinstance(doc, dict):
        return redactor.opaque(payload)
    error = doc.get("error", doc)  # an end-of-stream frame nests it; a unary error body is it
    if error == {}:
        return {}  # a stream that ended normally
    if not isinstance(error, dict):
        return redactor.opaque(payload)
    out: dict[str, Any] = {"code": str(error.get("code", ""))}
    if isinstance(error.get("message"), str):
        out["message"] = redactor.scrub(error["message"])
    details = []
    for detail in error.get("details") or ():
        if isinstance(detail, dict):
            try:
                value = base64.b64decode(str(detail.get("value", "")) + "==")  # Connect sends it unpadded
            except ValueError:
                value = b""
            details.append({"type": redactor.scrub(str(detail.get("type", ""))), **redactor.opaque(value)})
    if details:
        out["details"] = details
    return out
