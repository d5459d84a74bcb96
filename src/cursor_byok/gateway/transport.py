"""Transports: per request_id append ordering and the local-vs-upstream route decided at seqno 0.

A transport exists only for a request id whose seqno-0 append was valid: it is created routed, by
that append, after every check passed. Input that is refused never allocates one. An append with a
later seqno, or a RunSSE, that arrives before seqno 0 waits for the transport (bounded per request
id here, and overall by `Pending`) and holds nothing once its wait ends.

A transport generation starts at append_seqno 0; a seqno-0 run request with a new Cursor run id on the
same request_id starts a new generation (fresh reorder buffer). Routing only: the order of its
appends is the conversation's (`AppendOrder`, admitted and taken by its inbox), as is every
lifecycle decision.
"""
from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from ..protocol import ConnectError

if TYPE_CHECKING:
    from ..conversation import AppendOrder
    from ..protocol import BidiAppend

log = logging.getLogger("cursor_byok.gateway.transport")


class Route(str, enum.Enum):
    LOCAL = "local"
    UPSTREAM = "upstream"


class Waiter(str, enum.Enum):
    """What waits for a transport; each kind has its own cap per request id."""

    APPEND = "append"
    RUN_SSE = "run_sse"


# The IDE keeps up to 16 appends in flight and opens one RunSSE per request id (a reconnect may
# briefly overlap the old one); past these caps the oldest waiter of that kind gives way.
WAITERS_PER_REQUEST = {Waiter.APPEND: 64, Waiter.RUN_SSE: 4}


class Transport(msgspec.Struct, eq=False):
    request_id: str
    route: Route
    order: AppendOrder
    last_seen: float = msgspec.field(default_factory=time.monotonic)


class EarlyAppend(msgspec.Struct, eq=False):
    """A later append waiting for its seqno 0. A locally served seqno 0 takes it along: admitted,
    journaled and into the order in its own step, so it is handed over with the run request (a
    cancel that came first is seen before the model is called)."""

    append: BidiAppend
    durable: asyncio.Future[Any] | None = None  # its journal row, once taken along
    error: Exception | None = None  # why it could not be taken along (its own answer)


class Transports:
    def __init__(
        self, max_transports: int, idle_seconds: float, window: int = 64, *, run_is_live: Callable[[str], bool] = lambda _: False
    ) -> None:
        self.max_transports = max_transports
        self.idle_seconds = idle_seconds
        self.window = window
        # Whether the request id's run still goes on: its transport stays however long the IDE
        # takes (a tool it runs for minutes sends no append), or its next append has nowhere to go.
        self.run_is_live = run_is_live
        from ..conversation import AppendOrder  # loaded with the gateway, not with its health probe's routing

        self._new_order = AppendOrder
        self._by_request: dict[str, Transport] = {}  # least recently seen first
        self._waiting: dict[str, dict[Waiter, list[asyncio.Future[Transport]]]] = {}
        self.early: dict[str, list[EarlyAppend]] = {}  # appends waiting for their seqno 0, by request id

    def __len__(self) -> int:
        return len(self._by_request)

    def get(self, request_id: str) -> Transport | None:
        t = self._by_request.pop(request_id, None)
        if t is not None:
            self._by_request[request_id] = t  # most recently seen now
            t.last_seen = time.monotonic()
        return t

    def create(self, request_id: str, route: Route) -> Transport:
        """A new routed transport (its seqno 0 was valid); wakes whatever waits for it. At the
        limit the least recently seen transport whose run has ended gives way; when every one
        still has a live run, the new one is refused (ConnectError, nothing allocated): dropping
        a live run's transport would leave its next append nowhere to go."""
        if len(self._by_request) >= self.max_transports:
            self.expire()
            ended = [rid for rid in self._by_request if not self.run_is_live(rid)]
            for oldest in ended[: len(self._by_request) - self.max_transports + 1]:
                del self._by_request[oldest]
                log.warning("transport limit reached; dropped the least recently used", extra={"request_id": oldest})
            if len(self._by_request) >= self.max_transports:
                raise ConnectError("resource_exhausted", f"too many live runs ({self.max_transports}); try again when one has ended")
        t = Transport(request_id, route, self._new_order(request_id, self.window))
        self._by_request[request_id] = t
        for waiters in self._waiting.pop(request_id, {}).values():
            for fut in waiters:
                if not fut.done():
                    fut.set_result(t)
        return t

    def restore(self, order: AppendOrder) -> None:
        """A local transport rebuilt from the journal after a restart (a later generation replaces it)."""
        self._by_request.pop(order.request_id, None)
        self._by_request[order.request_id] = Transport(order.request_id, Route.LOCAL, order)

    def park(self, append: BidiAppend) -> EarlyAppend:
        """Park a later append while it waits for its seqno 0 (`unpark` when the wait ends)."""
        early = EarlyAppend(append)
        self.early.setdefault(append.request_id, []).append(early)
        return early

    def unpark(self, early: EarlyAppend) -> None:
        parked = self.early.get(early.append.request_id)
        if parked is not None and early in parked:
            parked.remove(early)
            if not parked:
                del self.early[early.append.request_id]

    def parked(self) -> int:
        return sum(len(parked) for parked in self.early.values())

    async def wait_for(self, request_id: str, kind: Waiter) -> Transport:
        """The transport once its seqno 0 arrives; the caller bounds the wait (a Pending slot)."""
        t = self.get(request_id)
        if t is not None:
            return t
        by_kind = self._waiting.setdefault(request_id, {})
        waiters = by_kind.setdefault(kind, [])
        if len(waiters) >= WAITERS_PER_REQUEST[kind]:
            oldest = waiters.pop(0)
            if not oldest.done():
                oldest.set_exception(ConnectError("resource_exhausted", f"too many {kind.value} requests waiting for request {request_id}"))
        fut: asyncio.Future[Transport] = asyncio.get_running_loop().create_future()
        waiters.append(fut)
        try:
            return await fut
        finally:
            self._forget(request_id, kind, fut)

    def _forget(self, request_id: str, kind: Waiter, fut: asyncio.Future[Transport]) -> None:
        by_kind = self._waiting.get(request_id)
        if by_kind is None:
            return
        waiters = by_kind.get(kind, [])
        if fut in waiters:
            waiters.remove(fut)
        if not waiters:
            by_kind.pop(kind, None)
            if not by_kind:
                del self._waiting[request_id]

    def expire(self, now: float | None = None) -> int:
        """Forget transports idle for `idle_seconds` whose run has ended."""
        now = time.monotonic() if now is None else now
        stale = [
            rid for rid, t in self._by_request.items() if now - t.last_seen > self.idle_seconds and not self.run_is_live(rid)
        ]
        for rid in stale:
            del self._by_request[rid]
        return len(stale)

    @property
    def waiting(self) -> int:
        """Request ids something waits for (no transport yet)."""
        return len(self._waiting)

    def __len__(self) -> int:
        return len(self._by_request)
