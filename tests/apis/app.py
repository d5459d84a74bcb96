"""A tiny ASGI app for the side-RPC tests: LocalRpcs first, everything else to the upstream.

This is the mount the gateway is expected to do; granian serves it in the over-HTTP test
(`python -m granian --interface asgi --factory tests.apis.app:app_from_env`).
"""
from __future__ import annotations

import os
from typing import Any

import httpx
import msgspec

from cursor_byok.apis.local_rpcs import LocalRpcs
from cursor_byok.apis.upstream import Upstream
from cursor_byok.config import Config

CONFIG_ENV = "CURSOR_BYOK_TEST_LOCAL_RPCS_CONFIG"


class SideApp:
    def __init__(self, config: Config, *, catalog_timeout: float = 5.0) -> None:
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=5.0))
        self.upstream = Upstream(config.upstream.base_url, self.client)
        self.rpcs = LocalRpcs(config, self.upstream, catalog_timeout=catalog_timeout)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await self.client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if self.rpcs.handles(scope["path"]):
            await self.rpcs.handle(scope, receive, send)
        else:
            await self.upstream.forward(scope, receive, send)


def app_from_env() -> SideApp:
    return SideApp(msgspec.json.decode(os.environ[CONFIG_ENV].encode(), type=Config))
