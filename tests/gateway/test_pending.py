"""Pending slots and transport waiters: bounded, oldest evicted first, nothing left behind."""
from __future__ import annotations

import asyncio
import sys

import pytest

from cursor_byok.gateway.pending import Pending
from cursor_byok.gateway.transport import WAITERS_PER_REQUEST, Route, Transports, Waiter
from cursor_byok.protocol import ConnectError


def scope(port: int) -> dict[str, object]:
    return {"client": ("127.0.0.1", port)}


def timed_out() -> ConnectError:
    return ConnectError("deadline_exceeded", "waited too long")


async def hold(pending: Pending, port: int, seconds: float = 10.0) -> None:
    with pending.slot(scope(port), seconds, timed_out):
        await asyncio.sleep(seconds * 2)


async def test_a_slot_times_out_with_its_own_error_and_is_released() -> None:
    pending = Pending(max_total=4, per_connection=4)
    with pytest.raises(ConnectError) as caught:
        await hold(pending, 1, seconds=0.01)
    assert caught.value.code == "deadline_exceeded"
    assert len(pending) == 0


async def test_the_oldest_is_evicted_when_full_and_a_new_one_gets_in() -> None:
    pending = Pending(max_total=3, per_connection=10)
    tasks = [asyncio.create_task(hold(pending, port)) for port in range(3)]
    await asyncio.sleep(0)
    newest = asyncio.create_task(hold(pending, 99, seconds=0.05))
    with pytest.raises(ConnectError) as caught:
        await tasks[0]
    assert caught.value.code == "resource_exhausted"
    assert not tasks[1].done() and not tasks[2].done()
    with pytest.raises(ConnectError):
        await newest  # its own deadline, not an eviction
    for t in tasks[1:]:
        t.cancel()
    await asyncio.gather(*tasks[1:], return_exceptions=True)
    assert len(pending) == 0 and pending.evictions == 1


