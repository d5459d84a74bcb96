"""A passthrough whose upload stalls lets go of the server's request at once (by reference counting):
the ASGI server keeps the client's connection open while its request is referenced, even after a
`connection: close` answer, so an upload cut by a stall must not wait for the cycle collector."""
from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import httpx
from aiohttp import web

from cursor_byok.apis import Upstream
from cursor_byok.http_client import passthrough_client


class ServerSide:
    """The ASGI server's side of one request: like granian's, `receive` hands out futures."""

    def __init__(self) -> None:
        self.first = True
        self.sent: list[dict[str, Any]] = []

    def receive(self) -> asyncio.Future[dict[str, Any]]:
        chunk: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        if self.first:  # 10 of the 100 bytes announced, then nothing
            self.first = False
            chunk.set_result({"type": "http.request", "body": b"0123456789", "more_body": True})
        return chunk

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)


async def test_a_stalled_upload_lets_go_of_the_servers_request_at_once() -> None:
    async def upstream(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/{path:.*}", upstream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = passthrough_client(timeout=httpx.Timeout(10))
    try:
        forwarder = Upstream(f"http://127.0.0.1:{port}", client, body_idle_seconds=0.2)
        scope = {"type": "http", "method": "POST", "path": "/p", "raw_path": b"/p", "query_string": b"", "headers": [(b"content-length", b"100")]}
        gc.collect()
        gc.disable()
        try:
            side = ServerSide()
            held = weakref.ref(side)
            await forwarder.forward(scope, side.receive, side.send)
            status = side.sent[0]["status"]
            del side
            await asyncio.sleep(0.05)  # the client's writer task ends
            still_held = held() is not None
        finally:
            gc.enable()
        assert status == 408
        assert not still_held
    finally:
        await client.aclose()
        await runner.cleanup()
