"""The bare granian app of the turn-start benchmark: on a BidiAppend carrying a run request it POSTs
the prebuilt provider request (as the floor, `bare_turn_app`, does) and relays the provider's answer
to that request id's RunSSE unchanged, byte for byte: no SSE decode, no frames. What any server
that puts a provider stream on an HTTP response pays; a new turn's time to first token on it, while
other conversations stream, is the target's yardstick ("the bare app" of issue 35).
"""
from __future__ import annotations

import asyncio

import aiohttp

from benchmarks.support.bare_app import whole_body
from benchmarks.support.bare_turn_app import BODY, provider_url
from cursor_byok.protocol import agent_pb2 as pb, decode_bidi_append

_streams: dict[str, asyncio.Queue[bytes | None]] = {}  # request id → the provider's bytes for its RunSSE
_tasks: set[asyncio.Task[None]] = set()
_session: aiohttp.ClientSession | None = None


def _channel(request_id: str) -> asyncio.Queue[bytes | None]:
    queue = _streams.get(request_id)
    if queue is None:
        queue = _streams[request_id] = asyncio.Queue()
    return queue


async def _relay(queue: asyncio.Queue[bytes | None], url: str) -> None:
    global _session
    if _session is None:
        _session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4096, keepalive_timeout=30))
    try:
        response = await _session.post(url, data=BODY, headers={"content-type": "application/json"})
        try:
            while chunk := await response.content.readany():
                queue.put_nowait(chunk)
        finally:
            response.release()
    finally:
        queue.put_nowait(None)


async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    body = await whole_body(receive)
    path = scope["path"]
    if path.endswith("/BidiAppend"):
        append = decode_bidi_append(body)
        if append.variant == "run_request":
            task = asyncio.get_running_loop().create_task(_relay(_channel(append.request_id), provider_url(append.message)))
            _tasks.add(task)
            task.add_done_callback(_tasks.discard)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/proto")]})
        await send({"type": "http.response.body", "body": b""})
        return
    if path.endswith("/RunSSE"):
        request_id = pb.BidiRequestId.FromString(body[5:]).request_id
        queue = _channel(request_id)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        try:
            while (chunk := await queue.get()) is not None:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            _streams.pop(request_id, None)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    await send({"type": "http.response.start", "status": 204 if path.endswith("healthz") else 404, "headers": []})
    await send({"type": "http.response.body", "body": b""})
