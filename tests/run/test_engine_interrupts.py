"""Soft interrupts (within a stream, within a tool batch) and hard cancellation."""
from __future__ import annotations

import asyncio

import pytest

from cursor_byok.run import (
    INTERRUPTED_RESULT,
    Interrupted,
    Message,
    ModelCycleFinished,
    RetryPolicy,
    RunEngine,
    RunSpec,
    TextDelta,
    TextPart,
    ToolCallArgsDelta,
    ToolOutcome,
    ToolSchema,
    make_provider,
)
from tests.fakes import ANTHROPIC, DIALECTS, CallSpec, Dialect, fake_model
from tests.run.support import MemoryHistory, RecordingSink, ScriptedTools, user

dialects = pytest.mark.parametrize("dialect", list(DIALECTS.values()), ids=lambda d: d.kind.value)

READ = ToolSchema("Read", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})


def setup(dialect: Dialect, server, client):
    model = fake_model(dialect.kind, server.url)
    engine = RunEngine(make_provider(model, "test-key-123456", client, retry=RetryPolicy(max_retries=0)))
    return engine, RunSpec(model=model, system="test", tools=[READ])


def stall_after_first(reply, marker: bytes):
    """Stall the stream right after the first chunk containing `marker`."""
    reply.stall_after = next(i for i, c in enumerate(reply.chunks) if marker in c) + 1
    return reply


