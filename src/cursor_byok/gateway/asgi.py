"""Small ASGI helpers shared by the gateway's handlers (unary replies, refusals, the disconnect watch)."""
from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ..protocol import ConnectError, error_body, http_status_for

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

PROTO_HEADERS = [(b"content-type", b"application/proto")]
STREAM_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"connect-protocol-version", b"1"),
]


# After refusing an oversized body, up to this much more of it is read and dropped, so that a client
# still sending gets to read the refusal (closing on it mid-upload resets the connection first).
DISCARD_AFTER_REFUSAL = 64 * 1024 * 1024
# A body refused from its declared length is answered at once, then read and dropped while the client
# keeps sending (a lingering close, as nginx does): a client still uploading reads the refusal instead
# of a reset. The linger ends at the body's end, after LINGER_SECONDS, or once nothing came for
# LINGER_IDLE_SECONDS: a client that sends nothing holds the connection no longer than that.
LINGER_SECONDS = 5.0
LINGER_IDLE_SECONDS = 0.5


class BodyTooLarge(ConnectError):
    """A body declared larger than its route takes: refused before any of it is read (413), then
    the connection is closed after a bounded lingering read (`reply_error`); nothing is kept."""

    def __init__(self, limit: int, receive: Receive) -> None:
        super().__init__("resource_exhausted", f"request body exceeds the {limit}-byte limit")
        self.receive = receive


def declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def discard(receive: Receive, budget: int, idle: float | None = None) -> None:
    """Read and drop the rest of a request body (at most `budget` bytes; nothing is kept), until
    nothing came for `idle` seconds if given."""
    while budget > 0:
        try:
            async with asyncio.timeout(idle):
                message = await receive()
        except TimeoutError:
            return
        if message["type"] == "http.disconnect":
            return
        budget -= len(message.get("body", b""))
        if not message.get("more_body", False):
            return


async def reply(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


# An append's answer (200, no body), the same every time: its headers are built once (a tuple, so
# that no reader of one answer can change the next).
_EMPTY_PROTO_HEADERS = (*PROTO_HEADERS, (b"content-length", b"0"))


async def reply_proto(send: Send, body: bytes = b"") -> None:
    if body:
        await reply(send, 200, body, PROTO_HEADERS)
        return
    await send({"type": "http.response.start", "status": 200, "headers": _EMPTY_PROTO_HEADERS})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


ERROR_HEADERS = [(b"content-type", b"application/json")]
# A request we stopped reading mid-body leaves the connection unusable: close it after the answer.
CLOSE_HEADERS = [*ERROR_HEADERS, (b"connection", b"close")]
UNSUPPORTED_ENCODING_HEADERS = [*ERROR_HEADERS, (b"accept-encoding", b"gzip, identity")]


class BodyTimeout(ConnectError):
    """A request body still incomplete after server.body_read_timeout_seconds: 408, and the
    connection is closed (a slow client must not pin it)."""

    def __init__(self, seconds: float) -> None:
        super().__init__("deadline_exceeded", f"request body not received within {seconds:g}s (server.body_read_timeout_seconds)")


# Connect errors this process sent (replies and stream terminals), by code, for /metrics.
ERROR_REPLIES: collections.Counter[str] = collections.Counter()


async def reply_error(send: Send, err: ConnectError, status: int | None = None) -> None:
    ERROR_REPLIES[err.code] += 1
    if isinstance(err, BodyTimeout):
        await reply(send, 408, error_body(err), CLOSE_HEADERS)
        return
    headers = ERROR_HEADERS
    if isinstance(err, BodyTooLarge):
        await reply(send, 413, error_body(err), CLOSE_HEADERS)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LINGER_SECONDS):
                await discard(err.receive, DISCARD_AFTER_REFUSAL, LINGER_IDLE_SECONDS)
        return
    if status is None:
        status = http_status_for(err.code)
        if err.code == "unimplemented":
            # Our routes are implemented: a handler's unimplemented is a content encoding we do not
            # speak. Connect's status for the code (501), and what we do speak, as its spec asks.
            headers = UNSUPPORTED_ENCODING_HEADERS
    await reply(send, status, error_body(err), headers)


class DisconnectWatch:
    """Once the request body is read: calls `on_leave` when the client goes away. A callback on
    the server's pending receive rather than a task of its own (granian's receive is a future, as
    a task would wait on it): every RunSSE has one, and a task costs its start a loop step, its
    registration and its cancellation. A `receive` that is a plain coroutine gets a task."""

    __slots__ = ("_receive", "_on_leave", "_pending", "ended")

    def __init__(self, receive: Receive, on_leave: Callable[[], object]) -> None:
        self._receive = receive
        self._on_leave = on_leave
        self._pending: asyncio.Future[Message] | None = None
        self.ended = False  # the client left (`on_leave` was called), or receiving failed
        self._next()

    def _next(self) -> None:
        try:
            pending = self._receive()
        except Exception:  # noqa: BLE001 - nothing more to receive: as a watching task would have ended
            self.ended = True
            return
        try:
            pending.add_done_callback(self._received)  # type: ignore[attr-defined]
        except AttributeError:
            pending = asyncio.ensure_future(pending)
            pending.add_done_callback(self._received)
        self._pending = pending  # type: ignore[assignment]

    def _received(self, pending: asyncio.Future[Message]) -> None:
        if pending is not self._pending or pending.cancelled():
            return  # stopped
        self._pending = None
        if pending.exception() is not None:
            self.ended = True  # nothing more to receive: as a watching task would have ended
            return
        if pending.result()["type"] == "http.disconnect":
            self.ended = True
            self._on_leave()
            return
        self._next()  # the end of the body (read up to its declared length, not past it)

    def stop(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.cancel()


def header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope["headers"]:
        if k == name:
            return v.decode("latin-1")
    return None
