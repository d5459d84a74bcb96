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

from .. import local_trust
from ..apis import LocalRpcs, Upstream, effort_for
from ..config import Config, ModelConfig, resolve_api_key
from ..conversation import ConversationService, OutputHub, RuntimeServices
from ..http_client import passthrough_client, streaming_client
from ..protocol import ConnectError, internal_error, new_error_id
from ..run import RunEngine, make_provider
from .asgi import Receive, Scope, Send, reply, reply_error
from .bidi import handle_append
from .guard import JSON_TYPES, LOCAL_RPC_TYPES, PROTO_TYPES, RequestGuard
from .limits import granian_limits
from .memory import Trimmer, keep_large_blocks_out_of_the_heap
from .pending import Pending
from .routing import BIDI_APPEND_PATH, HEALTH_PATHS, RUN_SSE_PATH, UI_PREFIX
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
        self.pending = Pending(config.server.max_pending_requests, config.server.max_pending_per_connection)
        self.guard = RequestGuard(
            config,
            proxy_secret=os.environ.get(local_trust.PROXY_SECRET_ENV, ""),
            auth_token=local_trust.auth_token(config),
        )
        self.store: Any = None
        self.http: httpx.AsyncClient | None = None  # upstream passthrough
        self.provider_http: httpx.AsyncClient | None = None
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

        keep_large_blocks_out_of_the_heap()
        self._trimmer = Trimmer()
        self.store = await Store.open(self.config.database_path)
        self.http = passthrough_client(timeout=httpx.Timeout(self.config.upstream.timeout_seconds, connect=10.0))
        self.provider_http = streaming_client()
        self.upstream = Upstream(
            self.config.upstream.base_url, self.http, body_idle_seconds=self.config.server.body_read_timeout_seconds
        )
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
        assert self.provider_http is not None
        provider = make_provider(model, resolve_api_key(self.config, model), self.provider_http)
        return RunEngine(provider)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            self.conversations.hub.sweep()
            self.transports.expire()
            self.conversations.evict_idle(self.config.server.runtime_idle_seconds)
            if not any(not stream.closed for stream in self.conversations.hub.streams()):
                self._trimmer.maybe_trim()  # only while no run streams: the trim stalls the loop for ms

    # -- ASGI --------------------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = self.guard.route_path(scope)
        method = scope["method"]
        if path == DRAIN_PATH and method == "POST" and self._drain_allowed(scope):  # carries its own secret
            await self.drain()
            await reply(send, 204, b"", [])
            return
        local = method == "POST" and (path == BIDI_APPEND_PATH or path == RUN_SSE_PATH)
        side_rpc = not local and self.local_rpcs.handles(path)
        ui = path.startswith(UI_PREFIX)
        if local:
            types: frozenset[bytes] | None = PROTO_TYPES
        elif path in HEALTH_PATHS:
            types = frozenset()
        else:
            types = JSON_TYPES if ui else LOCAL_RPC_TYPES if side_rpc else None
        refusal = self.guard.check(scope, types, needs_token=path not in HEALTH_PATHS)
        if refusal is not None:
            await reply_error(send, refusal.error, refusal.status)
            return
        try:
            if local:
                await (handle_append if path == BIDI_APPEND_PATH else handle_run_sse)(self, scope, receive, send)
            elif path in HEALTH_PATHS:
                await reply(send, 204, b"", [])
            elif ui:
                # Reserved for the dashboard: never forwarded upstream.
                await reply_error(send, ConnectError("not_found", "no dashboard in this version"))
            elif side_rpc:
                await self.local_rpcs.handle(scope, receive, send)
            else:
                await self.upstream.forward(scope, receive, send)
        except Exception as exc:  # noqa: BLE001 - a bug must answer an opaque error, never a traceback
            error_id = new_error_id()
            log.error("request failed", exc_info=exc, extra={"error_id": error_id, "path": path[:200]})
            with contextlib.suppress(Exception):  # the response may have started already
                await reply_error(send, internal_error(error_id))

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
        **granian_limits(config.server),
    )
    log.info("serving", extra={"host": config.server.host, "port": config.server.port, "db": str(config.database_path)})
    server.serve()
    return 0


__all__ = ["Gateway", "create_app", "serve"]
