"""The ASGI app: RunSSE, BidiAppend, health, local side RPCs, and the upstream catch-all.

Raw ASGI (no framework) keeps the per-request overhead to a dict lookup. `serve.py` runs it in this
process, HTTP/1.1 and h2c, plain http on loopback (which is also the Cursor CLI's direct mode).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from ..apis import LocalRpcs, Upstream
from ..config import Config, ServerConfig
from ..conversation import ConversationService, Keep, Phase
from ..instance import ConnectionBook
from ..observability import Dashboard, GatewayGauges, Metrics
from ..protocol import BIDI_APPEND_PATH, RUN_PATH, RUN_SSE_PATH, ConnectError, internal_error, new_error_id
from .asgi import ERROR_REPLIES, Receive, Scope, Send, reply, reply_error
from .bidi import handle_append
from .grpc_web import GrpcWebSend, is_grpc_web
from .guard import AGENT_TYPES, JSON_TYPES, LOCAL_RPC_TYPES, UNKNOWN_DEVELOPER, RequestGuard
from .memory import Trimmer, keep_large_blocks_out_of_the_heap
from .pending import Pending
from .routing import HEALTH_PATHS, METRICS_PATH, ROOT_PATH, UI_PATH, UI_PREFIX, route_for
from .run_stream import handle_run
from .stream import handle_run_sse
from .transport import Route, Transports
from .ui import handle_metrics, handle_root, handle_ui

if TYPE_CHECKING:
    from ..capture import Capture
    from ..cluster import Cluster

log = logging.getLogger("cursor_byok.gateway")

SWEEP_SECONDS = 5.0  # at most: see sweep_seconds
SWEEP_FLOOR_SECONDS = 0.1
DRAIN_SECONDS = 1.5  # on a stop, how long open streams get to read their terminal frame


def sweep_seconds(server: ServerConfig) -> float:
    """How often finished output, idle transports and idle runtimes are swept: every
    SWEEP_SECONDS, or at half the shortest of their expiry times when that is shorter, so a short
    expiry is kept to within one and a half times itself rather than overrun by the period."""
    shortest = min(server.output_retention_seconds, server.transport_idle_seconds, server.runtime_idle_seconds)
    return max(SWEEP_FLOOR_SECONDS, min(SWEEP_SECONDS, shortest / 2))


class Gateway:
    """The ASGI app over parts the composition root (`cursor_byok.server`, `running`) made and closes."""

    def __init__(
        self,
        config: Config,
        guard: RequestGuard | None,
        *,
        store: Any,
        conversations: ConversationService,
        upstream: Upstream,
        local_rpcs: LocalRpcs,
        metrics: Metrics,
    ) -> None:
        """`guard`: the one already in front of the server while it loaded, if any."""
        self.config = config
        self.guard = guard or RequestGuard.of_server(config)
        self.store = store
        self.conversations = conversations
        self.upstream = upstream
        self.local_rpcs = local_rpcs
        self.metrics = metrics
        self.dashboard: Dashboard | None = None  # with observability on: set once the gauges exist
        self.damage: str | None = None  # the database's damage in one line, once found: /healthz says it
        self.transports = Transports(
            config.server.max_transports, config.server.transport_idle_seconds, run_is_live=self._run_is_live
        )
        self.pending = Pending(
            config.server.max_pending_requests, config.server.max_pending_per_connection, config.server.max_pending_body_bytes
        )
        keep_large_blocks_out_of_the_heap()
        self._trimmer = Trimmer()
        self.capture: Capture | None = None  # on while `cursor-byok capture start` says so (the composition root sets it)
        self.appends = 0  # BidiAppends accepted (for /metrics)
        self.stopping = False
        self._cut = False
        self._requests: set[asyncio.Task[Any]] = set()  # every HTTP request being handled
        self.connections = ConnectionBook()  # which connections requests came on (the warden's view)
        self.waiting_readers: set[asyncio.Task[Any]] = set()  # RunSSE requests still waiting for their stream
        self.cluster: Cluster | None = None  # several instances on one database: the composition root sets it
        self.gauges = GatewayGauges(
            active_conversations=lambda: sum(rt.phase is not Phase.IDLE or bool(rt.queued) for rt in conversations.registry.runtimes()),
            open_streams=lambda: sum(stream.readers for stream in conversations.hub.streams()),
            appends=lambda: self.appends,
            appends_waiting=self.transports.parked,
            runsse_waiting=lambda: len(self.waiting_readers),
            requests_in_flight=lambda: len(self._requests),
            transports=lambda: len(self.transports),
            streams_retained=lambda: len(conversations.hub.streams()),
            conversations_loaded=lambda: len(conversations.registry),
            edge_errors=lambda: ERROR_REPLIES,
        )
        metrics.attach(self.gauges)

    async def resume_journaled(self, keep: Keep | None = None) -> None:
        """At start: rebuild the transport of every stream the journal names (the conversation side
        resumes their runs; the composition root then starts their recovery clocks). `keep`: of
        the conversations this instance owns only (several instances on one database)."""
        for order in await self.conversations.appends.resume_journaled(lambda message: route_for(message, self.config) is Route.LOCAL, keep):
            self.transports.restore(order)

    def sweep(self) -> None:
        """Let go of finished output, idle transports and idle runtimes (every `sweep_seconds`)."""
        self.conversations.hub.sweep()
        self.transports.expire()
        self.conversations.evict_idle(self.config.server.runtime_idle_seconds, self.config.server.idle_history_bytes)
        if not any(not stream.closed for stream in self.conversations.hub.streams()):
            self._trimmer.maybe_trim()  # only while no run streams: the trim stalls the loop for ms

    # -- lifecycle -------------------------------------------------------------------------------------
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

    # -- ASGI --------------------------------------------------------------------------------------------
    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Coroutine[Any, Any, None]:
        # The request's coroutine is `_serve`'s own: no frame of ours above it on each of its resumes.
        if self.capture is None or scope["type"] != "http":  # the capture records HTTP exchanges only
            return self._serve(scope, receive, send)
        return self.capture.around(scope, receive, send, self._serve)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        me = asyncio.current_task()
        assert me is not None
        self._requests.add(me)
        peer = self.connections.enter(scope)
        try:
            path = self.guard.route_path(scope)
            method = scope["method"]
            local = method == "POST" and path in _AGENT_ROUTES
            if local:  # an agent route (every turn's two requests): none of the others need telling apart
                side_rpc = ui = metrics = root = False
                types: frozenset[bytes] | None = AGENT_TYPES
            else:
                side_rpc = self.local_rpcs.handles(path)
                ui = path.startswith(UI_PREFIX) or path == UI_PATH
                metrics = path == METRICS_PATH and method == "GET"
                root = path == ROOT_PATH and method in ("GET", "HEAD") and not self.guard.from_proxy(scope)
                if path in HEALTH_PATHS or metrics or root:
                    types = frozenset()
                else:
                    types = JSON_TYPES if ui else LOCAL_RPC_TYPES if side_rpc else None
            refusal = self.guard.check(scope, types, needs_token=path not in HEALTH_PATHS)
            if refusal is UNKNOWN_DEVELOPER and self.guard.team is not None and await self.guard.team.learn():
                refusal = self.guard.check(scope, types)  # a developer added a moment ago is known now
            if refusal is None and (ui or metrics or root):
                refusal = self.guard.exposed_check(scope)
            if refusal is not None:
                await reply_error(send, refusal.error, refusal.status)
                return
            if peer is not None and self.guard.requires_token and path not in HEALTH_PATHS:
                peer.trusted = True  # it gave the token: the IDE's, the last closed for room
            try:
                grpc_web = (local or side_rpc) and is_grpc_web(scope)
                if grpc_web:  # written as Connect, framed as gRPC-Web
                    send = GrpcWebSend(send)
                if local:
                    await _AGENT_ROUTES[path](self, scope, receive, send)
                elif path in HEALTH_PATHS:
                    if self.damage is None:
                        await reply(send, 204, b"", [])
                    else:
                        await reply_error(send, ConnectError("data_loss", self.damage), 503)
                elif ui:  # the dashboard: never forwarded upstream
                    await handle_ui(self, scope, receive, send, path)
                elif metrics:
                    await handle_metrics(self, send)
                elif root:
                    await handle_root(self, send)
                elif side_rpc:
                    await self.local_rpcs.handle(scope, receive, send, grpc_web=grpc_web)
                else:
                    await self.upstream.forward(scope, receive, send)
            except Exception as exc:  # noqa: BLE001 - a bug must answer an opaque error, never a traceback
                error_id = new_error_id()
                log.error("request failed", exc_info=exc, extra={"error_id": error_id, "path": path[:200]})
                with contextlib.suppress(Exception):  # the response may have started already
                    await reply_error(send, internal_error(error_id))
        except asyncio.CancelledError:
            if not self._cut:
                raise
            # cut at the stop deadline: no error to report, the connection just ends
        finally:
            self.connections.leave(peer)
            self._requests.discard(me)


_AGENT_ROUTES = {BIDI_APPEND_PATH: handle_append, RUN_SSE_PATH: handle_run_sse, RUN_PATH: handle_run}


__all__ = ["DRAIN_SECONDS", "Gateway", "sweep_seconds"]
