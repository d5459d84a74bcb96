"""Background tasks that cannot die silently: an unexpected exception is logged once, with the task's
name, and the task starts again after a backoff; stopping cancels them all and never raises.

A task that dies unwatched is found only at shutdown, when awaiting it re-raises its exception and
whatever should have been closed after it is not. Here nothing of a task's failure leaves its task.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("cursor_byok.supervision")

FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0
# A task that ran this long before failing failed afresh: its next restart waits the first backoff again.
STEADY_SECONDS = 300.0

Work = Callable[[], Coroutine[Any, Any, None]]


class Supervisor:
    """`start(name, work)` runs `work()` as a named task, again after each failure; `stop()` ends all."""

    def __init__(self, *, first_backoff: float = FIRST_BACKOFF_SECONDS, max_backoff: float = MAX_BACKOFF_SECONDS) -> None:
        self._first_backoff = first_backoff
        self._max_backoff = max_backoff
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.failures: dict[str, int] = {}  # by task name, for /metrics and tests

    def start(self, name: str, work: Work) -> None:
        if name in self._tasks:
            raise ValueError(f"a task named {name!r} is already supervised")
        self._tasks[name] = asyncio.get_running_loop().create_task(self._keep(name, work), name=name)

    async def stop(self) -> None:
        """Cancel every task and wait for each; nothing a task did is raised here."""
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    async def _keep(self, name: str, work: Work) -> None:
        loop = asyncio.get_running_loop()
        backoff = self._first_backoff
        while True:
            started = loop.time()
            try:
                await work()
                return  # done: nothing left for it to do
            except Exception as exc:  # noqa: BLE001 - the point: a bug in a task is logged, not lost
                self.failures[name] = self.failures.get(name, 0) + 1
                if loop.time() - started >= STEADY_SECONDS:
                    backoff = self._first_backoff
                log.error("background task %s failed (%s); restarting it in %.0f s", name, type(exc).__name__, backoff, exc_info=exc)
            await asyncio.sleep(backoff)
            backoff = min(self._max_backoff, backoff * 2)


__all__ = ["Supervisor"]
