"""No log flood: records an attack can repeat at will (a failed accept, a broken connection) pass
one per kind per interval, the next one saying how many like it were left out.

Under a thousand idle connections at a desktop's open-file limit, asyncio logged 80,690 tracebacks
(35 MB in 25 s) and granian logs a failed accept twice a second: the disk fills and the lines that
matter are lost. A kind is the logger, the message template and the exception type; only the
loggers named here are limited (the server's own lines say something each time).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

FLOOD_LOGGERS = ("asyncio", "_granian", "granian", "cursor_byok.interceptor", "cursor_byok.connections")
FLOOD_INTERVAL_SECONDS = 60.0
_MAX_KINDS = 256


class LogFloodFilter(logging.Filter):
    def __init__(
        self, interval: float = FLOOD_INTERVAL_SECONDS, loggers: tuple[str, ...] = FLOOD_LOGGERS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.interval = interval
        self._loggers = loggers
        self._clock = clock
        self._kinds: dict[tuple[str, str, str], tuple[float, int]] = {}  # kind → (last passed, left out since)

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        if not any(name == root or name.startswith(root + ".") for root in self._loggers):
            return True
        exc = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else ""
        kind = (name, str(record.msg), exc)
        now = self._clock()
        passed, left_out = self._kinds.get(kind, (-self.interval, 0))
        if now - passed < self.interval:
            self._kinds[kind] = (passed, left_out + 1)
            return False
        if len(self._kinds) >= _MAX_KINDS:
            self._kinds.clear()  # junk with ever-new messages: start over rather than grow
        self._kinds[kind] = (now, 0)
        if left_out:
            record.msg = f"{record.msg} ({left_out} more like it in the last {now - passed:.0f}s left out)"
        return True
