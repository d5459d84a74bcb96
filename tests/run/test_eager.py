"""start_now: a coroutine runs to its first wait in the caller's step, then on as a task; start_task: the same
step as a task of its own, now or in the pass that learns what it waits for first."""
from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from cursor_byok.run import eager, start_now, start_task


async def test_a_coroutine_that_never_waits_is_done_at_once_without_a_task() -> None:
    ran: list[str] = []

    async def work() -> int:
        ran.append("ran")
        return 7

    before = len(asyncio.all_tasks())
    future = start_now(work())
    assert ran == ["ran"] and future.done() and future.result() == 7
    assert len(asyncio.all_tasks()) == before


async def test_its_error_is_the_futures() -> None:
    async def work() -> None:
        raise ValueError("bad input")

    future = start_now(work())
    assert future.done()
    with pytest.raises(ValueError, match="bad input"):
        future.result()


async def test_it_runs_up_to_its_first_wait_now_and_carries_on_in_a_task() -> None:
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def work() -> str:
        steps.append("before the wait")
        value = await gate
        steps.append(f"after: {value}")
        await asyncio.sleep(0)  # a bare yield to the loop as well
        return value.upper()

    task = start_now(work())
    assert steps == ["before the wait"] and not task.done()
    gate.set_result("opened")
    assert await task == "OPENED"
    assert steps == ["before the wait", "after: opened"]


@pytest.mark.parametrize("start", [start_now, start_task])
async def test_cancelling_the_task_reaches_the_coroutine_where_it_waits(start: Callable[[Coroutine[Any, Any, None]], asyncio.Future[None]]) -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def work() -> None:
        try:
            await gate
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        finally:
            seen.append("cleaned up")

    task = start(work())
    task.cancel()  # before the task took its first step
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled", "cleaned up"]

    gate = asyncio.get_running_loop().create_future()
    seen.clear()
    task = start(work())
    await asyncio.sleep(0)  # the task waits on the gate now
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled", "cleaned up"] and gate.cancelled()


async def test_cancelled_before_its_first_step_what_it_waits_on_is_cancelled_too() -> None:
    """As with any task: an inner task it awaits (a provider call) is cancelled with it, and so
    never runs, rather than going on alone after the outer one ended."""
    ran: list[str] = []

    async def inner() -> None:
        ran.append("inner ran")

    async def work() -> None:
        await asyncio.ensure_future(inner())

    task = start_now(work())
    task.cancel()  # before the task took its first step
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(3):
        await asyncio.sleep(0)
    assert ran == []


async def test_a_coroutine_may_handle_its_cancellation_and_go_on() -> None:
    first: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def work() -> str:
        try:
            await first
        except asyncio.CancelledError:
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
        await asyncio.sleep(0)
        return "went on"

    task = start_now(work())
    task.cancel()
    assert await task == "went on"


async def test_an_error_after_the_first_wait_fails_the_task() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def work() -> None:
        await gate
        raise RuntimeError("late failure")

    task = start_now(work())
    gate.set_result(None)
    with pytest.raises(RuntimeError, match="late failure"):
        await task


async def test_start_task_runs_the_first_step_now_as_the_task_itself() -> None:
    """Time bounds entered in that step (a provider call's) act on the new task, not the caller's."""
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    seen: list[object] = []

    async def work() -> str:
        seen.append(asyncio.current_task())
        return await gate

    me = asyncio.current_task()
    task = start_task(work())
    assert seen == [task] and asyncio.current_task() is me
    gate.set_result("done")
    assert await task == "done"


async def test_start_task_after_a_pending_future_runs_in_the_pass_that_learns_it() -> None:
    after: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def work() -> str:
        steps.append("first step")
        await asyncio.sleep(0)
        return "went on"

    task = start_task(work(), after)
    await asyncio.sleep(0)  # the task's own first pass: it waits for the coroutine's first step
    assert steps == [] and not task.done()
    after.set_result(None)  # its callbacks run in the next pass, ahead of this test's step
    await asyncio.sleep(0)
    assert steps == ["first step"]
    assert await task == "went on"


async def test_start_task_cancelled_before_its_first_step_never_runs_it() -> None:
    after: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ran: list[str] = []

    async def work() -> None:
        ran.append("ran")

    task = start_task(work(), after)
    task.cancel()  # before the task's own first pass
    after.set_result(None)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == []

    after = asyncio.get_running_loop().create_future()
    task = start_task(work(), after)
    await asyncio.sleep(0)  # the task waits for the first step now
    after.set_result(None)  # the first step is due ahead of the task's wake-up ...
    task.cancel()  # ... that this cancel schedules
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == [] and not after.cancelled()  # the shared future is left alone


async def test_start_task_of_a_coroutine_that_never_waits_ends_with_its_result_or_error() -> None:
    async def value() -> int:
        return 7

    async def failure() -> None:
        raise ValueError("bad")

    assert await start_task(value()) == 7
    with pytest.raises(ValueError, match="bad"):
        await start_task(failure())


LOG_ID: contextvars.ContextVar[str] = contextvars.ContextVar("LOG_ID", default="caller's")


async def test_the_first_step_runs_in_the_tasks_own_context() -> None:
    async def work() -> str:
        LOG_ID.set("the task's")
        await asyncio.sleep(0)
        return LOG_ID.get()

    task = start_task(work())
    assert LOG_ID.get() == "caller's"
    assert await task == "the task's"


@pytest.mark.parametrize("start", [start_now, start_task])
async def test_once_under_way_its_steps_run_no_code_of_ours(start: Callable[[Coroutine[Any, Any, int]], asyncio.Future[int]]) -> None:
    """A provider call's task takes a step per streamed delta: past its first wait the task drives
    the coroutine itself, with no frame of this module in between."""
    loop = asyncio.get_running_loop()
    gates = [loop.create_future() for _ in range(20)]

    async def work() -> int:
        for gate in gates:
            await gate
        return len(gates)

    task = start(work())
    gates[0].set_result(None)
    await asyncio.sleep(0)  # the task's first step takes the handoff
    ours: list[str] = []

    def watch(frame: Any, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename == eager.__file__:
            ours.append(frame.f_code.co_name)

    sys.setprofile(watch)
    try:
        for gate in gates[1:]:
            gate.set_result(None)
            await asyncio.sleep(0)
    finally:
        sys.setprofile(None)
    assert await task == len(gates)
    assert ours == []
