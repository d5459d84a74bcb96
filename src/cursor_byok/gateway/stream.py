"""RunSSE: find the stream through the binding, replay retained frames, then follow live.

A disconnect detaches this reader: the runtime is told, and the run continues for the reattach
grace (output stays retained; a reconnect replays from the start); an early RunSSE waits (bounded)
for its first BidiAppend; a late one replays from the start.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..conversation import OutputStream, ReplayUnavailable
from ..protocol import ConnectError, agent_pb2, check_id, decode_unary, end_stream_error, parse_request_headers
from .asgi import ERROR_REPLIES, STREAM_HEADERS, BodyTimeout, BodyTooLarge, DisconnectWatch, Receive, Scope, Send, reply_error
from .crossing import relay_remote, stream_elsewhere
from .deadline import Deadline
from .guard import developer_of
from .transport import Route, Waiter

if TYPE_CHECKING:
    from .app import Gateway

log = logging.getLogger("cursor_byok.gateway.stream")
SHUTTING_DOWN = ConnectError("unavailable", "server shutting down")


async def handle_run_sse(gw: Gateway, scope: Scope, receive: Receive, send: Send) -> None:
    server = gw.config.server
    try:
        headers = parse_request_headers(scope["headers"])
        body = await gw.pending.read_body(scope, receive, server.max_body_bytes, server.body_read_timeout_seconds, headers.content_length)
        request_id = decode_unary(
            body, agent_pb2.BidiRequestId, max_size=server.max_frame_bytes, content_encoding=headers.content_encoding
        ).request_id
        if not request_id:
            raise ConnectError("invalid_argument", "protocol error: RunSSE request_id is required")
        check_id("request_id", request_id)
    except (BodyTimeout, BodyTooLarge) as err:
        await reply_error(send, err)  # the connection closes: a slow client must not pin it, nor an unread body
        return
    except ConnectError as err:
        # A stream's error is a 200 whose stream ends in it: clients ignore a non-200 stream's body.
        await only_terminal(send, err)
        return
    me = asyncio.current_task()
    assert me is not None
    deadline = Deadline.of(headers.timeout_ms)
    deadline.cancels(me)
    try:
        await _serve_run_sse(gw, me, scope, receive, send, body, request_id, deadline)
    finally:
        deadline.stop()


async def _serve_run_sse(
    gw: Gateway, me: asyncio.Task[Any], scope: Scope, receive: Receive, send: Send, body: bytes, request_id: str, deadline: Deadline
) -> None:
    wait = gw.config.server.runsse_wait_seconds
    if gw.stopping:
        await only_terminal(send, SHUTTING_DOWN)
        return

    def no_append() -> ConnectError:
        return ConnectError("deadline_exceeded", f"no BidiAppend for request {request_id} within {wait:g}s")

    gw.waiting_readers.add(me)  # a stop ends the wait (the reader is cancelled) with unavailable
    elsewhere: str | None = None  # the other instance that writes this stream (several on one database)
    try:
        transport = gw.transports.get(request_id)
        # A stream still retained is a local run's, read again after its transport expired.
        if transport is None and gw.conversations.hub.get(request_id) is None:
            if gw.cluster is not None:
                elsewhere = await stream_elsewhere(gw.cluster, request_id, wait, no_append)
                transport = gw.transports.get(request_id)
            if elsewhere is None and transport is None:
                with gw.pending.slot(scope, wait, no_append):
                    transport = await gw.transports.wait_for(request_id, Waiter.RUN_SSE)
        local = elsewhere is None and (transport is None or transport.route is Route.LOCAL)
        stream = await gw.conversations.hub.wait_for(request_id, wait) if local else None  # a valid transport's run
    except ConnectError as err:
        await only_terminal(send, err)
        return
    except asyncio.CancelledError:
        if deadline.took(me):
            await only_terminal(send, deadline.error())
            return
        if not gw.stopping:
            raise
        await only_terminal(send, SHUTTING_DOWN)
        return
    finally:
        gw.waiting_readers.discard(me)
    if elsewhere is not None:
        assert gw.cluster is not None
        deadline.stop()
        if not await relay_remote(gw.cluster, elsewhere, request_id, developer_of(scope), receive, send):
            # Its owner stopped before a frame came: found again (taken over here, or where it went).
            await _serve_run_sse(gw, me, scope, receive, send, body, request_id, deadline)
        return
    if not local:
        deadline.stop()  # the deadline header goes upstream with the request, which keeps it
        await gw.upstream.forward(scope, receive, send, body=body)
        return
    if stream is None or not stream.theirs(developer_of(scope)):
        await only_terminal(send, ConnectError("not_found", f"no run for request {request_id}"))
        return
    gw.conversations.attach(request_id, stream)
    watch = DisconnectWatch(receive, me.cancel)
    try:
        # The head right before the stream's first frame: granian then mostly writes the two in one
        # go, where with the reader's set-up between them it wrote each on its own.
        await send({"type": "http.response.start", "status": 200, "headers": STREAM_HEADERS})
        await relay(stream, send)
    except asyncio.CancelledError:
        if watch.ended:
            return  # the client went away: only a detach (below); the run goes on and a reconnect replays
        if deadline.took(me):
            await end_at_deadline(send, deadline)
            return
        raise
    finally:
        watch.stop()
        gw.conversations.detach(request_id, stream)


async def end_at_deadline(send: Send, deadline: Deadline) -> None:
    """The client's deadline passed while its stream relayed the run: the stream ends with
    deadline_exceeded, and the run goes on as at a disconnect (its caller detaches the stream)."""
    ERROR_REPLIES["deadline_exceeded"] += 1
    with contextlib.suppress(Exception):  # the client may be gone as well
        await send({"type": "http.response.body", "body": end_stream_error(deadline.error()), "more_body": False})


async def relay(stream: OutputStream, send: Send, *, direct_send: bool = True) -> None:
    """Send the stream's frames from the start (replay, then live) through its terminal, after
    the response has started. `direct_send`: the stream's writer may call `send` itself (see
    `DirectSend`: only for a send that never suspends, as granian's)."""
    direct = DirectSend(send)  # unused (nothing to settle) when not lent to the writer
    stream.readers += 1
    position = 0
    try:
        while True:
            try:
                result = await stream.read(position, direct if direct_send else None)
            except ReplayUnavailable:
                await direct.settle()
                ERROR_REPLIES["unavailable"] += 1
                await send(
                    {
                        "type": "http.response.body",
                        "body": end_stream_error(ConnectError("unavailable", "client consumed run output too slowly")),
                        "more_body": False,
                    }
                )
                return
            position = result.position
            await direct.settle()
            if result.complete:
                return
            await send({"type": "http.response.body", "body": result.data, "more_body": not result.finished})
            if result.finished:
                stream.terminal_delivered = True
                return
    finally:
        stream.readers -= 1
        stream.touch()
        direct.abandon()


