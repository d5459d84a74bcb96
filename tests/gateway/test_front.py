"""The front granian serves from the moment it listens, in process with a real gateway behind it:
the health probe is answered before the gateway is loaded, everything else waits for the gateway
and is then answered by it, and a gateway that fails to start answers the waiting `unavailable`."""
from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cursor_byok.config import Config, parse
from cursor_byok.gateway.front import STARTING_HEADER, LoadingFront
from cursor_byok.store import StoreError

PORT = 8787


def config(data_dir: Path) -> Config:
    return parse({"server": {"host": "127.0.0.1", "port": PORT, "data_dir": str(data_dir)}})


def get(path: str, host: bytes = b"127.0.0.1:8787") -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"", "headers": [(b"host", host)]}


async def ask(front: LoadingFront, scope: dict[str, Any]) -> dict[str, Any]:
    """The response start the front sends for `scope`."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await front(scope, receive, send)
    return next(m for m in sent if m["type"] == "http.response.start")


async def test_health_is_answered_before_the_gateway_is_loaded_and_the_rest_waits_for_it(tmp_path: Path) -> None:
    front = LoadingFront(config(tmp_path), "cursor_byok.server")
    early = await ask(front, get("/__byok-api__/healthz"))
    assert early["status"] == 204 and STARTING_HEADER in early["headers"]
    foreign = await ask(front, get("/__byok-api__/healthz", host=b"evil.example"))
    assert foreign["status"] == 421  # the gateway's guard, before the gateway is there
    waiting = asyncio.create_task(ask(front, get("/ui/", host=b"evil.example")))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not waiting.done()  # nothing but the gateway answers it
    server = await front.load()
    try:
        assert (await waiting)["status"] == 421  # refused by the gateway's own guard once it is up
        late = await ask(front, get("/__byok-api__/healthz"))
        assert late["status"] == 204 and STARTING_HEADER not in late["headers"]
    finally:
        await server.stop()


async def test_a_gateway_that_fails_to_start_answers_the_waiting_unavailable(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    cfg.database_path.mkdir(parents=True)  # a directory where the database should be
    front = LoadingFront(cfg, "cursor_byok.server")
    waiting = asyncio.create_task(ask(front, get("/ui/")))
    await asyncio.sleep(0)
    with pytest.raises((StoreError, sqlite3.Error, OSError)):
        await front.load()
    assert (await waiting)["status"] == 503
