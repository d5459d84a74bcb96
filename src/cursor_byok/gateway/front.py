"""What granian serves from the moment it listens: the health probe at once, the gateway once loaded.

Importing the gateway (the conversation runtime, protobuf, the HTTP clients, the tools) and
starting it is most of a cold start. It is done after the listener is up, the import in a worker
thread so the loop answers the health probe meanwhile: the probe says no more than "a server is
here" (the data dir is ours, the port is ours), and that is true from the start. Every other
request waits until the gateway is up, then goes to it exactly as it would have. Once it is up,
what the first turn would otherwise import on first use is imported in the background
(`lazy.warm_up`); the provider connections are opened by the gateway's provider pool.
"""
from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from .. import trust_store
from ..config import Config
from ..lazy import warm_up
from ..protocol import ConnectError
from .asgi import Receive, Scope, Send, reply, reply_error
from .guard import RequestGuard
from .routing import HEALTH_PATHS

if TYPE_CHECKING:
    from ..supervision import Supervisor
    from .app import Gateway

log = logging.getLogger("cursor_byok.gateway")

# On the health probe's answer while the gateway is still loading: whoever needs more than "a
# server is here" (a test harness, a benchmark of the whole start) waits for an answer without it.
STARTING_HEADER = (b"x-cursor-byok-starting", b"1")


class Running(Protocol):
    """What the composition root's `start(config, guard, tls)` returns (`tls`: the trust store's
    context being built, awaited by the root once it needs it): the gateway it wired, the
    supervisor of its background tasks (`serve` adds the connection warden), how to read the config
    again (SIGHUP) and how to close everything."""

    gateway: Gateway
    supervisor: Supervisor

    def reload(self) -> None: ...

    async def stop(self) -> None: ...


class LoadingFront:
    """The ASGI app the HTTP server is given; `load()` once, after the server listens. `root`: the
    composition root's module (named by the caller: it is above the gateway, which it wires)."""

    def __init__(self, config: Config, root: str) -> None:
        self.config = config
        self.root = root
        self._guard = RequestGuard.of_server(config)  # the gateway's too, once it is up
        self._gateway: Gateway | None = None
        self._loaded: asyncio.Future[Gateway] = asyncio.get_running_loop().create_future()
        self.warmed: asyncio.Task[None] | None = None  # the warm-up, once the gateway is up

    async def load(self) -> Running:
        """Import the composition root (in a thread) and start the server it makes; the started
        server. A failure is raised here; requests waiting for the gateway are answered `unavailable`."""
        # The trust store's CAs load with the interpreter lock let go: beside the import, not after it;
        # its modules imported first, as only one thread may import at a time (see `import_modules`).
        await asyncio.to_thread(trust_store.import_modules)
        tls = asyncio.ensure_future(asyncio.to_thread(trust_store.verified))
        try:
            root = await asyncio.to_thread(importlib.import_module, self.root)
            server: Running = await root.start(self.config, self._guard, tls)
        except BaseException as exc:
            if not tls.done():
                tls.cancel()
            elif not tls.cancelled():
                tls.exception()  # retrieved: the start's own failure is the one raised
            self._loaded.set_exception(exc)
            self._loaded.exception()  # the waiting requests answer for it; the caller gets it raised
            raise
        self._gateway = server.gateway
        self._loaded.set_result(server.gateway)
        self.warmed = asyncio.create_task(_warm_up(), name="warm-up")
        return server

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Coroutine[Any, Any, None]:
        gateway = self._gateway
        if gateway is not None:
            return gateway(scope, receive, send)  # the gateway's own coroutine: no frame of ours per request
        return self._before_up(scope, receive, send)

    async def _before_up(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and await self._answered_health(scope, send):
            return
        try:
            gateway = await asyncio.shield(self._loaded)
        except Exception:  # noqa: BLE001 - start-up failed: the server is stopping with its error
            await reply_error(send, ConnectError("unavailable", "the server failed to start (see its log)"))
            return
        await gateway(scope, receive, send)

    async def _answered_health(self, scope: Scope, send: Send) -> bool:
        """The health probe, before the gateway is up: the guard the gateway takes over, and its answer."""
        path = self._guard.route_path(scope)  # cut once: the gateway routes by what is left
        if path not in HEALTH_PATHS:
            return False
        refusal = self._guard.check(scope, frozenset(), needs_token=False)
        if refusal is not None:
            await reply_error(send, refusal.error, refusal.status)
        else:
            await reply(send, 204, b"", [STARTING_HEADER])
        return True


async def _warm_up() -> None:
    try:
        await asyncio.to_thread(warm_up)
    except Exception as exc:  # noqa: BLE001 - the first use imports it again, and says what is wrong
        log.warning("warming up after start failed: %s", exc)


__all__ = ["STARTING_HEADER", "LoadingFront", "Running"]
