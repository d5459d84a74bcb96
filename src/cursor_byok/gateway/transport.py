"""Transports: per request_id append ordering and the local-vs-upstream route decided at seqno 0.

A transport generation starts at append_seqno 0; a seqno-0 run request with a new Cursor run id on the
same request_id starts a new generation (fresh reorder buffer). Routing and ordering only: the
conversation runtime owns every lifecycle decision.
"""
from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field

from .. import hotpath
from ..protocol import BidiAppend


class Route(str, enum.Enum):
    LOCAL = "local"
    UPSTREAM = "upstream"


@dataclass(eq=False)
class Transport:
    request_id: str
    window: int = 64
    route: Route | None = None
    routed: asyncio.Event = field(default_factory=asyncio.Event)
    buffer: hotpath.ReorderBuffer = field(init=False)
    seqno0_raw: bytes = b""
    cursor_run_id: str = ""
    last_seen: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.buffer = hotpath.ReorderBuffer(self.window)

    def set_route(self, route: Route) -> None:
        self.route = route
        self.routed.set()

    def new_generation(self, append: BidiAppend, cursor_run_id: str) -> None:
        self.buffer = hotpath.ReorderBuffer(self.window)
        self.seqno0_raw = append.raw
        self.cursor_run_id = cursor_run_id

    async def wait_routed(self, timeout: float) -> bool:
        if self.route is not None:
            return True
        try:
            await asyncio.wait_for(self.routed.wait(), timeout)
        except TimeoutError:
            return False
        return True


class Transports:
    def __init__(self, max_transports: int, idle_seconds: float, window: int = 64) -> None:
        self.max_transports = max_transports
        self.idle_seconds = idle_seconds
        self.window = window
        self._by_request: dict[str, Transport] = {}

    def get(self, request_id: str) -> Transport | None:
        t = self._by_request.get(request_id)
        if t is not None:
            t.last_seen = time.monotonic()
        return t

    def get_or_create(self, request_id: str) -> Transport | None:
        """None when the transport limit is reached (the caller answers resource_exhausted)."""
        t = self.get(request_id)
        if t is None:
            if len(self._by_request) >= self.max_transports:
                self.expire()
                if len(self._by_request) >= self.max_transports:
                    return None
            t = Transport(request_id, self.window)
            self._by_request[request_id] = t
        return t

    def expire(self, now: float | None = None) -> int:
        now = time.monotonic() if now is None else now
        stale = [rid for rid, t in self._by_request.items() if now - t.last_seen > self.idle_seconds]
        for rid in stale:
            del self._by_request[rid]
        return len(stale)

    def __len__(self) -> int:
        return len(self._by_request)
