"""The ASGI app: RunSSE, BidiAppend, health, local side RPCs, and the upstream catch-all.

Raw ASGI (no framework) keeps the per-request overhead to a dict lookup. Served by granian's
embedded server on this process's uvloop loop, HTTP/1.1 and h2c, plain http on loopback (which is
also the Cursor CLI's direct mode). One process and no worker: nothing can outlive a crash of it and
keep the port or the database, and a stop signal drains open streams before connections close.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sqlite3
from collections.abc import Callable
from typing import Any

import httpx

from ..apis import LocalRpcs, Upstream, effort_for
from ..config import Config, ModelConfig, resolve_api_key
from ..conversation import ConversationService, OutputHub, RuntimeServices
from ..http_client import passthrough_client, streaming_client
from ..instance import BACKLOG, DataDirError, storage_problem
from ..run import RunEngine, make_provider
from ..store import StoreError
from .asgi import Receive, Scope, Send, reply
from .bidi import handle_append
from .routing import BIDI_APPEND_PATH, HEALTH_PATHS, RUN_SSE_PATH
from .stream import handle_run_sse
from .transport import Transports

log = logging.getLogger("cursor_byok.gateway")

SWEEP_SECONDS = 5.0
# A stop signal ends the process within 3 s, however busy its connections are: open streams get
# DRAIN_SECONDS to read their terminal frame, the HTTP server closes gracefully until CUT_SECONDS,
# then whatever request is still running (a long upstream stream, a stuck client) is cancelled and
# the server gets CUT_GRACE_SECONDS to let go of it.
DRAIN_SECONDS = 1.5
CUT_SECONDS = 2.5
CUT_GRACE_SECONDS = 0.5


class Gateway:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.transports = Transports(config.server.max_transports, config.server.transport_idle_seconds)
        self.store: Any = None
        self.http: httpx.AsyncClient | None = None  # upstream passthrough
        self.provider_http: httpx.AsyncClient | None = None
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

        self.store = await Store.open(self.config.database_path)
        self.http = passthrough_client(timeout=httpx.Timeout(self.config.upstream.timeout_seconds, connect=10.0))
        self.provider_http = streaming_client()
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
        if hasattr(self, "conversations"):  # absent when startup failed early
            await self.conversations.shutdown("server shutting down")
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
        self._cut = True
        for request in list(self._requests):
            request.cancel()

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
        path = scope["path"]
        method = scope["method"]
        if method == "POST" and path == BIDI_APPEND_PATH:
            await handle_append(self, scope, receive, send)
        elif method == "POST" and path == RUN_SSE_PATH:
            await handle_run_sse(self, scope, receive, send)
        elif path in HEALTH_PATHS:
            await reply(send, 204, b"", [])
        elif self.local_rpcs.handles(path):
            await self.local_rpcs.handle(scope, receive, send)
        else:
            await self.upstream.forward(scope, receive, send)


def create_app(config: Config) -> Gateway:
    return Gateway(config)


def serve(config: Config, listener: socket.socket) -> int:
    """Serve on `listener` (bound by the caller, handed over) in this process until SIGINT/SIGTERM.
    Raises DataDirError (one line) when the database cannot be opened."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows: no uvloop
        return asyncio.run(_serve(config, listener))
    return uvloop.run(_serve(config, listener))


async def _serve(config: Config, listener: socket.socket) -> int:
    gateway = create_app(config)
    try:
        await gateway.startup()
    except (StoreError, sqlite3.Error, OSError) as exc:
        listener.close()
        await gateway.shutdown()
        raise DataDirError(storage_problem(exc, config.database_path)) from None
    server = _embedded_server(gateway, listener)
    serving = asyncio.create_task(server.serve())
    stop = asyncio.Event()
    draining: list[asyncio.Task[None]] = []

    def on_signal() -> None:
        if draining:
            draining[0].cancel()  # asked twice: stop now
        stop.set()

    _on_stop_signals(on_signal)
    log.info("serving", extra={"host": config.server.host, "port": config.server.port, "db": str(config.database_path)})
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait((serving, stopping), return_when=asyncio.FIRST_COMPLETED)
    failed = serving.done()  # granian's serving task ends by itself only when it broke
    if failed:
        log.error("the HTTP server stopped unexpectedly; shutting down")
    loop = asyncio.get_running_loop()
    cut_at = loop.time() + CUT_SECONDS
    draining.append(asyncio.create_task(gateway.drain()))
    with contextlib.suppress(asyncio.CancelledError, TimeoutError):
        await asyncio.wait_for(draining[0], DRAIN_SECONDS)
    server.stop()
    if not (await asyncio.wait((serving,), timeout=max(0.0, cut_at - loop.time())))[0]:
        gateway.cut_requests()
        await asyncio.wait((serving,), timeout=CUT_GRACE_SECONDS)
    stopping.cancel()
    await gateway.shutdown()
    return 1 if failed else 0


def _on_stop_signals(callback: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, callback)
        except NotImplementedError:  # pragma: no cover - Windows event loops
            signal.signal(sig, lambda *_: loop.call_soon_threadsafe(callback))


def _embedded_server(app: Gateway, listener: socket.socket) -> Any:
    """Granian's embedded server (on the running loop; no lifespan: `_serve` starts and stops the
    app itself), serving on our listening socket. Granian would bind its own with SO_REUSEPORT,
    which lets another process share the port; its one socket hook is overridden to take ours."""
    from granian._granian import SocketHolder
    from granian.constants import HTTPModes, Interfaces
    from granian.log import LogLevels
    from granian.server.embed import Server

    fd = listener.detach()

    class ExclusiveSocketServer(Server):  # type: ignore[misc]
        def _init_shared_socket(self) -> None:
            self._ssp = None
            self._shd = SocketHolder(fd, False, BACKLOG)

    server = ExclusiveSocketServer(
        app,
        address=app.config.server.host,
        port=app.config.server.port,
        interface=Interfaces.ASGINL,
        http=HTTPModes.auto,
        websockets=False,
        backlog=BACKLOG,
        log_level=LogLevels.warning,
        # granian's records go to our handlers (and format), not to its own stdout handler
        log_dictconfig={"loggers": {"_granian": {"propagate": True}, "granian.access": {"propagate": True}}},
        log_access=False,
    )
    logging.getLogger("_granian").addFilter(lambda record: "experimental" not in record.getMessage())
    return server


__all__ = ["Gateway", "create_app", "serve"]
