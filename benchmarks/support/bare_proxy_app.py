"""A second floor for the gateway benchmark: a bare granian ASGI app that does the one thing ours
cannot avoid, the provider hop (httpx + httpx-sse + msgspec, as our providers do), and turns each
streamed chunk into a text-delta frame, with none of our runtime, history, tools or persistence.
Ours against this floor is the cost of our own logic."""
from __future__ import annotations

import os

import msgspec
from httpx_sse import EventSource

from benchmarks.support.bare_app import HEADERS, delta
from cursor_byok.protocol import end_stream_ok
from cursor_byok.http_client import streaming_client

PROVIDER = os.environ.get("BENCH_PROVIDER_URL", "http://127.0.0.1:9/v1") + "/chat/completions"
client = streaming_client()


class _Delta(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []


decode = msgspec.json.Decoder(_Chunk).decode


async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    if scope["path"].endswith("/RunSSE"):
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        async with client.stream("POST", PROVIDER, content=b'{"stream": true}') as response:
            async for sse in EventSource(response).aiter_sse():
                if sse.data == "[DONE]":
                    break
                for choice in decode(sse.data).choices:
                    if choice.delta.content:
                        await send({"type": "http.response.body", "body": delta(choice.delta.content), "more_body": True})
        await send({"type": "http.response.body", "body": end_stream_ok(), "more_body": False})
        return
    status = 204 if scope["path"] == "/healthz" else 200
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/proto")]})
    await send({"type": "http.response.body", "body": b""})
