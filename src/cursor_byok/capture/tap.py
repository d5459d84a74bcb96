"""The gateway's hook: a wrapper around an agent RPC's receive and send that notes each body chunk
with its time, and hands the whole exchange to the writer when the request ends. Nothing is decoded
here: on the loop, a chunk costs one clock read and one list append."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..local_trust import TOKEN_PATH_PREFIX

__all__ = ["Exchange", "recorded_path", "tap"]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Route = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_EXCHANGE_BYTES = 64 * 1024 * 1024  # beyond: the chunks are counted, not kept
_RPC_PREFIXES = ("/agent.v1.", "/aiserver.v1.")


def recorded_path(path: str) -> str | None:
    """The RPC path to record (a token prefix taken off), None for what is not a Cursor RPC."""
    if path.startswith(TOKEN_PATH_PREFIX):
        path = "/" + path[len(TOKEN_PATH_PREFIX):].partition("/")[2]
    return path if path.startswith(_RPC_PREFIXES) else None


class Exchange:
    """One HTTP exchange as it went: request headers, body chunks each way with their loop time."""

    __slots__ = ("path", "method", "request_headers", "started", "wall", "incoming", "outgoing", "status",
                 "response_headers", "ended", "disconnected", "kept", "truncated")

    def __init__(self, path: str, scope: Scope, now: float) -> None:
        self.path = path
        self.method: str = scope["method"]
        self.request_headers: list[tuple[bytes, bytes]] = list(scope["headers"])
        self.started = now
        self.wall = time.time()
        self.incoming: list[tuple[float, bytes]] = []
        self.outgoing: list[tuple[float, bytes]] = []
        self.status = 0
        self.response_headers: list[tuple[bytes, bytes]] = []
        self.ended = now
        self.disconnected: float | None = None
        self.kept = 0
        self.truncated = False

    def keep(self, into: list[tuple[float, bytes]], now: float, body: bytes) -> None:
        if self.kept + len(body) > MAX_EXCHANGE_BYTES:
            self.truncated = True
            return
        self.kept += len(body)
        into.append((now, body))


async def tap(scope: Scope, receive: Receive, send: Send, route: Route, path: str, done: Callable[[Exchange], None]) -> None:
    """Run `route` with its receive and send recorded; `done(exchange)` once it returns or fails."""
    clock = asyncio.get_running_loop().time
    exchange = Exchange(path, scope, clock())

    async def receiving() -> dict[str, Any]:
        message = await receive()
        if message["type"] == "http.request":
            body = message.get("body", b"")
            if body:
                exchange.keep(exchange.incoming, clock(), body)
        elif message["type"] == "http.disconnect" and exchange.disconnected is None:
            exchange.disconnected = clock()
        return message

    def sending(message: dict[str, Any]) -> Awaitable[None]:
        # Plain function returning the server's own awaitable: a send that completes at once still
        # does (the RunSSE writer relies on it, gateway/stream.py DirectSend).
        kind = message["type"]
        if kind == "http.response.body":
            body = message.get("body", b"")
            if body:
                exchange.keep(exchange.outgoing, clock(), body)
        elif kind == "http.response.start":
            exchange.status = message["status"]
            exchange.response_headers = list(message.get("headers", ()))
        return send(message)

    try:
        await route(scope, receiving, sending)
    finally:
        exchange.ended = clock()
        done(exchange)
