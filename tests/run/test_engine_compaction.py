"""Automatic compaction at 90% of the context window, and compact-and-retry on overflow errors."""
from __future__ import annotations

import asyncio

import pytest

from cursor_byok.prompting import compaction_prompt
from cursor_byok.run import (
    CompactionFinished,
    CompactionStarted,
    ContextLengthError,
    Message,
    ModelCycleFinished,
    RetryPolicy,
    RunEngine,
    RunSpec,
    TextPart,
    ToolOutcome,
    ToolSchema,
    make_provider,
)
from tests.fakes import ANTHROPIC, DIALECTS, CallSpec, Dialect, UsageSpec, fake_model
from tests.run.support import MemoryHistory, RecordingSink, ScriptedTools, user

dialects = pytest.mark.parametrize("dialect", list(DIALECTS.values()), ids=lambda d: d.kind.value)

READ = ToolSchema("Read", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})
WINDOW = 10_000  # threshold 9,000 tokens


def setup(dialect: Dialect, server, client):
    model = fake_model(dialect.kind, server.url, context_window=WINDOW, max_output_tokens=2000)
    engine = RunEngine(make_provider(model, "test-key-123456", client, retry=RetryPolicy(max_retries=0)))
    return engine, RunSpec(model=model, system="test", tools=[READ])


def big_result(chars: int):
    async def handler(calls):
        return [ToolOutcome(c.call_id, c.name, "x" * chars) for c in calls]
    return ScriptedTools(handler)


@dialects
async def test_compaction_at_ninety_percent_uses_a_toolless_summary(dialect: Dialect, fake_server, http_client) -> None:
    # Cycle 1 reports 8,000 input tokens; its tool result adds ~1,500 more (6,000 chars / 4):
    # 9,500 >= 9,000, so the engine compacts before cycle 2.
    fake_server.enqueue(
        dialect.tool_calls([CallSpec("c1", "Read", ['{"path": "big.log"}'])], usage=UsageSpec(input=8000, output=10)),
        dialect.text(["## Goal\n", "read the log"], usage=UsageSpec(input=3000, output=50)),
        dialect.text(["Done."], usage=UsageSpec(input=400, output=5)),
    )
    engine, spec = setup(dialect, fake_server, http_client)
    history, sink = MemoryHistory(user("summarize big.log")), RecordingSink()

    result = await engine.run(spec, history, big_result(6000), sink)

    assert result.stop_reason == "end_turn" and result.cycles == 2
    started, = sink.of(CompactionStarted)
    assert started.reason == "threshold" and started.estimated_tokens >= 9000
    assert sink.of(CompactionFinished) == [CompactionFinished("## Goal\nread the log")]
    assert history.summaries == ["## Goal\nread the log"]

    main1, summary, main2 = fake_server.requests
    body = summary.json()
    assert "tools" not in body  # the summary call offers no tools
    conversation = [m for m in body[dialect.messages_key] if m.get("role") != "system"]
    assert len(conversation) == 1 and conversation[0]["role"] == "user"  # one message, ending with the user
    assert compaction_prompt().instruction[:40] in summary.body.decode()
    assert "summarize big.log" in summary.body.decode()
    assert compaction_prompt().system[:40] in summary.body.decode()
    # Cycle 2 runs on the compacted history.
    assert "Summary of the conversation so far" in main2.body.decode()
    assert "xxxxxxxxxx" not in main2.body.decode()
    assert result.usage_total.output_tokens == 10 + 50 + 5  # the summary call is billed too


async def test_no_compaction_below_the_threshold(fake_server, http_client) -> None:
    dialect = ANTHROPIC
    fake_server.enqueue(
        dialect.tool_calls([CallSpec("c1", "Read", ['{"path": "a"}'])], usage=UsageSpec(input=7000)),
        dialect.text(["ok"]),
    )
    engine, spec = setup(dialect, fake_server, http_client)
    sink = RecordingSink()
    await engine.run(spec, MemoryHistory(user("go")), big_result(4000), sink)  # ~8,000 < 9,000
    assert sink.of(CompactionStarted) == []
    assert len(fake_server.requests) == 2


@dialects
async def test_context_length_error_compacts_once_and_retries(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(dialect.context_length(), dialect.text(["short summary"]), dialect.text(["answer"]))
    engine, spec = setup(dialect, fake_server, http_client)
    history = MemoryHistory(user("old stuff"), Message("assistant", [TextPart("old reply")]), user("now"))
    sink = RecordingSink()

    result = await engine.run(spec, history, ScriptedTools(), sink)

    assert result.stop_reason == "end_turn"
    assert [e.reason for e in sink.of(CompactionStarted)] == ["context_length"]
    assert [e.stop_reason for e in sink.of(ModelCycleFinished)] == ["context_length", "end_turn"]
    assert history.summaries == ["short summary"]
    assert "tools" not in fake_server.requests[1].json()
    assert history.items[-1] == Message("assistant", [TextPart("answer")])


async def test_a_second_context_length_error_propagates(fake_server, http_client) -> None:
    dialect = ANTHROPIC
    fake_server.enqueue(dialect.context_length(), dialect.text(["summary"]), dialect.context_length())
    engine, spec = setup(dialect, fake_server, http_client)
    with pytest.raises(ContextLengthError):
        await engine.run(spec, MemoryHistory(user("go")), ScriptedTools(), RecordingSink())
    assert len(fake_server.requests) == 3


async def test_summary_overflow_falls_back_to_the_transcript_tail(fake_server, http_client) -> None:
    dialect = ANTHROPIC
    fake_server.enqueue(dialect.context_length(), dialect.context_length(), dialect.text(["answer"]))
    engine, spec = setup(dialect, fake_server, http_client)
    history = MemoryHistory(user("remember the word PELICAN"), Message("assistant", [TextPart("noted")]), user("now"))
    await engine.run(spec, history, ScriptedTools(), RecordingSink())
    summary, = history.summaries
    assert "could not be summarized" in summary and "PELICAN" in summary


async def test_interrupt_during_compaction_leaves_history_unchanged(fake_server, http_client) -> None:
    dialect = ANTHROPIC
    summary_reply = dialect.text(["Sum", "mary"])
    summary_reply.stall_after = 2  # message_start and a ping, then silence
    fake_server.enqueue(dialect.context_length(), summary_reply, dialect.text(["answer"]))
    engine, spec = setup(dialect, fake_server, http_client)
    history = MemoryHistory(user("go"))

    async def interrupt_once_the_summary_call_streams() -> None:
        await asyncio.to_thread(fake_server.wait_for_requests, 2)
        history.queue.append(user("never mind"))
        engine.interrupt()

    helpers = []
    sink = RecordingSink(lambda e: helpers.append(asyncio.create_task(interrupt_once_the_summary_call_streams()))
                         if isinstance(e, CompactionStarted) else None)
    result = await engine.run(spec, history, ScriptedTools(), sink)
    await asyncio.gather(*helpers)
    assert fake_server.requests[1].disconnected.wait(5)
    assert sink.of(CompactionFinished) == [CompactionFinished("", applied=False)]
    assert history.summaries == []
    assert [m.role for m in history.items] == ["user", "user", "assistant"]
    assert result.stop_reason == "end_turn"
