"""RunSSE: find the stream through the binding, replay retained frames, then follow live.

A disconnect only detaches this reader (the run continues, output stays retained); an early RunSSE
waits (bounded) for its first BidiAppend; a late or reconnecting one replays from the start.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from ..conversation import ReplayUnavailable
from ..protocol import ConnectError, agent_pb2, decode_unary, end_stream_error
from .asgi import STREAM_HEADERS, Receive, Scope, Send, read_body, reply_error
from .transport import Route

if TYPE_CHECKING:
    from .app import Gateway

log = logging.getLogger("cursor_byok.gateway.stream")


async def handle_run_sse(gw: Gateway, scope: Scope, receive: Receive, send: Send) -> None:
    try:
        body = await read_body(receive, gw.config.server.max_body_bytes)
        request_id = decode_unary(body, agent_pb2.BidiRequestId, max_size=gw.config.server.max_frame_bytes).request_id
        if not request_id:
            raise ConnectError("invalid_argument", "protocol error: RunSSE request_id is required")
        transport = gw.transports.get_or_create(request_id)
        if transport is None:
            raise ConnectError("resource_exhausted", "too many open transports")
    except ConnectError as err:
        await reply_error(send, err)
        return
    wait = gw.config.server.runsse_wait_seconds
    if not await transport.wait_routed(wait):
        await _only_terminal(send, ConnectError("deadline_exceeded", f"no BidiAppend for request {request_id} within {wait:g}s"))
        return
    if transport.route is Route.UPSTREAM:
        await gw.upstream.forward(scope, receive, send, body=body)
        return
    stream = await gw.conversations.hub.wait_for(request_id, wait)
    if stream is None:
        await _only_terminal(send, ConnectError("not_found", f"no run for request {request_id}"))
        return
    await send({"type": "http.response.start", "status": 200, "headers": STREAM_HEADERS})
    me = asyncio.current_task()
    watcher = asyncio.get_running_loop().create_task(_watch_disconnect(receive, me))
    stream.readers += 1
    position = 0
    try:
        while True:
            try:
                result = await stream.read(position)
            except ReplayUnavailable:
                await send(
                    {
                        "type": "http.response.body",
                        "body": end_stream_error(ConnectError("unavailable", "client consumed run output too slowly")),
                        "more_body": False,
                    }
                )
                return
            position = result.position
            await send({"type": "http.response.body", "body": result.data, "more_body": not result.finished})
            if result.finished:
                stream.terminal_delivered = True
                return
    except asyncio.CancelledError:
        # The client went away: detach only; the run goes on and a reconnect replays.
        if watcher.done():
            gw.conversations.detach(request_id)
            return
        raise
    finally:
        stream.readers -= 1
        watcher.cancel()
        with contextlib.suppress(BaseException):
            await watcher


async def _watch_disconnect(receive: Receive, reader: asyncio.Task[None] | None) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if reader is not None:
                reader.cancel()
            return


async def _only_terminal(send: Send, err: ConnectError) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": STREAM_HEADERS})
    await send({"type": "http.response.body", "body": end_stream_error(err), "more_body": False})
