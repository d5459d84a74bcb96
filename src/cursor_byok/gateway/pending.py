"""Pending requests: the ones still waiting for their body or for their transport.

Waiting is what junk can cost us (slow bodies, appends whose seqno 0 never comes, RunSSEs for
request ids nobody uses), so every wait holds a slot here: at most `per_connection` per connection
(the next is refused), at most `max_total` overall, and when that is full the OLDEST pending
request is evicted to make room: a fresh request (a real IDE's among them) always gets in. A slot is
an `asyncio.timeout` this registry can pull in, so eviction and the wait's own deadline end the
wait the same way. Nothing stays behind once a slot is left.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from types import TracebackType

from ..protocol import ConnectError
from .asgi import BodyTimeout, Receive, Scope, read_body

EVICTED_MESSAGE = "too many pending requests: this one was the oldest and was dropped"


class _Slot:
    """One pending wait: an async context manager (a class, not an async generator: it is entered
    for every request's body)."""

    __slots__ = ("connection", "evicted", "timeout", "_on_timeout", "_pending")

    def __init__(self, pending: Pending, connection: Hashable, seconds: float, on_timeout: Callable[[], ConnectError]) -> None:
        self._pending = pending
        self.connection = connection
        self.timeout = asyncio.timeout(seconds)
        self._on_timeout = on_timeout
        self.evicted = False

    async def __aenter__(self) -> None:
        await self.timeout.__aenter__()
        self._pending._hold(self)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._pending._release(self)
        timeout = self.timeout
        try:
            await timeout.__aexit__(exc_type, exc, tb)
        except TimeoutError:
            if not timeout.expired():
                raise  # not our deadline
            raise (ConnectError("resource_exhausted", EVICTED_MESSAGE) if self.evicted else self._on_timeout()) from None


def connection_of(scope: Scope) -> Hashable:
    """One key per client connection (its address and port; HTTP/2 streams share it)."""
    client = scope.get("client")
    return tuple(client) if client else None


class Pending:
    def __init__(self, max_total: int, per_connection: int) -> None:
        self.max_total = max_total
        self.per_connection = per_connection
        self._slots: dict[_Slot, None] = {}  # insertion order: oldest first
        self._per_connection: dict[Hashable, int] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._slots)

    def slot(self, scope: Scope, seconds: float, on_timeout: Callable[[], ConnectError]) -> _Slot:
        """Hold a pending slot (`async with`) for at most `seconds`: raises `on_timeout` when the time
        is up, resource_exhausted when a newer request needed the slot, resource_exhausted at once
        when this connection already holds its share."""
        connection = connection_of(scope)
        if self._per_connection.get(connection, 0) >= self.per_connection:
            raise ConnectError("resource_exhausted", f"too many pending requests on one connection (limit {self.per_connection})")
        while len(self._slots) >= self.max_total:
            self._evict_oldest()
        return _Slot(self, connection, seconds, on_timeout)

    def _hold(self, entry: _Slot) -> None:
        self._slots[entry] = None
        self._per_connection[entry.connection] = self._per_connection.get(entry.connection, 0) + 1

    def _evict_oldest(self) -> None:
        oldest = next(iter(self._slots))
        self._release(oldest)
        oldest.evicted = True
        self.evictions += 1
        oldest.timeout.reschedule(asyncio.get_running_loop().time())

    def _release(self, entry: _Slot) -> None:
        if self._slots.pop(entry, False) is None:
            left = self._per_connection[entry.connection] - 1
            if left:
                self._per_connection[entry.connection] = left
            else:
                del self._per_connection[entry.connection]

    async def read_body(self, scope: Scope, receive: Receive, limit: int, seconds: float) -> bytes:
        """The whole request body, read within `seconds` while holding a slot (BodyTimeout after)."""
        async with self.slot(scope, seconds, lambda: BodyTimeout(seconds)):
            return await read_body(receive, limit)
