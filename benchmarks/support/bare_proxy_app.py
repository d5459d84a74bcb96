"""A second floor for the gateway benchmark: a bare granian ASGI app that does the one thing ours
cannot avoid, the provider hop (our provider HTTP client, httpx-sse's decoders and msgspec, as our
providers use them), and turns each streamed chunk into a text-delta frame, with none of our
runtime, history, tools or persistence. Ours against this floor is the cost of our own logic."""
from __future__ import annotations

import os

from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from benchmarks.support.bare_app import HEADERS, decode, delta
from cursor_byok.http_client import streaming_client
from cursor_byok.protocol import end_stream_ok

PROVIDER = os.environ.get("BENCH_PROVIDER_URL", "http://127.0.0.1:9/v1") + "/chat/completions"
client = streaming_client()
JSON_HEADERS = client.headers({"content-type": "application/json"})  # made once, as a provider makes its own


async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    if scope["path"].endswith("/RunSSE"):
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        response = await client.post(PROVIDER, b'{"stream": true}', JSON_HEADERS, connect_timeout=30)
        lines, events = SSELineDecoder(), SSEDecoder()
        try:
            while chunk := await response.next_chunk():
                for line in lines.decode(chunk.decode()):
                    sse = events.decode(line)
                    if sse is None or sse.data == "[DONE]":
                        continue
                    for choice in decode(sse.data).choices:
                        if choice.delta.content:
                            await send({"type": "http.response.body", "body": delta(choice.delta.content), "more_body": True})
        finally:
            await response.aclose()
        await send({"type": "http.response.body", "body": end_stream_ok(), "more_body": False})
        return
    status = 204 if scope["path"] == "/healthz" else 200
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/proto")]})
    await send({"type": "http.response.body", "body": b""})
