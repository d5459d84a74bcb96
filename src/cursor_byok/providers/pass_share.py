"""Every provider stream's reads share one budget of bytes per pass of the event loop.

A stream behind a fast provider finds far more in its socket than it can hand on at once; read in
parts, each stream's part is one step of its task per pass. With 32 such streams a pass is 32 parts
(~20 ms at 8 KiB each), and every step of a run start (its append's body, the input's commit, the
request, the first response read) waits for one such pass. Shared, a pass carries at most
`per_pass` bytes of the streams' backlog: the streams over it wait their turn, first come first
served, and a start's steps wait for a pass of that size instead. A stream that keeps up never
finds the budget spent and never waits.
"""
from __future__ import annotations

import asyncio
import collections

from ..loop_local import LoopLocal

PER_PASS_BYTES = 32 * 1024  # ~2 ms of a fast stream's work on this machine (~70 ns a byte)


class PassShare:
    """The budget of one event loop: `turn(size)` before handing on `size` bytes of a stream's read."""

    __slots__ = ("_loop", "_per_pass", "_left", "_queue", "_refill_due")

    def __init__(self, loop: asyncio.AbstractEventLoop, per_pass: int = PER_PASS_BYTES) -> None:
        self._loop = loop
        self._per_pass = per_pass
        self._left = per_pass
        self._queue: collections.deque[tuple[asyncio.Future[None], int]] = collections.deque()
        self._refill_due = False

    def turn(self, size: int, *, ahead: bool = False) -> asyncio.Future[None] | None:
        """None: go on now (the bytes are counted against this pass). Else a future to wait for:
        done in a later pass, whose budget counts them. `ahead`: go on now whatever is left (a
        response's first events: a run start's first text)."""
        if ahead or (self._left > 0 and not self._queue):
            self._left -= size
            if not self._refill_due:
                self._refill_due = True
                self._loop.call_soon(self._refill)
            return None
        waiter = self._loop.create_future()
        self._queue.append((waiter, size))
        return waiter

    def _refill(self) -> None:
        """A new pass: the budget again, first to those waiting (they run in the pass after this
        one's callbacks); due once more while any of it is counted or anything still waits."""
        self._left = self._per_pass
        queue = self._queue
        while queue and self._left > 0:
            waiter, size = queue.popleft()
            if not waiter.done():  # its stream was cancelled meanwhile
                self._left -= size
                waiter.set_result(None)
        if queue or self._left < self._per_pass:
            self._loop.call_soon(self._refill)
        else:
            self._refill_due = False


pass_share = LoopLocal(PassShare).get  # the running loop's budget
