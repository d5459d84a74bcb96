"""Pending requests: the ones still waiting for their body or for their transport.

Waiting is what junk can cost us (slow bodies, appends whose seqno 0 never comes, RunSSEs for
request ids nobody uses), so every wait holds a slot here: at most `per_connection` per connection
(the next is refused), at most `max_total` overall, and when that is full the OLDEST pending
request is evicted to make room: a fresh request (a real IDE's among them) always gets in. Nothing
stays behind once a slot is left.

A slot ends its wait as `asyncio.timeout` does (its task is cancelled, and the cancellation it
caused comes out as the slot's own error), but the registry keeps the deadlines itself, under one
timer: every request holds a slot or two for a moment, and a timeout object and a timer of its own
for each cost the loop three times what the rest of the slot does.
"""
from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import math
from collections.abc import Callable, Hashable
from types import TracebackType
from typing import Any

from ..protocol import ConnectError
from .asgi import DISCARD_AFTER_REFUSAL, BodyTimeout, BodyTooLarge, Receive, Scope, declared_length, discard

EVICTED_MESSAGE = "too many pending requests: this one was the oldest and was dropped"
# A timer may go off up to the loop clock's grain before its time (uvloop keeps milliseconds).
_CLOCK_GRAIN = 0.001


class _Slot:
    """One pending wait (`with`: neither entering nor leaving awaits, so no coroutine of its own
    either): held by the task that entered it."""

    __slots__ = ("body_bytes", "connection", "evicted", "expired", "seconds", "task", "_cancelling", "_on_timeout", "_pending")

    def __init__(self, pending: Pending, connection: Hashable, seconds: float, on_timeout: Callable[[], ConnectError]) -> None:
        self._pending = pending
        self.connection = connection
        self.seconds = seconds
        self._on_timeout = on_timeout
        self.task: asyncio.Task[Any] | None = None
        self._cancelling = 0
        self.expired = False  # its wait was cut (deadline or eviction): its task was cancelled for it
        self.evicted = False
        self.body_bytes = 0  # of its request body, read and held so far

    def __enter__(self) -> _Slot:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a pending slot is held by a task")
        self.task = task
        self._cancelling = task.cancelling()
        self._pending._hold(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        """Leave the slot after its wait ended with `exc_type` (None: it ended well); raises the
        slot's own error when the wait was cut for it."""
        self._pending._release(self)
        if not self.expired:
            return
        assert self.task is not None
        # Ours only if no other cancellation of the task is still pending (as asyncio.timeout decides).
        if self.task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise (ConnectError("resource_exhausted", EVICTED_MESSAGE) if self.evicted else self._on_timeout()) from None

    def cut(self) -> None:
        """End the wait now: its task gets the cancellation that `__exit__` turns into its error."""
        self.expired = True
        assert self.task is not None
        self.task.cancel()


class Pending:
    def __init__(self, max_total: int, per_connection: int, max_body_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_total = max_total
        self.per_connection = per_connection
        # Bytes of bodies being read, over all slots: past it the oldest body is dropped (as for slots).
        self.max_body_bytes = max_body_bytes
        self.body_bytes = 0
        self._slots: dict[_Slot, None] = {}  # insertion order: oldest first
        self._per_connection: dict[Hashable, int] = {}
        self.evictions = 0
        # (deadline, order, slot) of every slot held since the timer last went off; a slot left since
        # stays until it comes to the top (or the heap is rebuilt), as a released one is never cut.
        self._deadlines: list[tuple[float, int, _Slot]] = []
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def __len__(self) -> int:
        return len(self._slots)

    def slot(self, scope: Scope, seconds: float, on_timeout: Callable[[], ConnectError]) -> _Slot:
        """Hold a pending slot (`with`) for at most `seconds`: raises `on_timeout` when the time
        is up, resource_exhausted when a newer request needed the slot, resource_exhausted at once
        when this connection already holds its share."""
        client = scope.get("client")
        connection = tuple(client) if client else None  # one key per connection (HTTP/2 streams share it)
        if self._per_connection.get(connection, 0) >= self.per_connection:
            raise ConnectError("resource_exhausted", f"too many pending requests on one connection (limit {self.per_connection})")
        while len(self._slots) >= self.max_total:
            self._evict_oldest()
        return _Slot(self, connection, seconds, on_timeout)

    def _hold(self, entry: _Slot) -> None:
        self._slots[entry] = None
        self._per_connection[entry.connection] = self._per_connection.get(entry.connection, 0) + 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + entry.seconds
        deadlines = self._deadlines
        if len(deadlines) > 2 * len(self._slots) + 64:  # mostly slots left long ago: keep the held ones
            deadlines[:] = [d for d in deadlines if d[2] in self._slots]
            heapq.heapify(deadlines)
        heapq.heappush(deadlines, (deadline, next(self._order), entry))
        if deadline < self._timer_at:
            self._arm(loop, deadline)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._cut_due)
        self._timer_at = when

    def _cut_due(self) -> None:
        """The timer went off: cut every held slot whose deadline has passed; set it for the next."""
        self._timer, self._timer_at = None, math.inf
        loop = asyncio.get_running_loop()
        now = loop.time() + _CLOCK_GRAIN
        deadlines = self._deadlines
        while deadlines:
            deadline, _, entry = deadlines[0]
            if entry in self._slots and not entry.expired:
                if deadline > now:
                    self._arm(loop, deadline)
                    return
                entry.cut()
            heapq.heappop(deadlines)

    def _evict_oldest(self) -> None:
        self._evict(next(iter(self._slots)))

    def _evict(self, entry: _Slot) -> None:
        self._release(entry)
        entry.evicted = True
        self.evictions += 1
        entry.cut()

    def _make_room(self, entry: _Slot) -> None:
        """The bodies held are over `max_body_bytes` with `entry`'s latest chunk: drop the oldest."""
        if entry.body_bytes > self.max_body_bytes:  # no room to make: it alone is over
            raise ConnectError("resource_exhausted", f"request bodies being read exceed {self.max_body_bytes} bytes")
        while self.body_bytes > self.max_body_bytes:
            self._evict(next(s for s in self._slots if s.body_bytes and s is not entry))

    def _release(self, entry: _Slot) -> None:
        if self._slots.pop(entry, False) is None:
            self.body_bytes -= entry.body_bytes
            left = self._per_connection[entry.connection] - 1
            if left:
                self._per_connection[entry.connection] = left
            else:
                del self._per_connection[entry.connection]

    async def read_body(self, scope: Scope, receive: Receive, limit: int, seconds: float, expected: int | None = None) -> bytes:
        """The whole request body, read within `seconds` while holding a slot (BodyTimeout after),
        its bytes counted against `max_body_bytes`; ConnectError resource_exhausted past `limit`,
        from the declared length before reading and per chunk while reading. `expected`: its
        declared content-length (read from the headers when not given). Granian hands over a
        body's bytes with more_body set and its end as a separate empty message, a wait of its own:
        once the declared bytes are in, the body is whole and that end is not waited for."""
        if expected is None:
            expected = declared_length(scope)
        chunks: list[bytes] = []
        size = 0
        # The read is this coroutine's own (no helper's frame resumed with it at each chunk).
        with self.slot(scope, seconds, functools.partial(BodyTimeout, seconds)) as entry:
            if expected is not None and expected > limit:
                raise BodyTooLarge(limit, receive)
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ConnectError("canceled", "client disconnected")
                chunk = message.get("body", b"")
                more = message.get("more_body", False)
                if chunk:
                    n = len(chunk)
                    size += n
                    if size == expected:
                        more = False
                    if size > limit:
                        if more:
                            await discard(receive, DISCARD_AFTER_REFUSAL)
                        raise ConnectError("resource_exhausted", f"request body exceeds the {limit}-byte limit")
                    entry.body_bytes += n
                    self.body_bytes += n
                    if self.body_bytes > self.max_body_bytes:
                        self._make_room(entry)
                    chunks.append(chunk)
                if not more:
                    break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
