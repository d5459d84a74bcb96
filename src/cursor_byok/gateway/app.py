"""The ASGI app: RunSSE, BidiAppend, health, local side RPCs, and the upstream catch-all.

Raw ASGI (no framework) keeps the per-request overhead to a dict lookup. `serve.py` runs it in this
process, HTTP/1.1 and h2c, plain http on loopback (which is also the Cursor CLI's direct mode).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

import httpx

from .. import local_trust
from ..apis import LocalRpcs, Upstream, effort_for
from ..config import Config, ModelConfig, resolve_api_key
from ..conversation import ConversationService, OutputHub, RuntimeServices
from ..http_client import ProviderHttp, passthrough_client, streaming_client
from ..protocol import ConnectError, internal_error, new_error_id
from ..providers import ProviderPool
from ..run import RunEngine
from .asgi import Receive, Scope, Send, reply, reply_error
from .bidi import handle_append
from .journal import resume_journaled
from .guard import JSON_TYPES, LOCAL_RPC_TYPES, PROTO_TYPES, RequestGuard
from .memory import Trimmer, keep_large_blocks_out_of_the_heap
from .pending import Pending
from .routing import BIDI_APPEND_PATH, HEALTH_PATHS, RUN_SSE_PATH, UI_PREFIX
from .stream import handle_run_sse
from .transport import Transports

log = logging.getLogger("cursor_byok.gateway")

SWEEP_SECONDS = 5.0
DRAIN_SECONDS = 1.5  # on a stop, how long open streams get to read their terminal frame


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
        self.provider_http: ProviderHttp | None = None
        self.providers: ProviderPool | None = None
        self.upstream: Upstream
        self.local_rpcs: LocalRpcs
        self.conversations: ConversationService
        self._sweeper: asyncio.Task[None] | None = None
        self._started = False
        self.stopping = False
        self._cut = False
        self._requests: set[asyncio.Task[Any]] = set()  # every HTTP request being handled
        self.waiting_readers: set[asyncio.Task[Any]] = set()  # RunSSE requests still waiting for their stream

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
        self.providers = ProviderPool(self.provider_http)
        self.providers.start(self.config.models)
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
            recovery_wait=self.config.server.recovery_wait_seconds,
            resolve_effort=effort_for,
        )
        hub = OutputHub(self.config.server.output_retention_seconds)
        self.conversations = ConversationService(services, hub)
        await self.conversations.restore()
        await resume_journaled(self)
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def shutdown(self) -> None:
        if not self._started:
            return
        self._started = False
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if hasattr(self, "conversations"):  # absent when startup failed early
            await self.conversations.shutdown("server shutting down")
        if self.providers is not None:
            await self.providers.aclose()
        for client in (self.http, self.provider_http):
            if client is not None:
                await client.aclose()
        if self.store is not None:
            await self.store.close()

    async def drain(self) -> None:
        """Graceful stop, before the HTTP server closes its connections: every open RunSSE gets its
        one terminal frame (unavailable) and a moment to read it."""
        self.stopping = True
        for reader in list(self.waiting_readers):
            reader.cancel()
        await self.conversations.shutdown("server shutting down")
        deadline = asyncio.get_running_loop().time() + DRAIN_SECONDS
        while asyncio.get_running_loop().time() < deadline:
            if not any(s.readers and not s.terminal_delivered for s in self.conversations.hub.streams()):
                return
            await asyncio.sleep(0.02)

    def cut_requests(self) -> None:
        """At the stop deadline: cancel whatever request still runs (a long upstream stream, a
        stuck client), quietly, so the HTTP server can finish."""
        self._cut = True
        for request in list(self._requests):
            request.cancel()

    def _make_engine(self, model: ModelConfig) -> RunEngine:
        assert self.providers is not None
        return RunEngine(self.providers.adapter(model, resolve_api_key(self.config, model)))

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
        if scope["type"] != "http":
            return
        me = asyncio.current_task()
        assert me is not None
        self._requests.add(me)
        try:
            await self._route(scope, receive, send)
        except asyncio.CancelledError:
            if not self._cut:
                raise
            # cut at the stop deadline: no error to report, the connection just ends
        finally:
            self._requests.discard(me)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = self.guard.route_path(scope)
        method = scope["method"]
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


def create_app(config: Config) -> Gateway:
    return Gateway(config)


__all__ = ["Gateway", "create_app"]
