"""Capture in a running server: on when the data dir's settings say so (read at start, and again
when `cursor-byok capture start|stop` asks through the server's local admin route)."""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from ..config import Config, ConfigError, resolve_api_key
from ..local_trust import PROXY_SECRET_ENV, auth_token
from .redact import Redactor
from .settings import CaptureSettings, captures_dir, read_active
from .tap import Exchange, Receive, Route, Scope, Send, recorded_path, tap
from .writer import CaptureWriter

__all__ = ["Capture", "configured_secrets", "sync_capture"]

log = logging.getLogger("cursor_byok.capture")

STOP_GRACE_SECONDS = 5.0  # how long a stop waits for the streams still open to end (and be written)


def configured_secrets(config: Config) -> list[str]:
    """Every credential this server knows: the models' keys, its auth token, the proxy's secret."""
    found = [os.environ.get(PROXY_SECRET_ENV, "")]
    for model in config.models:
        try:
            found.append(resolve_api_key(config, model))
        except ConfigError:
            continue
    try:
        found.append(auth_token(config))
    except ConfigError:
        pass
    return [s for s in found if s]


class Capture:
    """A capture being recorded: the gateway hands it every request while it is on."""

    def __init__(self, settings: CaptureSettings, directory: Path, redactor: Redactor) -> None:
        self.settings = settings
        self.directory = directory
        self.writer = CaptureWriter(directory, redactor)
        self.open = 0  # exchanges being recorded (on the loop)
        self._idle = threading.Event()  # set while none is: a stop waits for it
        self._idle.set()

    async def around(self, scope: Scope, receive: Receive, send: Send, route: Route) -> None:
        path = recorded_path(scope["path"])
        if path is None:
            await route(scope, receive, send)
            return
        self.open += 1
        self._idle.clear()
        await tap(scope, receive, send, route, path, self._done)

    def _done(self, exchange: Exchange) -> None:
        self.writer.submit(exchange)
        self.open -= 1
        if not self.open:
            self._idle.set()

    def status(self) -> dict[str, Any]:
        return {
            "on": True,
            "session": self.settings.session,
            "directory": str(self.directory),
            "with_content": self.settings.with_content,
            "streams_written": self.writer.written,
            "pending": self.writer.pending,
            "dropped": self.writer.dropped,
        }

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> dict[str, Any]:
        """Let the streams still open end (up to `grace` seconds), write everything and stop
        (blocks: call it off the loop); the final status, with the streams cut short of the capture."""
        self._idle.wait(grace)
        unfinished = self.open
        self.writer.close()
        return {**self.status(), "on": False, "unfinished": unfinished}


def sync_capture(current: Capture | None, config: Config) -> tuple[Capture | None, dict[str, Any]]:
    """The capture the data dir's settings ask for, `current` kept when they still ask for it, and
    the status to report (blocks when a capture stops: call it off the loop)."""
    wanted = read_active(config.data_path)
    if current is not None and wanted == current.settings:
        return current, current.status()
    final = current.stop() if current is not None else {"on": False}
    if current is not None:
        log.info("capture stopped", extra={"capture_dir": str(current.directory), "streams": current.writer.written})
    if wanted is None:
        return None, final
    directory = captures_dir(config.data_path) / wanted.session
    started = Capture(wanted, directory, Redactor(configured_secrets(config), wanted.with_content))
    log.warning(
        "capture on: recording every agent RPC to %s (%s); `cursor-byok capture stop` ends it",
        directory, "WITH CONTENT" if wanted.with_content else "redacted",
    )
    return started, started.status()
