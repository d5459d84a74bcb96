"""Run an InterceptingProxy on its own event loop in a background thread.

`cursor-byok serve` blocks the main thread in the gateway's server (which owns the signal
handlers); the proxy lives beside it and is stopped after the gateway returns.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from .proxy import InterceptingProxy

log = logging.getLogger("cursor_byok.interceptor")


def _quiet_accept_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Out of file descriptors, asyncio pauses accepting for a second and reports it with a
    traceback each time: one line instead (and the log's flood filter keeps it to one a minute)."""
    exc = context.get("exception")
    if isinstance(exc, OSError) and "accept" in context.get("message", ""):
        log.warning("proxy cannot accept connections for now: %s", exc)
        return
    loop.default_exception_handler(context)


class ProxyThread:
    def __init__(self, proxy: InterceptingProxy, *, name: str = "cursor-byok-proxy") -> None:
        self.proxy = proxy
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stopped: asyncio.Event | None = None

    def start(self, timeout: float = 10.0) -> int:
        """Start the thread and the proxy; returns the bound port or raises the startup error."""
        if self._thread is not None:
            raise RuntimeError("proxy thread already started")
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("proxy did not start in time")
        if self._error is not None:
            self._thread.join(timeout)
            raise self._error
        return self.proxy.port

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(_quiet_accept_errors)
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _main(self) -> None:
        self._stopped = asyncio.Event()
        try:
            await self.proxy.start()
        except BaseException as exc:  # handed to the starting thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stopped.wait()
        finally:
            await self.proxy.stop()

    def stop(self, timeout: float = 10.0) -> None:
        thread, loop, stopped = self._thread, self._loop, self._stopped
        if thread is None or loop is None:
            return
        if stopped is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stopped.set)
            except RuntimeError:  # loop already closed
                pass
        thread.join(timeout)
        self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._error is None
