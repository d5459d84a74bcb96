"""The floor for the gateway benchmark: a bare granian ASGI app that answers BidiAppend with an
empty 200 and streams the same text-delta frames on RunSSE, with none of our logic.

Served by granian with the same settings as `cursor-byok serve` (uvloop, one worker).
"""
from __future__ import annotations

import asyncio
import os
import time

import msgspec

from cursor_byok.protocol import agent_pb2 as pb, encode_server_message, end_stream_ok

FRAMES = int(os.environ.get("BENCH_FRAMES", "500"))
INTERVAL = float(os.environ.get("BENCH_INTERVAL_MS", "5")) / 1000
HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class _Delta(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []


decode = msgspec.json.Decoder(_Chunk).decode  # an OpenAI chat chunk, only what the floors read


async def whole_body(receive) -> bytes:  # type: ignore[no-untyped-def]
    """An ASGI request's body, all of it."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


def delta(text: str) -> bytes:
    m = pb.AgentServerMessage()
    m.interaction_update.text_delta.text = text
    return encode_server_message(m)


async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    if scope["path"].endswith("/RunSSE"):
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        for _ in range(FRAMES):
            await send({"type": "http.response.body", "body": delta(f"{time.monotonic_ns()}|"), "more_body": True})
            await asyncio.sleep(INTERVAL)
        await send({"type": "http.response.body", "body": end_stream_ok(), "more_body": False})
        return
    await send({"type": "http.response.start", "status": 200 if scope["path"] != "/healthz" else 204, "headers": [(b"content-type", b"application/proto")]})
    await send({"type": "http.response.body", "body": b""})
