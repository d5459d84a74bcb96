"""The ASGI app: RunSSE, BidiAppend, health, local side RPCs, and the upstream catch-all.

Raw ASGI (no framework) keeps the per-request overhead to a dict lookup. Served by granian on uvloop,
HTTP/1.1 and h2c, plain http on loopback (which is also the Cursor CLI's direct mode).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from typing import Any

import httpx
import msgspec

from ..apis import LocalRpcs, Upstream, effort_for
from ..config import Config, ModelConfig, resolve_api_key
from ..conversation import ConversationService, OutputHub, RuntimeServices
from ..http_client import ProviderHttp, passthrough_client, streaming_client
from ..providers import ProviderPool
from ..run import RunEngine
from .asgi import Receive, Scope, Send, reply
from .bidi import handle_append
from .routing import BIDI_APPEND_PATH, HEALTH_PATHS, RUN_SSE_PATH
from .signals import drain_before_worker_stops
from .stream import handle_run_sse
from .transport import Transports

log = logging.getLogger("cursor_byok.gateway")

CONFIG_JSON_ENV = "CURSOR_BYOK_CONFIG_JSON"
DRAIN_TOKEN_ENV = "CURSOR_BYOK_DRAIN_TOKEN"
DRAIN_PATH = "/__byok-api__/drain"
SWEEP_SECONDS = 5.0
DRAIN_SECONDS = 3.0


class Gateway:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.transports = Transports(config.server.max_transports, config.server.transport_idle_seconds)
        self.store: Any = None
        self.http: httpx.AsyncClient | None = None  # upstream passthrough
        self.provider_http: ProviderHttp | None = None
        self.providers: ProviderPool | None = None
        self.upstream: Upstream
        self.local_rpcs: LocalRpcs
        self.conversations: ConversationService
        self._sweeper: asyncio.Task[None] | None = None
        self._started = False
        self.drained = False  # drain() ran: a stop signal may stop the worker at once

    # -- lifecycle -------------------------------------------------------------------------------------
    async def startup(self) -> None:
        if self._started:
            return
        self._started = True
        from ..store import Store

        self.store = await Store.open(self.config.database_path)
        self.http = passthrough_client(timeout=httpx.Timeout(self.config.upstream.timeout_seconds, connect=10.0))
        self.provider_http = streaming_client()
        self.providers = ProviderPool(self.provider_http)
        self.providers.start(self.config.models)
        self.upstream = Upstream(self.config.upstream.base_url, self.http)
        self.local_rpcs = LocalRpcs(self.config, self.upstream)
        services = RuntimeServices(
            config=self.config,
            make_engine=self._make_engine,
            store=self.store,
            continuation_window=self.config.server.continuation_window_seconds,
            blob_ack_timeout=self.config.server.blob_ack_timeout_seconds,
            resolve_effort=effort_for,
        )
        hub = OutputHub(self.config.server.output_retention_seconds)
        self.conversations = ConversationService(services, hub)
        await self.conversations.restore()
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def shutdown(self) -> None:
        if not self._started:
            return
        self._started = False
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self.conversations.shutdown("server shutting down")
        if self.providers is not None:
            await self.providers.aclose()
        for client in (self.http, self.provider_http):
            if client is not None:
                await client.aclose()
        if self.store is not None:
            await self.store.close()

    def _drain_allowed(self, scope: Scope) -> bool:
        token = os.environ.get(DRAIN_TOKEN_ENV, "")
        given = next((v for k, v in scope["headers"] if k == b"x-cursor-byok-drain-token"), b"")
        return bool(token) and secrets.compare_digest(given, token.encode())

    async def drain(self) -> None:
        """Graceful stop, before the HTTP server closes its connections: every open RunSSE gets its
        one terminal frame (unavailable) and a moment to read it."""
        self.drained = True
        await self.conversations.shutdown("server shutting down")
        deadline = asyncio.get_running_loop().time() + DRAIN_SECONDS
        while asyncio.get_running_loop().time() < deadline:
            if not any(s.readers and not s.terminal_delivered for s in self.conversations.hub.streams()):
                return
            await asyncio.sleep(0.02)

    def _make_engine(self, model: ModelConfig) -> RunEngine:
        assert self.providers is not None
        return RunEngine(self.providers.adapter(model, resolve_api_key(self.config, model)))

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            self.conversations.hub.sweep()
            self.transports.expire()
            self.conversations.evict_idle(self.config.server.runtime_idle_seconds)

    # -- ASGI --------------------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        method = scope["method"]
        if method == "POST" and path == BIDI_APPEND_PATH:
            await handle_append(self, scope, receive, send)
        elif method == "POST" and path == RUN_SSE_PATH:
            await handle_run_sse(self, scope, receive, send)
        elif path in HEALTH_PATHS:
            await reply(send, 204, b"", [])
        elif path == DRAIN_PATH and method == "POST" and self._drain_allowed(scope):
            await self.drain()
            await reply(send, 204, b"", [])
        elif self.local_rpcs.handles(path):
            await self.local_rpcs.handle(scope, receive, send)
        else:
            await self.upstream.forward(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    log.exception("startup failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return


def create_app(config: Config) -> Gateway:
    return Gateway(config)


def app_from_env() -> Gateway:
    """Granian factory: the config travels to the worker as JSON in the environment."""
    raw = os.environ.get(CONFIG_JSON_ENV)
    if not raw:
        raise RuntimeError(f"{CONFIG_JSON_ENV} is not set")
    gateway = create_app(msgspec.json.decode(raw.encode(), type=Config))
    drain_before_worker_stops(gateway.drain, lambda: gateway.drained)
    return gateway


def serve(config: Config) -> int:
    """Run the gateway under granian (uvloop, HTTP/1.1 + h2c) until SIGINT/SIGTERM."""
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces, Loops

    config.data_path.mkdir(parents=True, exist_ok=True)
    os.environ[CONFIG_JSON_ENV] = msgspec.json.encode(config).decode()
    token = os.environ[DRAIN_TOKEN_ENV] = secrets.token_hex(16)
    host = "127.0.0.1" if config.server.host in ("0.0.0.0", "::", "") else config.server.host
    drain_url = f"http://{host}:{config.server.port}{DRAIN_PATH}"

    class DrainingGranian(Granian):  # type: ignore[misc, valid-type]
        """Granian closes connections before the app's lifespan shutdown runs; drain first so every
        open RunSSE ends with its terminal frame instead of a cut connection."""

        def shutdown(self, exit_code: int = 0) -> None:
            try:
                httpx.post(drain_url, headers={"x-cursor-byok-drain-token": token}, timeout=DRAIN_SECONDS + 2)
            except httpx.HTTPError:
                log.warning("graceful drain did not answer; stopping anyway")
            super().shutdown(exit_code)

    server = DrainingGranian(
        "cursor_byok.gateway.app:app_from_env",
        address=config.server.host,
        port=config.server.port,
        interface=Interfaces.ASGI,
        loop=Loops.uvloop,
        http=HTTPModes.auto,
        workers=1,
        factory=True,
        log_access=False,
    )
    log.info("serving", extra={"host": config.server.host, "port": config.server.port, "db": str(config.database_path)})
    server.serve()
    return 0


__all__ = ["Gateway", "create_app", "serve"]
