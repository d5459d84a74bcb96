"""A run's first model request is built at once but leaves only once its input is committed; the
calls after it still end in their own time bounds (a stalled later cycle: an idle timeout)."""
from __future__ import annotations

import asyncio
import dataclasses

import pytest

from cursor_byok.http_client import ProviderHttp
from cursor_byok.run import IdleTimeoutError, RetryPolicy, RunEngine, RunSpec, ToolSchema, make_provider, start_now
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


class SeenPosting:
    """A provider client that notes, as each request is handed to it, which task sends it."""

    def __init__(self, client: ProviderHttp) -> None:
        self._client = client
        self.senders: list[asyncio.Task[object] | None] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)

    async def post(self, *args: object, **kwargs: object) -> object:
        self.senders.append(asyncio.current_task())
        return await self._client.post(*args, **kwargs)  # type: ignore[arg-type]


def posting_run(fake_server, http_client: ProviderHttp, history: CommittingHistory) -> tuple[asyncio.Future[object], SeenPosting]:
    """A run started in this step (as the runtime starts one) on a client that notes its senders."""
    fake_server.enqueue(OPENAI_CHAT.text(["hello"]))
    model = fake_model(OPENAI_CHAT.kind, fake_server.url)
    client = SeenPosting(http_client)
    engine = RunEngine(make_provider(model, "test-key-123456", client, retry=RetryPolicy(max_retries=0)))  # type: ignore[arg-type]
    return start_now(engine.run(RunSpec(model=model, system="s", tools=[]), history, ScriptedTools(), RecordingSink())), client


async def test_with_its_input_committed_the_request_leaves_in_the_step_that_starts_the_run(fake_server, http_client) -> None:
    """No pass of the loop between a run's start and its request (each pass is every other
    stream's work), and the request is sent from a task of its own (its time bounds act on it)."""
    history = CommittingHistory(user("hi"))
    history.commit.set_result(None)
    run, client = posting_run(fake_server, http_client, history)
    assert len(client.senders) == 1
    sender = client.senders[0]
    assert sender is not None and sender is not asyncio.current_task() and not sender.done()
    await asyncio.wait_for(run, 10)
    assert len(fake_server.requests) == 1


async def test_the_request_leaves_in_the_pass_that_learns_the_commit(fake_server, http_client) -> None:
    """Not a pass later for each future in between (a shield's, then its task's wake-up)."""
    history = CommittingHistory(user("hi"))
    run, client = posting_run(fake_server, http_client, history)
    assert client.senders == []
    history.commit.set_result(None)  # its callbacks run in the next pass of the loop, before this test's
    await asyncio.sleep(0)
    assert len(client.senders) == 1 and client.senders[0] is not asyncio.current_task()
    await asyncio.wait_for(run, 10)
