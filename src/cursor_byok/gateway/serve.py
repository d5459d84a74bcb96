"""Run the gateway in this process: granian's embedded server on this process's uvloop loop.

Granian serves from the moment it has the listener: the health probe at once, everything else once
the gateway behind it has been imported and started (`front.py`).

One process and no worker: nothing can outlive a crash of it and keep the port or the database.
SIGINT or SIGTERM (to the process or its whole group) stops it within 3 s, however busy its
connections are: open RunSSE streams get their one `unavailable` terminal and DRAIN_SECONDS to read
it, the HTTP server then closes gracefully until CUT_SECONDS, whatever request still runs is
cancelled, and the server gets CUT_GRACE_SECONDS to let go of it. A second signal skips the rest of
the drain. SIGHUP reads the config file again (`cursor_byok.running.Server.reload`).
"""
from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sqlite3
from collections.abc import Callable
from typing import Any

from ..config import Config
from ..instance import (
    BACKLOG,
    ConnectionWarden,
    DataDirError,
    WardenLimits,
    checked_tls_files,
    connection_cap,
    raise_open_file_limit,
    storage_problem,
)
from .front import LoadingFront, Running
from .limits import granian_limits
from .lock_hand_over import hand_over_the_lock_often
from .memory import freeze_startup_objects

log = logging.getLogger("cursor_byok.gateway")

CUT_SECONDS = 2.5
CUT_GRACE_SECONDS = 0.5


def serve(config: Config, listener: socket.socket, root: str) -> int:
    """Serve on `listener` (bound by the caller, handed over) until SIGINT/SIGTERM what the
    composition root, the module `root`, starts; returns the exit status. Raises DataDirError (one
    line) when the database cannot be opened."""
    raise_open_file_limit()
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows: no uvloop
        return asyncio.run(_serve(config, listener, root))
    return uvloop.run(_serve(config, listener, root))


class _Signals:
    """The first SIGINT/SIGTERM asks for a graceful stop; another one calls `on_repeat`. SIGHUP
    calls `on_reload` (the config is read again), and never stops the server."""

    def __init__(self) -> None:
        self.received = asyncio.Event()
        self.on_repeat: Callable[[], object] = lambda: None
        self.on_reload: Callable[[], object] = lambda: log.warning("config not reloaded: the server is still starting")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._on_signal)
            except NotImplementedError:  # pragma: no cover - Windows event loops
                signal.signal(sig, lambda *_: loop.call_soon_threadsafe(self._on_signal))
        if hasattr(signal, "SIGHUP"):  # pragma: no branch - Windows has none
            loop.add_signal_handler(signal.SIGHUP, self._on_reload)

    def _on_reload(self) -> None:
        try:
            self.on_reload()
        except Exception as exc:  # noqa: BLE001 - a reload that breaks is a log line, never a stop
            log.error("config reload failed; the server goes on with the config it had", exc_info=exc)

    def _on_signal(self) -> None:
        if self.received.is_set():
            self.on_repeat()
        self.received.set()


async def _serve(config: Config, listener: socket.socket, root: str) -> int:
    signals = _Signals()  # a stop asked while loading is served once the gateway is up
    front = LoadingFront(config, root)
    server = _embedded_server(front, listener)
    serving = asyncio.create_task(server.serve())
    try:
        running = await front.load()
    except BaseException as exc:
        server.stop()
        await asyncio.wait((serving,), timeout=CUT_SECONDS)
        from ..store import StoreError  # loaded with the gateway; not before the server listens

        if isinstance(exc, (StoreError, sqlite3.Error, OSError)):
            raise DataDirError(storage_problem(exc, config.database_path if config.embedded_store else None)) from None
        raise
    from .app import DRAIN_SECONDS  # loaded by now

    gateway = running.gateway
    signals.on_reload = running.reload
    freeze_startup_objects()
    hand_over_the_lock_often()
    _start_warden(config, running)
    log.info("serving", extra={"host": config.server.host, "port": config.server.port, "db": running.store.location})
    stop_asked = asyncio.create_task(signals.received.wait())
    await asyncio.wait((serving, stop_asked), return_when=asyncio.FIRST_COMPLETED)
    stop_asked.cancel()
    failed = serving.done()  # granian's serving task ends by itself only when it broke
    if failed:
        log.error("the HTTP server stopped unexpectedly; shutting down", exc_info=serving.exception())
    loop = asyncio.get_running_loop()
    cut_at = loop.time() + CUT_SECONDS
    draining = asyncio.create_task(gateway.drain())
    signals.on_repeat = draining.cancel
    await asyncio.wait((draining,), timeout=DRAIN_SECONDS)
    if not draining.done():
        draining.cancel()
    elif not draining.cancelled() and draining.exception() is not None:
        log.error("draining open streams failed", exc_info=draining.exception())
    server.stop()
    if not (await asyncio.wait((serving,), timeout=max(0.0, cut_at - loop.time())))[0]:
        gateway.cut_requests()
        await asyncio.wait((serving,), timeout=CUT_GRACE_SECONDS)
    await running.stop()
    return 1 if failed else 0


def _start_warden(config: Config, running: Running) -> None:
    """The server port's connection limits, which granian does not enforce (see instance.connections),
    supervised with the server's other background tasks (stopped with them)."""
    if not ConnectionWarden.available():
        return
    server = config.server
    cap = connection_cap(server.max_connections)
    limits = WardenLimits(server.port, server.first_byte_timeout_seconds, server.header_read_timeout_seconds, cap)
    running.supervisor.start("connection-warden", ConnectionWarden(limits, running.gateway.connections).run)


def _tls(config: Config) -> dict[str, Any]:
    """Granian's TLS arguments: the operator's certificate and key (checked by `serve` before the
    start), or none."""
    files = checked_tls_files(config.server.tls_cert, config.server.tls_key)
    if files is None:
        return {}
    from granian.constants import SSLProtocols

    return {"ssl_cert": files.cert, "ssl_key": files.key, "ssl_protocol_min": SSLProtocols.tls12}


def _embedded_server(app: LoadingFront, listener: socket.socket) -> Any:
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
        **granian_limits(app.config.server),
        log_level=LogLevels.warning,
        # granian's records go to our handlers (and format), not to its own stdout handler
        log_dictconfig={"loggers": {"_granian": {"propagate": True}, "granian.access": {"propagate": True}}},
        log_access=False,
        **_tls(app.config),
    )
    logging.getLogger("_granian").addFilter(lambda record: "experimental" not in record.getMessage())
    return server
