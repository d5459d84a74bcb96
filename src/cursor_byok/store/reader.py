"""The read side: one thread that owns the read connection and runs read jobs on it in order.

A read is one hop to the thread and one back (`call_soon_threadsafe`); a job that reads several
tables inside one transaction sees one consistent snapshot, because nothing else uses the
connection meanwhile. WAL readers never block the writer.
"""
from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .thread_names import name_this_thread

T = TypeVar("T")
Job = Callable[[sqlite3.Connection], Any]


class ReaderThread:
    def __init__(self, conn: sqlite3.Connection, *, name: str) -> None:
        self._conn = conn
        self._loop = asyncio.get_running_loop()
        self._inbox: queue.SimpleQueue[tuple[asyncio.Future[Any], Job] | None] = queue.SimpleQueue()
        self._stopped: asyncio.Future[None] = self._loop.create_future()
        self.waiting = 0  # reads asked for and not yet answered (on the loop)
        threading.Thread(target=self._run, name=name, daemon=True).start()

    async def call(self, job: Callable[[sqlite3.Connection], T]) -> T:
        future: asyncio.Future[T] = self._loop.create_future()
        self._inbox.put((future, job))
        self.waiting += 1
        try:
            return await future
        finally:
            self.waiting -= 1

    async def close(self) -> None:
        """Finish the jobs already queued, then close the connection."""
        self._inbox.put(None)
        await self._stopped

    def _run(self) -> None:
        name_this_thread("store-reader")
        try:
            while (item := self._inbox.get()) is not None:
                future, job = item
                try:
                    outcome: tuple[Any, BaseException | None] = (job(self._conn), None)
                except BaseException as exc:  # handed to the awaiting caller
                    outcome = (None, exc)
                self._post(_settle, future, *outcome)
        finally:
            self._conn.close()
            self._post(_settle, self._stopped, None, None)

    def _post(self, callback: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            pass  # the event loop is gone: nobody is waiting any more


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller stopped waiting (cancelled)
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
