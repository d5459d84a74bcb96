"""DisconnectWatch: a RunSSE learns its client left from a callback on the server's pending
receive (granian's receive is a future), with no task of its own; a coroutine receive still works."""
from __future__ import annotations

import asyncio
from typing import Any

from cursor_byok.gateway.asgi import DisconnectWatch


class FutureServer:
    """An ASGI `receive` that returns a future, as granian's does, resolved by the test."""

    def __init__(self) -> None:
        self.waiting: list[asyncio.Future[dict[str, Any]]] = []

    def receive(self) -> asyncio.Future[dict[str, Any]]:
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        return future


async def test_the_end_of_the_body_is_read_past_and_a_disconnect_calls_on_leave_once() -> None:
    server, left = FutureServer(), asyncio.Event()
    tasks = len(asyncio.all_tasks())
    watch = DisconnectWatch(server.receive, left.set)
    assert len(asyncio.all_tasks()) == tasks  # no task of its own
    server.waiting[0].set_result({"type": "http.request", "body": b"", "more_body": False})
    await asyncio.sleep(0)  # the future's callbacks run in the loop's next pass
    assert len(server.waiting) == 2 and not watch.ended
    server.waiting[1].set_result({"type": "http.disconnect"})
    await left.wait()
    assert watch.ended and len(server.waiting) == 2
    watch.stop()  # nothing pending: a no-op


async def test_stop_cancels_the_pending_receive_and_calls_nothing() -> None:
    server, left = FutureServer(), []
    watch = DisconnectWatch(server.receive, lambda: left.append(True))
    watch.stop()
    assert server.waiting[0].cancelled()
    await asyncio.sleep(0)
    assert not watch.ended and left == []


async def test_a_receive_that_fails_ends_the_watch_without_calling_on_leave() -> None:
    server, left = FutureServer(), []
    watch = DisconnectWatch(server.receive, lambda: left.append(True))
    server.waiting[0].set_exception(RuntimeError("transport gone"))
    await asyncio.sleep(0)
    assert watch.ended and left == []


async def test_a_receive_that_raises_at_once_ends_the_watch() -> None:
    def closed() -> asyncio.Future[dict[str, Any]]:
        raise RuntimeError("protocol closed")

    watch = DisconnectWatch(closed, lambda: None)
    assert watch.ended
    watch.stop()


async def test_a_coroutine_receive_is_watched_by_a_task() -> None:
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    left = asyncio.Event()
    watch = DisconnectWatch(messages.get, left.set)
    messages.put_nowait({"type": "http.request", "body": b"", "more_body": False})
    messages.put_nowait({"type": "http.disconnect"})
    await left.wait()
    assert watch.ended
