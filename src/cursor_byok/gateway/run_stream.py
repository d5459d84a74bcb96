"""Run: Cursor's HTTP/2 agent stream, one bidi stream instead of RunSSE + BidiAppend.

The request side is the appends: each Connect envelope is one AgentClientMessage, the first must
select a model (seqno 0), and each later one is the next append in order. The response side is the
run's output stream, exactly as a RunSSE reader gets it (replay, then live, one terminal). The
client resetting the stream (RST_STREAM CANCEL: a Connect client's cancel) or losing its connection
detaches, like a RunSSE disconnect: both reach us as the same `http.disconnect`, and a lost
connection must still be able to come back, so both go through the reattach grace, whose end
cancels the run (a new run request for the conversation takes over before that). A new Run with
the same `x-request-id` and the same first message reattaches within it and replays.
A run routed upstream (a model we do not serve) is relayed to Cursor as the same bidi stream.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
from typing import TYPE_CHECKING, Any

from ..hotpath import FLAG_END_STREAM, FrameDecoder, HotPathError
from ..protocol import (
    SERVER_HEARTBEAT_FRAME, ConnectError, check_id, client_message, connect_error_from, end_stream_error, parse_request_headers,
)
from .asgi import Receive, Scope, Send
from .bidi import check_theirs, deliver_local, local_parent, seqno0_transport
from .crossing import claim_for_run
from .deadline import Deadline
from .guard import developer_of
from .stream import SHUTTING_DOWN, end_at_deadline, only_terminal, relay
from .transport import Route, Transport

if TYPE_CHECKING:
    from .app import Gateway

log = logging.getLogger("cursor_byok.gateway.run")

RUN_HEADERS = [
    (b"content-type", b"application/connect+proto"),
    (b"cache-control", b"no-cache"),
    (b"connect-protocol-version", b"1"),
]


class _Disconnected(Exception):
    """The client went away (stream reset or connection closed)."""


class RequestFrames:
    """The request body of a Run stream as the messages it carries, as they arrive."""

    def __init__(self, receive: Receive, decoder: FrameDecoder) -> None:
        self._receive = receive
        self._decoder = decoder
        self._ready: collections.deque[bytes] = collections.deque()
        self.ended = False  # the client finished sending (it may still read)

    async def next(self) -> bytes | None:
        """The next message's bytes; None once the client finished sending. Raises _Disconnected,
        or ConnectError for a malformed stream."""
        while not self._ready:
            if self.ended:
                return None
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected()
            try:
                for flags, payload in self._decoder.feed(message.get("body", b"")):
                    if not flags & FLAG_END_STREAM:  # a client's end frame carries nothing for us
                        self._ready.append(payload)
                if not message.get("more_body", False):
                    self.ended = True
                    self._decoder.close()
            except HotPathError as exc:
                raise connect_error_from(exc) from None
        return self._ready.popleft()

    def received(self) -> list[bytes]:
        """The messages already received and not yet taken (none of them waited for)."""
        ready = list(self._ready)
        self._ready.clear()
        return ready

    async def wait_disconnect(self) -> None:
        """After the client finished sending: return once it goes away."""
        while (await self._receive())["type"] != "http.disconnect":
            pass


async def handle_run(gw: Gateway, scope: Scope, receive: Receive, send: Send) -> None:
    server = gw.config.server
    if gw.stopping:
        await only_terminal(send, SHUTTING_DOWN, RUN_HEADERS)
        return
    try:
        headers = parse_request_headers(scope["headers"])
        request_id = headers.request_id or f"run-{os.urandom(16).hex()}"
        check_id("x-request-id", request_id)
        frames = RequestFrames(receive, FrameDecoder(server.max_frame_bytes, gzip=headers.content_encoding == "gzip"))
        wait = server.body_read_timeout_seconds
        deadline = Deadline.of(headers.timeout_ms)

        def no_first() -> ConnectError:
            return ConnectError("deadline_exceeded", f"no first message within {wait:g}s (server.body_read_timeout_seconds)")

        on_timeout = no_first
        if deadline.remaining() < wait:  # the client gives up first
            wait, on_timeout = deadline.remaining(), deadline.error
        with gw.pending.slot(scope, wait, on_timeout):  # a stream that sends nothing holds a bounded slot
            raw = await frames.next()
        if raw is None:
            raise ConnectError("invalid_argument", "first Run message must select a model (the stream had none)")
        first = client_message(request_id, 0, raw)
        check_theirs(gw, request_id, developer_of(scope))
        if gw.cluster is not None:
            await claim_for_run(gw, gw.cluster, first)
        transport = seqno0_transport(gw, first)
        if transport.route is Route.UPSTREAM:
            await gw.upstream.relay_stream(scope, send, raw, frames.next)
            return
        parent = local_parent(gw, headers.parent_request_id, headers.parent_tool_call_id)
        # What came with the first message is handed over with it: a cancel right behind the run
        # request is seen before the model is called. One it cannot take ends the stream (below).
        failure: list[ConnectError] = []
        with gw.conversations.together():
            _journaled(deliver_local(gw, transport, first, parent, developer_of(scope)), request_id)
            try:
                for raw in frames.received():
                    _deliver_next(gw, transport, request_id, raw)
            except (ConnectError, HotPathError) as exc:
                failure.append(_refused(exc, request_id))
    except _Disconnected:
        return
    except (ConnectError, HotPathError) as exc:
        await only_terminal(send, exc if isinstance(exc, ConnectError) else connect_error_from(exc), RUN_HEADERS)
        return
    stream = gw.conversations.hub.get(request_id)
    if stream is None:
        await only_terminal(send, ConnectError("not_found", f"no run for request {request_id}"), RUN_HEADERS)
        return
    await send({"type": "http.response.start", "status": 200, "headers": RUN_HEADERS})
    if not stream.end:
        # Nothing to send yet (a run queued behind another): granian sends the headers only with
        # the first non-empty body chunk, and the client waits for them; a heartbeat carries them.
        await send({"type": "http.response.body", "body": SERVER_HEARTBEAT_FRAME, "more_body": True})
    gw.conversations.attach(request_id, stream)
    me = asyncio.current_task()
    assert me is not None
    inbound = asyncio.get_running_loop().create_task(_inbound(gw, transport, frames, request_id, me, failure))
    deadline.cancels(me)
    try:
        await relay(stream, send)
    except asyncio.CancelledError:
        if deadline.took(me):
            await end_at_deadline(send, deadline)
            return
        if not inbound.done():
            raise
        if failure:  # the client sent something we cannot take: the stream ends with that error
            with contextlib.suppress(Exception):
                await send({"type": "http.response.body", "body": end_stream_error(failure[0]), "more_body": False})
    finally:
        deadline.stop()
        inbound.cancel()
        with contextlib.suppress(BaseException):
            await inbound
        gw.conversations.detach(request_id, stream)


async def _inbound(
    gw: Gateway, transport: Transport, frames: RequestFrames, request_id: str, relay_task: asyncio.Task[None],
    failure: list[ConnectError],
) -> None:
    """Deliver each later message as the next append; a disconnect (or a message we cannot take,
    here or with the first) stops the relay. The client finishing its side changes nothing: output
    goes on."""
    try:
        while not failure and (raw := await frames.next()) is not None:
            _deliver_next(gw, transport, request_id, raw)
        if not failure:
            await frames.wait_disconnect()
    except _Disconnected:
        pass
    except (ConnectError, HotPathError) as exc:
        failure.append(_refused(exc, request_id))
    relay_task.cancel()


def _refused(exc: ConnectError | HotPathError, request_id: str) -> ConnectError:
    err = exc if isinstance(exc, ConnectError) else connect_error_from(exc)
    log.info("Run stream input refused: %s", err.message, extra={"request_id": request_id})
    return err


def _deliver_next(gw: Gateway, transport: Transport, request_id: str, raw: bytes) -> None:
    """A later message of the stream, as the next append."""
    _journaled(deliver_local(gw, transport, client_message(request_id, transport.order.next_seqno, raw), None), request_id)


def _journaled(durable: asyncio.Future[Any], request_id: str) -> None:
    """A Run stream acknowledges nothing per message, so nothing waits for its journal row; a row
    that could not be stored is logged (the message was applied, but a restart would not resume it)."""

    def done(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.warning("Run stream input not journaled: %s", future.exception(), extra={"request_id": request_id})

    durable.add_done_callback(done)
