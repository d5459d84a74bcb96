"""The log flood filter: one record per kind per interval, the next saying how many were left out."""
from __future__ import annotations

import logging

from cursor_byok.log_flood import LogFloodFilter


def record(name: str, msg: str, exc: type[BaseException] | None = None) -> logging.LogRecord:
    exc_info = (exc, exc(), None) if exc is not None else None
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, None, exc_info)


def test_one_record_per_kind_per_interval() -> None:
    now = [100.0]
    flood = LogFloodFilter(interval=60.0, clock=lambda: now[0])
    assert flood.filter(record("asyncio", "socket.accept() out of system resource", OSError))
    assert not any(flood.filter(record("asyncio", "socket.accept() out of system resource", OSError)) for _ in range(1000))
    assert flood.filter(record("asyncio", "socket.accept() out of system resource", ConnectionError))  # another kind
    assert flood.filter(record("_granian.workers", "Failed to accept connection"))
    now[0] += 60.0
    again = record("asyncio", "socket.accept() out of system resource", OSError)
    assert flood.filter(again)
    assert "1000 more like it" in again.getMessage()


def test_the_servers_own_lines_are_never_limited() -> None:
    flood = LogFloodFilter(interval=60.0, clock=lambda: 0.0)
    assert all(flood.filter(record("cursor_byok.providers", "provider request failed: %s")) for _ in range(10))
