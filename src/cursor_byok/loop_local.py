"""One object per event loop, made on first use in that loop: state kept per pass of a loop (the
provider streams' read budget, the run outputs' end-of-pass flush) belongs to the loop that runs
the pass, and a test's or a second server's loop gets its own."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class LoopLocal(Generic[T]):
    """`get()`: the running loop's object, made by `make(loop)` the first time; the objects of
    closed loops are dropped when a new loop's is made."""

    __slots__ = ("_make", "_by_loop")

    def __init__(self, make: Callable[[asyncio.AbstractEventLoop], T]) -> None:
        self._make = make
        self._by_loop: dict[asyncio.AbstractEventLoop, T] = {}

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        made = self._by_loop.get(loop)
        if made is None:
            for closed in [other for other in self._by_loop if other.is_closed()]:
                del self._by_loop[closed]
            made = self._by_loop[loop] = self._make(loop)
        return made
