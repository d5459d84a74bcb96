"""Supervised background tasks: a failure is logged once with the task's name and the task runs
again; stopping ends every task and raises nothing."""
from __future__ import annotations

import asyncio
import logging

import pytest

from cursor_byok.supervision import Supervisor


async def test_a_failed_task_is_logged_once_by_name_and_started_again(caplog: pytest.LogCaptureFixture) -> None:
    supervisor = Supervisor(first_backoff=0)
    runs = 0
    again = asyncio.Event()

    async def work() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise LookupError("broken on its first run")
        again.set()
        await asyncio.Event().wait()  # runs on until stopped

    with caplog.at_level(logging.ERROR, logger="cursor_byok.supervision"):
        supervisor.start("keeper", work)
        await asyncio.wait_for(again.wait(), 5)
        await supervisor.stop()
    [record] = caplog.records
    assert "keeper" in record.getMessage() and "LookupError" in record.getMessage()
    assert record.exc_info is not None
    assert supervisor.failures == {"keeper": 1} and runs == 2


async def test_stop_raises_nothing_a_task_did_and_ends_every_task() -> None:
    supervisor = Supervisor(first_backoff=3600)  # a failed task waits for its restart when stopped
    failed = asyncio.Event()
    other_cancelled = asyncio.Event()

    async def failing() -> None:
        failed.set()
        raise RuntimeError("gone")

    async def long_running() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            other_cancelled.set()
            raise

    supervisor.start("failing", failing)
    supervisor.start("long", long_running)
    await asyncio.wait_for(failed.wait(), 5)
    await supervisor.stop()
    assert other_cancelled.is_set()


async def test_a_name_is_supervised_once() -> None:
    supervisor = Supervisor()
    supervisor.start("one", asyncio.Event().wait)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one"):
        supervisor.start("one", asyncio.Event().wait)  # type: ignore[arg-type]
    await supervisor.stop()