class DirectSend:
    """The `Push` a caught-up RunSSE reader lends its stream's writer: the stream sends each new
    frame itself (at the end of the loop's pass, with every other stream's), so a live delta costs
    no task switch. Granian takes a body chunk without suspending (its send returns an
    already-finished awaitable), so the send completes inside the writer's call and no
    cancellation can cut it in half. Should a send ever suspend, a task finishes it and the reader
    waits for that task (`settle`) before sending anything itself, so frames never reorder."""

    __slots__ = ("_send", "_inflight")

    def __init__(self, send: Send) -> None:
        self._send = send
        self._inflight: asyncio.Future[None] | None = None

    def __call__(self, data: bytes, more: bool) -> bool:
        if self._inflight is not None:
            return False  # the reader takes over once the suspended send is done
        try:
            step = self._send({"type": "http.response.body", "body": data, "more_body": more}).__await__()
            yielded = next(step)
        except StopIteration:
            return True
        except Exception:  # noqa: BLE001 - the writer must never fail on a client's behalf
            log.debug("direct send failed; the reader's task takes over", exc_info=True)
            return False
        self._inflight = asyncio.ensure_future(_finish(step, yielded))
        return True

    async def settle(self) -> None:
        """Wait for a send the writer started and could not finish at once (re-raising its error)."""
        if self._inflight is not None:
            inflight, self._inflight = self._inflight, None
            await inflight

    def abandon(self) -> None:
        if self._inflight is not None:
            self._inflight.cancel()


async def _finish(step: Iterator[Any], yielded: Any) -> None:
    """Drive the rest of an awaitable whose first step already ran, as a Task would: wait for the
    future it yielded (clearing the flag a Task clears), then resume it, until it returns."""
    while True:
        if getattr(yielded, "_asyncio_future_blocking", None) is not None:
            yielded._asyncio_future_blocking = False
            await asyncio.wait((yielded,))
        else:
            await asyncio.sleep(0)  # a bare yield
        try:
            yielded = next(step)
        except StopIteration:
            return


async def only_terminal(send: Send, err: ConnectError, headers: list[tuple[bytes, bytes]] = STREAM_HEADERS) -> None:
    ERROR_REPLIES[err.code] += 1
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": end_stream_error(err), "more_body": False})
