"""gRPC-Web on the local routes: the handlers write Connect, a wrapper around `send` rewrites each
response's framing as gRPC-Web (as a Connect server such as connect-go serves both).

Requests need nothing: gRPC-Web's request body is the same envelope, its compression and deadline
headers are read with Connect's (`parse_request_headers`). What a handler started decides the
rewrite, so one wrapper serves every route:

- a Connect stream (RunSSE, Run; 200): its frames as they are, the end-of-stream frame turned into
  the trailer frame;
- a unary reply (`application/proto`, 200): its message in one envelope, then the trailer frame;
- an error reply (any other status, a JSON Connect error): 200 with the trailer frame alone;
- a reply already in gRPC-Web (upstream's, relayed): untouched.

A Connect client's response is sent as it was: the wrapper exists only for a gRPC-Web request.
"""
from __future__ import annotations

import enum
import json

from ..hotpath import encode_frame
from ..protocol import ConnectError, connect_end_to_trailer, trailer_frame
from .asgi import Message, Scope, Send
from .guard import GRPC_WEB_TYPES, PROTO_TYPES

_GRPC_WEB = b"application/grpc-web"
_RESPONSE_TYPE = (b"content-type", b"application/grpc-web+proto")
# Connect's own headers, which describe a body this is no longer.
_REPLACED = frozenset({b"content-type", b"content-length", b"connect-protocol-version"})


class _Reply(enum.Enum):
    STREAM = "stream"
    UNARY = "unary"
    ERROR = "error"
    RELAYED = "relayed"


def is_grpc_web(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            if value in PROTO_TYPES:  # Connect's, as the IDE sends it: nothing to normalise
                return False
            return value.split(b";", 1)[0].strip().lower() in GRPC_WEB_TYPES
    return False


class GrpcWebSend:
    """`send` for a handler answering a gRPC-Web request."""

    __slots__ = ("_send", "_start", "_kind", "_held")

    def __init__(self, send: Send) -> None:
        self._send = send
        self._start: Message = {}
        self._kind = _Reply.STREAM
        self._held: list[bytes] = []  # a unary or error reply's body until its end

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._start, self._kind = message, _kind_of(message)
            if self._kind is _Reply.RELAYED:
                await self._send(message)
            elif self._kind is _Reply.STREAM:
                await self._send({**message, "headers": _headers(message, None)})
            return
        if self._kind is _Reply.RELAYED:
            await self._send(message)
            return
        body, more = message.get("body", b""), message.get("more_body", False)
        if self._kind is _Reply.STREAM:
            await self._send({**message, "body": connect_end_to_trailer(body)} if not more and body else message)
            return
        self._held.append(body)
        if more:
            return
        whole = b"".join(self._held)
        reply = encode_frame(whole) + trailer_frame(None) if self._kind is _Reply.UNARY else trailer_frame(_error_of(whole))
        await self._send({"type": "http.response.start", "status": 200, "headers": _headers(self._start, reply)})
        await self._send({"type": "http.response.body", "body": reply, "more_body": False})


def _kind_of(start: Message) -> _Reply:
    content_type = next((v for k, v in start.get("headers", ()) if k == b"content-type"), b"")
    if content_type.startswith(_GRPC_WEB):
        return _Reply.RELAYED
    if start["status"] != 200:
        return _Reply.ERROR
    return _Reply.UNARY if content_type == b"application/proto" else _Reply.STREAM


def _headers(start: Message, body: bytes | None) -> list[tuple[bytes, bytes]]:
    headers = [(k, v) for k, v in start.get("headers", ()) if k not in _REPLACED]
    headers.append(_RESPONSE_TYPE)
    if body is not None:
        headers.append((b"content-length", str(len(body)).encode()))
    return headers


def _error_of(body: bytes) -> ConnectError:
    """The Connect error a unary error reply's JSON body holds."""
    try:
        return ConnectError.from_json_obj(json.loads(body))
    except (ValueError, ConnectError):
        return ConnectError("unknown", "unreadable error reply")
