"""A run's first model request is built at once but leaves only once its input is committed; the
calls after it still end in their own time bounds (a stalled later cycle: an idle timeout)."""
from __future__ import annotations

import asyncio
import dataclasses

import pytest

from cursor_byok.run import IdleTimeoutError, RetryPolicy, RunEngine, RunSpec, ToolSchema, make_provider
from tests.fakes import OPENAI_CHAT, CallSpec, fake_model
from tests.run.support import MemoryHistory, RecordingSink, ScriptedTools, user

READ = ToolSchema("Read", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})


class CommittingHistory(MemoryHistory):
    """The first request waits for its turn's input to be committed, as the runtime's does."""

    def __init__(self, *initial: object) -> None:
        super().__init__(*initial)  # type: ignore[arg-type]
        self.commit: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending: asyncio.Future[None] | None = self.commit

    def stored(self) -> asyncio.Future[None] | None:  # type: ignore[override]
        stored, self._pending = self._pending, None
        return stored


async def test_the_first_request_waits_for_the_commit_and_a_later_stall_times_out(fake_server, http_client) -> None:
    fake_server.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec("call_a", "Read", ['{"path": "a.py"}'])]),
        dataclasses.replace(OPENAI_CHAT.text(["never sent"]), stall_after=0),  # headers, then nothing
    )
    model = fake_model(OPENAI_CHAT.kind, fake_server.url, idle_timeout_seconds=0.5, request_timeout_seconds=0.5)
    engine = RunEngine(make_provider(model, "test-key-123456", http_client, retry=RetryPolicy(max_retries=0)))
    history = CommittingHistory(user("read a"))
    run = asyncio.ensure_future(engine.run(RunSpec(model=model, system="s", tools=[READ]), history, ScriptedTools(), RecordingSink()))
    await asyncio.sleep(0.3)  # time enough for a request that did not wait to arrive
    assert fake_server.requests == [] and not run.done()
    history.commit.set_result(None)
    with pytest.raises(IdleTimeoutError):
        await asyncio.wait_for(run, 10)
    assert len(fake_server.requests) == 2