async def test_one_connection_holds_at_most_its_share() -> None:
    pending = Pending(max_total=100, per_connection=2)
    tasks = [asyncio.create_task(hold(pending, 1)) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(ConnectError) as caught:
        await hold(pending, 1)
    assert caught.value.code == "resource_exhausted"
    other = asyncio.create_task(hold(pending, 2))
    await asyncio.sleep(0)
    assert not other.done()
    for t in (*tasks, other):
        t.cancel()
    await asyncio.gather(*tasks, other, return_exceptions=True)
    assert len(pending) == 0


async def test_an_unrelated_timeout_inside_a_slot_is_not_taken_for_ours() -> None:
    pending = Pending(max_total=4, per_connection=4)
    with pytest.raises(TimeoutError):
        with pending.slot(scope(1), 10.0, timed_out):
            async with asyncio.timeout(0.01):
                await asyncio.sleep(1)
    assert len(pending) == 0


async def test_a_body_is_read_in_a_slot_without_an_async_generator() -> None:
    """Every request's body is read in a slot: holding one must not start an async generator
    (each is registered with the loop and finalized: the cost of a context manager made of one)."""
    pending = Pending(max_total=4, per_connection=4)
    messages = iter([{"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.request", "body": b"c"}])

    async def receive() -> dict[str, object]:
        await asyncio.sleep(0)  # a body arrives in a later pass of the loop, as from the server
        return next(messages)

    started: list[object] = []
    hooks = sys.get_asyncgen_hooks()
    sys.set_asyncgen_hooks(firstiter=started.append, finalizer=hooks.finalizer)
    try:
        body = await pending.read_body(scope(1), receive, 1024, 10.0)
    finally:
        sys.set_asyncgen_hooks(*hooks)
    assert body == b"abc" and started == [] and len(pending) == 0


async def test_each_slot_ends_at_its_own_deadline_whatever_was_held_before_it() -> None:
    """Deadlines kept by the registry: a shorter wait entered after a longer one still ends first,
    and the longer one at its own time."""
    pending = Pending(max_total=8, per_connection=8)
    loop = asyncio.get_running_loop()
    started = loop.time()
    long_wait = asyncio.create_task(hold(pending, 1, seconds=0.3))
    await asyncio.sleep(0)
    with pytest.raises(ConnectError) as caught:
        await hold(pending, 2, seconds=0.02)
    assert caught.value.code == "deadline_exceeded" and loop.time() - started < 0.3
    assert not long_wait.done()
    with pytest.raises(ConnectError):
        await long_wait
    assert loop.time() - started >= 0.29 and len(pending) == 0


async def test_a_cancellation_from_outside_is_not_taken_for_the_deadline() -> None:
    pending = Pending(max_total=4, per_connection=4)
    waiting = asyncio.create_task(hold(pending, 1, seconds=10.0))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert len(pending) == 0


async def test_slots_left_in_quick_succession_leave_nothing_behind() -> None:
    pending = Pending(max_total=4, per_connection=4)
    for _ in range(5000):
        with pending.slot(scope(1), 30.0, timed_out):
            pass
    assert len(pending) == 0
    assert len(pending._deadlines) <= 64 + 2  # the deadlines of slots long left are dropped as it goes


async def test_waiters_get_the_transport_and_leave_nothing_when_it_never_comes() -> None:
    transports = Transports(max_transports=8, idle_seconds=60)
    waiter = asyncio.create_task(transports.wait_for("r1", Waiter.APPEND))
    await asyncio.sleep(0)
    created = transports.create("r1", Route.LOCAL)
    assert await waiter is created
    lonely = asyncio.create_task(transports.wait_for("nobody", Waiter.RUN_SSE))
    await asyncio.sleep(0)
    assert transports.waiting == 1
    lonely.cancel()
    await asyncio.gather(lonely, return_exceptions=True)
    assert transports.waiting == 0


async def test_waiters_per_request_id_are_capped_oldest_first() -> None:
    transports = Transports(max_transports=8, idle_seconds=60)
    cap = WAITERS_PER_REQUEST[Waiter.RUN_SSE]
    waiters = [asyncio.create_task(transports.wait_for("r", Waiter.RUN_SSE)) for _ in range(cap + 1)]
    await asyncio.sleep(0)
    with pytest.raises(ConnectError) as caught:
        await waiters[0]
    assert caught.value.code == "resource_exhausted"
    t = transports.create("r", Route.UPSTREAM)
    assert all([await w for w in waiters[1:]]) and all(w.result() is t for w in waiters[1:])
    assert transports.waiting == 0


def test_at_the_limit_the_least_recently_seen_transport_gives_way() -> None:
    transports = Transports(max_transports=2, idle_seconds=60)
    transports.create("a", Route.LOCAL)
    transports.create("b", Route.LOCAL)
    transports.get("a")  # a is fresher than b now
    transports.create("c", Route.LOCAL)
    assert transports.get("b") is None and transports.get("a") is not None and transports.get("c") is not None


async def test_a_body_whose_declared_length_has_arrived_is_not_waited_on_for_its_end() -> None:
    """The server hands a body's bytes with more_body set and its end as a later, empty message:
    once the content-length's bytes are in, that second wait (a pass of the loop per request) is
    skipped. Without a length, or short of it, the body is read to its end as before."""
    pending = Pending(max_total=4, per_connection=4)

    def script(*messages: dict[str, object]) -> tuple[list[int], object]:
        calls: list[int] = []
        queue = list(messages)

        async def receive() -> dict[str, object]:
            calls.append(1)
            await asyncio.sleep(0)
            return queue.pop(0)

        return calls, receive

    whole = ({"type": "http.request", "body": b"abc", "more_body": True}, {"type": "http.request", "body": b"", "more_body": False})
    calls, receive = script(*whole)
    assert await pending.read_body(scope(1), receive, 1024, 10.0, expected=3) == b"abc"
    assert len(calls) == 1 and len(pending) == 0
    calls, receive = script(*whole)
    assert await pending.read_body(scope(1), receive, 1024, 10.0) == b"abc"
    assert len(calls) == 2
    calls, receive = script({"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.request", "body": b"c", "more_body": False})
    assert await pending.read_body(scope(1), receive, 1024, 10.0, expected=3) == b"abc"
    assert len(calls) == 2
    calls, receive = script({"type": "http.request", "body": b"abcd", "more_body": True})
    with pytest.raises(ConnectError) as caught:
        await pending.read_body(scope(1), receive, 3, 10.0, expected=4)
    assert caught.value.code == "resource_exhausted"


async def test_bodies_being_read_are_bounded_in_bytes_the_oldest_dropped() -> None:
    pending = Pending(max_total=100, per_connection=10, max_body_bytes=10)
    stalls: list[asyncio.Event] = []

    def stalled_after(chunk: bytes):  # one chunk of a longer body, then nothing more arrives
        stall = asyncio.Event()
        stalls.append(stall)
        sent = [False]

        async def receive() -> dict[str, object]:
            if not sent[0]:
                sent[0] = True
                return {"type": "http.request", "body": chunk, "more_body": True}
            await stall.wait()
            return {"type": "http.disconnect"}

        return receive

    first = asyncio.create_task(pending.read_body(scope(1), stalled_after(b"x" * 6), 100, 10.0))
    second = asyncio.create_task(pending.read_body(scope(2), stalled_after(b"y" * 3), 100, 10.0))
    while pending.body_bytes < 9:
        await asyncio.sleep(0)
    third = asyncio.create_task(pending.read_body(scope(3), stalled_after(b"z" * 4), 100, 10.0))
    with pytest.raises(ConnectError) as caught:
        await first
    assert caught.value.code == "resource_exhausted" and pending.body_bytes == 7
    with pytest.raises(ConnectError) as caught:  # alone over the budget: refused itself
        await pending.read_body(scope(4), stalled_after(b"w" * 11), 100, 10.0)
    assert caught.value.code == "resource_exhausted"
    assert not second.done() and not third.done() and pending.body_bytes == 7
    for stall in stalls:
        stall.set()
    await asyncio.gather(second, third, return_exceptions=True)
    assert len(pending) == 0 and pending.body_bytes == 0
