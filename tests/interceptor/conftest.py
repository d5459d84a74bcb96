"""Fixtures: a local CA, a stand-in gateway (an ASGI app under granian), and the proxy between them."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from granian.constants import Interfaces
from granian.server.embed import Server
from interceptor_support import MODELS_BYTES, MODELS_PATH, free_port

from cursor_byok.interceptor import InterceptingProxy, LocalCA, ProxyLimits


@dataclass
class SeenRequest:
    method: str
    path: str
    query: bytes
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None


@dataclass
class StandInGateway:
    """What the fake gateway saw, plus the handshakes the streaming tests use."""

    port: int = 0
    seen: list[SeenRequest] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    last_chunk_sent: asyncio.Event = field(default_factory=asyncio.Event)
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def make_app(state: StandInGateway):
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        state.seen.append(SeenRequest(scope["method"], scope["path"], scope["query_string"], headers, body))
        path = scope["path"]
        if path == MODELS_PATH:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/proto"), (b"content-length", str(len(MODELS_BYTES)).encode())],
                }
            )
            await send({"type": "http.response.body", "body": MODELS_BYTES})
        elif path == "/echo":
            await send({"type": "http.response.start", "status": 201, "headers": [(b"content-type", b"application/octet-stream")]})
            await send({"type": "http.response.body", "body": body})
        elif path == "/stream":
            # First chunk, then hold the last one until the test says it has the first.
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/connect+proto")]})
            await send({"type": "http.response.body", "body": b"first-chunk", "more_body": True})
            try:
                await asyncio.wait_for(state.release.wait(), 10)
            except TimeoutError:
                await send({"type": "http.response.body", "body": b"timed-out"})
                return
            await asyncio.sleep(0.05)
            await send({"type": "http.response.body", "body": b"last-chunk"})
            state.last_chunk_sent.set()
        elif path == "/hold":
            # One chunk, then silence until the client goes away.
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
            await send({"type": "http.response.body", "body": b"hello", "more_body": True})
            message = await receive()
            if message["type"] == "http.disconnect":
                state.disconnected.set()
        else:
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"no such path"})

    return app


@pytest.fixture
async def gateway() -> AsyncIterator[StandInGateway]:
    state = StandInGateway(port=free_port())
    server = Server(make_app(state), address="127.0.0.1", port=state.port, interface=Interfaces.ASGI, log_enabled=False)
    task = asyncio.ensure_future(server.serve())
    async with httpx.AsyncClient(trust_env=False) as client:
        for _ in range(250):
            try:
                await client.get(state.url + "/__ready__")
                break
            except httpx.TransportError:
                await asyncio.sleep(0.02)
        else:
            raise RuntimeError("stand-in gateway did not start")
    state.seen.clear()
    try:
        yield state
    finally:
        server.stop()
        await asyncio.wait_for(task, 10)


@pytest.fixture
def ca(tmp_path: Path) -> LocalCA:
    return LocalCA.create(tmp_path / "data")


@pytest.fixture
async def proxy(ca: LocalCA, gateway: StandInGateway) -> AsyncIterator[InterceptingProxy]:
    p = InterceptingProxy(ca, gateway.url, "127.0.0.1", 0, limits=ProxyLimits(max_head_bytes=16 * 1024), relay_loopback=True)
    await p.start()
    try:
        yield p
    finally:
        await p.stop()
