"""The like-for-like floor for the passthrough benchmark: a bare granian ASGI app that forwards each
request to the origin with the same HTTP client as ours and relays the reply, with none of our
routing, header rules or error handling."""
from __future__ import annotations

import os

import httpx

from benchmarks.support.bare_app import whole_body
from cursor_byok.http_client import passthrough_client

ORIGIN = os.environ.get("BENCH_ORIGIN_URL", "http://127.0.0.1:9")
client = passthrough_client(timeout=httpx.Timeout(30.0))


async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    body = await whole_body(receive)
    if scope["path"] == "/healthz":
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    response = await client.post(ORIGIN + scope["path"], content=body, headers={"content-type": "application/proto"})
    await send({"type": "http.response.start", "status": response.status_code, "headers": response.headers.raw})
    await send({"type": "http.response.body", "body": response.content})