@dialects
async def test_interrupt_within_a_stream_keeps_text_and_continues(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(stall_after_first(dialect.text(["Partial ", "never sent"]), b"Partial"),
                        dialect.text(["Fresh answer."]))
    engine, spec = setup(dialect, fake_server, http_client)
    history = MemoryHistory(user("first question"))

    def on_event(event) -> None:
        if isinstance(event, TextDelta) and event.text == "Partial ":
            history.queue.append(user("actually, something else"))
            engine.interrupt()

    sink = RecordingSink(on_event)
    result = await engine.run(spec, history, ScriptedTools(), sink)

    assert result.stop_reason == "end_turn" and result.cycles == 2
    assert history.items == [
        user("first question"),
        Message("assistant", [TextPart("Partial ")]),
        user("actually, something else"),
        Message("assistant", [TextPart("Fresh answer.")]),
    ]
    assert [e.stop_reason for e in sink.of(ModelCycleFinished)] == ["interrupted", "end_turn"]
    assert fake_server.requests[0].disconnected.wait(5)  # the interrupted stream was closed
    second = fake_server.requests[1].json()[dialect.messages_key]
    assert "actually, something else" in str(second[-1])


@dialects
async def test_interrupt_drops_a_partial_tool_call(dialect: Dialect, fake_server, http_client) -> None:
    reply = dialect.tool_calls([CallSpec("call_a", "Read", ['{"path": ', '"a.py"}'])], pieces=["Let me look."])
    fake_server.enqueue(stall_after_first(reply, b'{\\"path\\": '), dialect.text(["ok"]))
    engine, spec = setup(dialect, fake_server, http_client)
    history, tools = MemoryHistory(user("go")), ScriptedTools()

    def on_event(event) -> None:
        if isinstance(event, ToolCallArgsDelta):
            history.queue.append(user("stop that"))
            engine.interrupt()

    await engine.run(spec, history, tools, RecordingSink(on_event))
    assert tools.batches == []
    assert history.items[1] == Message("assistant", [TextPart("Let me look.")])
    assert history.items[2] == user("stop that")


async def test_interrupt_without_a_queued_message_ends_the_run(fake_server, http_client) -> None:
    dialect = ANTHROPIC
    fake_server.enqueue(stall_after_first(dialect.text(["Half", "rest"]), b"Half"))
    engine, spec = setup(dialect, fake_server, http_client)
    history = MemoryHistory(user("go"))
    sink = RecordingSink(lambda e: engine.interrupt() if isinstance(e, TextDelta) else None)
    result = await engine.run(spec, history, ScriptedTools(), sink)
    assert result.stop_reason == "interrupted" and result.cycles == 1
    assert history.items[-1] == Message("assistant", [TextPart("Half")])
    assert len(fake_server.requests) == 1


@dialects
async def test_interrupt_within_a_tool_batch(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(
        dialect.tool_calls([CallSpec("call_a", "Read", ['{"path": "a"}']),
                            CallSpec("call_b", "Read", ['{"path": "b"}'])]),
        dialect.text(["Switching."]),
    )
    engine, spec = setup(dialect, fake_server, http_client)
    history = MemoryHistory(user("go"))

    async def handler(calls):
        # call_a finished; then the user sent a message and the runtime aborted the rest.
        history.queue.append(user("new instructions"))
        engine.interrupt()
        raise Interrupted([ToolOutcome("call_a", "Read", "contents of a")])

    result = await engine.run(spec, history, ScriptedTools(handler), RecordingSink())
    assert result.stop_reason == "end_turn"
    results = history.items[2].parts
    assert [(r.call_id, r.content, r.is_error) for r in results] == [
        ("call_a", "contents of a", False), ("call_b", INTERRUPTED_RESULT, True)]
    assert history.items[3] == user("new instructions")
    assert history.items[4] == Message("assistant", [TextPart("Switching.")])


async def test_injection_queued_as_the_model_finishes_continues_the_run(fake_server, http_client) -> None:
    dialect = ANTHROPIC
    fake_server.enqueue(dialect.text(["first"]), dialect.text(["second"]))
    engine, spec = setup(dialect, fake_server, http_client)
    history = MemoryHistory(user("go"))
    queued = []

    def on_event(event) -> None:
        if isinstance(event, ModelCycleFinished) and not queued:
            queued.append(True)
            history.queue.append(user("one more thing"))

    result = await engine.run(spec, history, ScriptedTools(), RecordingSink(on_event))
    assert result.cycles == 2
    assert [m.role for m in history.items] == ["user", "assistant", "user", "assistant"]


@dialects
async def test_hard_cancel_closes_the_stream_and_commits_nothing(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(stall_after_first(dialect.text(["Some ", "more"]), b"Some"))
    engine, spec = setup(dialect, fake_server, http_client)
    history = MemoryHistory(user("go"))
    started = asyncio.Event()
    sink = RecordingSink(lambda e: started.set() if isinstance(e, TextDelta) else None)

    task = asyncio.create_task(engine.run(spec, history, ScriptedTools(), sink))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert history.log == []
    assert fake_server.requests[0].disconnected.wait(5)


async def test_hard_cancel_during_tools_cancels_the_batch(fake_server, http_client) -> None:
    dialect = ANTHROPIC
    fake_server.enqueue(dialect.tool_calls([CallSpec("call_a", "Read", ['{"path": "a"}'])]))
    engine, spec = setup(dialect, fake_server, http_client)
    history = MemoryHistory(user("go"))
    entered = asyncio.Event()

    async def handler(calls):
        entered.set()
        await asyncio.sleep(60)
        return []

    tools = ScriptedTools(handler)
    task = asyncio.create_task(engine.run(spec, history, tools, RecordingSink()))
    await asyncio.wait_for(entered.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tools.cancelled.is_set()
    assert [kind for kind, _ in history.log] == ["assistant"]  # the complete response; no tool results


async def test_engine_is_reusable_after_an_interrupted_run(fake_server, http_client) -> None:
    dialect = ANTHROPIC
    fake_server.enqueue(stall_after_first(dialect.text(["Half", "rest"]), b"Half"), dialect.text(["whole"]))
    engine, spec = setup(dialect, fake_server, http_client)
    history = MemoryHistory(user("go"))
    sink = RecordingSink(lambda e: engine.interrupt() if isinstance(e, TextDelta) else None)
    assert (await engine.run(spec, history, ScriptedTools(), sink)).stop_reason == "interrupted"
    history.items.append(user("again"))
    result = await engine.run(spec, history, ScriptedTools(), RecordingSink())
    assert result.stop_reason == "end_turn"
    assert history.items[-1] == Message("assistant", [TextPart("whole")])
