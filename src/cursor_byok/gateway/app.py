"""The ASGI app: RunSSE, BidiAppend, health, local side RPCs, and the upstream catch-all.

Raw ASGI (no framework) keeps the per-request overhead to a dict lookup. `serve.py` runs it in this
process, HTTP/1.1 and h2c, plain http on loopback (which is also the Cursor CLI's direct mode).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from typing import Any

import httpx

from ..apis import LocalRpcs, Upstream, effort_for
from ..config import Config, ModelConfig, ServerConfig, resolve_api_key
from ..conversation import NO_OBSERVER, ConversationService, OutputHub, Phase, RuntimeServices
from ..http_client import ProviderHttp, passthrough_client, streaming_client
from ..observability import Dashboard, GatewayGauges, Metrics, Recorder
from ..protocol import internal_error, new_error_id
from ..providers import Provider, ProviderPool
from ..run import RunEngine
from ..trust_store import verified
from .asgi import ERROR_REPLIES, Receive, Scope, Send, reply, reply_error
from .bidi import handle_append
from .guard import JSON_TYPES, LOCAL_RPC_TYPES, PROTO_TYPES, RequestGuard
from .memory import Trimmer, keep_large_blocks_out_of_the_heap
from .pending import Pending
from .routing import BIDI_APPEND_PATH, HEALTH_PATHS, METRICS_PATH, RUN_PATH, RUN_SSE_PATH, UI_PREFIX, route_for
from .run_stream import handle_run
from .stream import handle_run_sse
from .transport import Route, Transports
from .ui import handle_metrics, handle_ui

log = logging.getLogger("cursor_byok.gateway")

SWEEP_SECONDS = 5.0  # at most: see sweep_seconds
SWEEP_FLOOR_SECONDS = 0.1
# Retention (config [retention]) runs a while after start, off the start-up path, then hourly.
RETENTION_FIRST_SECONDS = 60.0
RETENTION_EVERY_SECONDS = 3600.0
DRAIN_SECONDS = 1.5  # on a stop, how long open streams get to read their terminal frame


def sweep_seconds(server: ServerConfig) -> float:
    """How often finished output, idle transports and idle runtimes are swept: every
    SWEEP_SECONDS, or at half the shortest of their expiry times when that is shorter, so a short
    expiry is kept to within one and a half times itself rather than overrun by the period."""
    shortest = min(server.output_retention_seconds, server.transport_idle_seconds, server.runtime_idle_seconds)
    return max(SWEEP_FLOOR_SECONDS, min(SWEEP_SECONDS, shortest / 2))


class Gateway:
    def __init__(self, config: Config, guard: RequestGuard | None = None, tls: ssl.SSLContext | None = None) -> None:
        """`guard`: the one already in front of the server while it loaded, if any; `tls`: the trust
        store's context, if it was built beside the gateway's import (else `startup` builds it)."""
        self.config = config
        self._tls = tls
        self.transports = Transports(
            config.server.max_transports, config.server.transport_idle_seconds, run_is_live=self._run_is_live
        )
        self.pending = Pending(config.server.max_pending_requests, config.server.max_pending_per_connection)
        self.guard = guard or RequestGuard.of_server(config)
        self.store: Any = None
        self.http: httpx.AsyncClient | None = None  # upstream passthrough
        self.provider_http: ProviderHttp | None = None
        self.providers: ProviderPool | None = None
        self.upstream: Upstream
        self.local_rpcs: LocalRpcs
        self.conversations: ConversationService
        self._background: list[asyncio.Task[None]] = []  # the sweeper and retention
        self.metrics = Metrics()
        self.recorder: Recorder | None = None
        self.dashboard: Dashboard | None = None
        self.appends = 0  # BidiAppends accepted (for /metrics)
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
        from ..store import Store, keep_retention

        keep_large_blocks_out_of_the_heap()
        self._trimmer = Trimmer()
        self.store = await Store.open(self.config.database_path)
        tls = self._tls or verified()  # every outbound client verifies with this one context
        self.http = passthrough_client(timeout=httpx.Timeout(self.config.upstream.timeout_seconds, connect=10.0), verify=tls)
        self.provider_http = streaming_client(verify=tls)
        self.providers = ProviderPool(self.provider_http)
        self.providers.start(self.config.models)
        self.upstream = Upstream(
            self.config.upstream.base_url, self.http, body_idle_seconds=self.config.server.body_read_timeout_seconds
        )
        self.local_rpcs = LocalRpcs(self.config, self.upstream)
        if self.config.observability.enabled:
            self.recorder = Recorder(self.config, self.store, self.metrics)
        services = RuntimeServices(
            config=self.config,
            make_engine=self._make_engine,
            store=self.store,
            continuation_window=self.config.server.continuation_window_seconds,
            blob_ack_timeout=self.config.server.blob_ack_timeout_seconds,
            recovery_wait=self.config.server.recovery_wait_seconds,
            resolve_effort=effort_for,
            observer=self.recorder or NO_OBSERVER,
            serving=False,  # until every journaled stream is resumed: their recovery waits start then
        )
        hub = OutputHub(self.config.server.output_retention_seconds)
        self.conversations = ConversationService(services, hub)
        gauges = GatewayGauges(
            active_conversations=lambda: sum(rt.phase is not Phase.IDLE or bool(rt.queued) for rt in self.conversations.registry.runtimes()),
            open_streams=lambda: sum(stream.readers for stream in hub.streams()),
            appends=lambda: self.appends,
            appends_waiting=self.transports.parked,
            edge_errors=lambda: ERROR_REPLIES,
        )
        self.metrics.attach(gauges)
        if self.recorder is not None:
            self.dashboard = Dashboard(self.config, self.store, self.recorder, self._adapter, gauges)
        await self.conversations.restore()
        for order in await self.conversations.appends.resume_journaled(lambda message: route_for(message, self.config) is Route.LOCAL):
            self.transports.restore(order)
        services.begin_serving()
        loop = asyncio.get_running_loop()
        retention = keep_retention(
            self.store, self.config.retention.ages_ms(), first_after=RETENTION_FIRST_SECONDS, every=RETENTION_EVERY_SECONDS
        )
        self._background = [loop.create_task(self._sweep()), loop.create_task(retention)]

    async def shutdown(self) -> None:
        if not self._started:
            return
        self._started = False
        for task in self._background:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
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

    def _run_is_live(self, request_id: str) -> bool:
        stream = self.conversations.hub.get(request_id)
        return stream is not None and not stream.closed

    def _adapter(self, model: ModelConfig) -> Provider:
        assert self.providers is not None
        return self.providers.adapter(model, resolve_api_key(self.config, model))

    def _make_engine(self, model: ModelConfig) -> RunEngine:
        return RunEngine(self._adapter(model), keep_bodies=self.config.observability.detailed)

    async def _sweep(self) -> None:
        period = sweep_seconds(self.config.server)
        while True:
            await asyncio.sleep(period)
            self.conversations.hub.sweep()
            self.transports.expire()
            self.conversations.evict_idle(self.config.server.runtime_idle_seconds, self.config.server.idle_history_bytes)
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
        local = method == "POST" and path in _AGENT_ROUTES
        side_rpc = not local and self.local_rpcs.handles(path)
        ui = path.startswith(UI_PREFIX)
        metrics = path == METRICS_PATH and method == "GET"
        if local:
            types: frozenset[bytes] | None = PROTO_TYPES
        elif path in HEALTH_PATHS or metrics:
            types = frozenset()
        else:
            types = JSON_TYPES if ui else LOCAL_RPC_TYPES if side_rpc else None
        refusal = self.guard.check(scope, types, needs_token=path not in HEALTH_PATHS)
        if refusal is None and (ui or metrics):
            refusal = self.guard.exposed_refusal
        if refusal is not None:
            await reply_error(send, refusal.error, refusal.status)
            return
        try:
            if local:
                await _AGENT_ROUTES[path](self, scope, receive, send)
            elif path in HEALTH_PATHS:
                await reply(send, 204, b"", [])
            elif ui:  # the dashboard: never forwarded upstream
                await handle_ui(self, scope, receive, send, path)
            elif metrics:
                await handle_metrics(self, send)
            elif side_rpc:
                await self.local_rpcs.handle(scope, receive, send)
            else:
                await self.upstream.forward(scope, receive, send)
        except Exception as exc:  # noqa: BLE001 - a bug must answer an opaque error, never a traceback
            error_id = new_error_id()
            log.error("request failed", exc_info=exc, extra={"error_id": error_id, "path": path[:200]})
            with contextlib.suppress(Exception):  # the response may have started already
                await reply_error(send, internal_error(error_id))


_AGENT_ROUTES = {BIDI_APPEND_PATH: handle_append, RUN_SSE_PATH: handle_run_sse, RUN_PATH: handle_run}


def create_app(config: Config, guard: RequestGuard | None = None, tls: ssl.SSLContext | None = None) -> Gateway:
    return Gateway(config, guard, tls)


__all__ = ["Gateway", "create_app", "sweep_seconds"]
