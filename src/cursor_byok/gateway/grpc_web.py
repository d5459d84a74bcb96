"""gRPC-Web on the agent routes: the handlers write Connect, a wrapper around `send` rewrites the
end of each response as gRPC-Web (as a Connect server such as connect-go serves both).

Requests need nothing: gRPC-Web's request body is the same envelope, its compression and deadline
headers are read with Connect's (`parse_request_headers`). Responses are always 200 with the
`application/grpc-web+proto` type: a unary reply becomes its message in one envelope followed by
the trailer frame, a unary error only the trailer frame; a stream's Connect end-of-stream frame
becomes the trailer frame. A Connect client's response is sent as it was: the wrapper exists only
for a gRPC-Web request.
"""
from __future__ import annotations

import json

from ..hotpath import encode_frame
from ..protocol import ConnectError, connect_end_to_trailer, trailer_frame
from .asgi import Message, Scope, Send
from .guard import GRPC_WEB_TYPES

_RESPONSE_TYPE = (b"content-type", b"application/grpc-web+proto")
# Connect's own headers, which describe a body this is no longer.
_REPLACED = frozenset({b"content-type", b"content-length", b"connect-protocol-version"})


def is_grpc_web(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.split(b";", 1)[0].strip().lower() in GRPC_WEB_TYPES
    return False


def _headers(start: Message, body: bytes | None) -> list[tuple[bytes, bytes]]:
    headers = [(k, v) for k, v in start.get("headers", ()) if k not in _REPLACED]
    headers.append(_RESPONSE_TYPE)
    if body is not None:
        headers.append((b"content-length", str(len(body)).encode()))
    return headers


def stream_send(send: Send) -> Send:
    """`send` for a streaming handler answering a gRPC-Web request."""

    async def grpc_web(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": _headers(message, None)}
        elif not message.get("more_body", False) and message.get("body"):
            message = {**message, "body": connect_end_to_trailer(message["body"])}
        await send(message)

    return grpc_web


def unary_send(send: Send) -> Send:
    """`send` for a unary handler (a start, then its whole body) answering a gRPC-Web request."""
    start: Message = {}

    async def grpc_web(message: Message) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
            return
        body = message.get("body", b"")
        if start["status"] == 200:
            body = encode_frame(body) + trailer_frame(None)
        else:
            body = trailer_frame(_error_of(body))
        await send({"type": "http.response.start", "status": 200, "headers": _headers(start, body)})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return grpc_web


def _error_of(body: bytes) -> ConnectError:
    """The Connect error a unary error reply's JSON body holds."""
    try:
        return ConnectError.from_json_obj(json.loads(body))
    except (ValueError, ConnectError):
        return ConnectError("unknown", "unreadable error reply")
