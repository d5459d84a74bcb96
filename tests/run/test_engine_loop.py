"""The model loop against real adapters and a local server streaming each provider's format."""
from __future__ import annotations

import pytest

from cursor_byok.http_client import ProviderHttp
from cursor_byok.run import (
    AuthError,
    Message,
    ModelCycleFinished,
    ModelCycleStarted,
    RetryPolicy,
    RunEngine,
    RunSpec,
    StreamCutError,
    TextPart,
    ThinkingPart,
    ToolBatchFinished,
    ToolBatchStarted,
    ToolCallPart,
    ToolCallStart,
    ToolResultPart,
    ToolSchema,
    INTERRUPTED_RESULT,
    ToolOutcome,
    batch_outcomes,
    make_provider,
    tool_call_request,
    tool_results_message,
)
from cursor_byok.run.cycle import NO_RESULT
from tests.fakes import DIALECTS, OPENAI_CHAT, CallSpec, Dialect, FakeProviderServer, UsageSpec, fake_model
from tests.fakes.anthropic import SIGNATURE
from tests.fakes.openai_responses import ENCRYPTED
from tests.run.support import MemoryHistory, RecordingSink, ScriptedTools, user

dialects = pytest.mark.parametrize("dialect", list(DIALECTS.values()), ids=lambda d: d.kind.value)

READ = ToolSchema("Read", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}},
                                             "required": ["path"]})


def setup(dialect: Dialect, server: FakeProviderServer, client: ProviderHttp, **model_kw):
    model = fake_model(dialect.kind, server.url, **model_kw)
    provider = make_provider(model, "test-key-123456", client, retry=RetryPolicy(max_retries=0))
    spec = RunSpec(model=model, system="You are a test agent.", tools=[READ])
    return RunEngine(provider), spec


@dialects
async def test_tool_loop_runs_until_the_model_stops(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(
        dialect.tool_calls([CallSpec("call_a", "Read", ['{"path": ', '"a.py"}']),
                            CallSpec("call_b", "Read", ['{"path": "b.py"}'])],
                           pieces=["Reading."], usage=UsageSpec(input=100, output=10)),
        dialect.text(["All ", "done."], usage=UsageSpec(input=200, output=5)),
    )
    engine, spec = setup(dialect, fake_server, http_client)
    history, sink, tools = MemoryHistory(user("read a and b")), RecordingSink(), ScriptedTools()

    result = await engine.run(spec, history, tools, sink)

    assert result.stop_reason == "end_turn" and result.cycles == 2
    assert result.usage_total.output_tokens == 15
    assert [[(c.call_id, c.parsed) for c in batch] for batch in tools.batches] == [
        [("call_a", {"path": "a.py"}), ("call_b", {"path": "b.py"})]]
    roles = [m.role for m in history.items]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert history.items[1].parts == [TextPart("Reading."), ToolCallPart("call_a", "Read", '{"path": "a.py"}'),
                                      ToolCallPart("call_b", "Read", '{"path": "b.py"}')]
    assert [p.call_id for p in history.items[2].parts] == ["call_a", "call_b"]
    assert history.items[3].parts == [TextPart("All done.")]
    # Only the step without tool calls is the run's answer (the end of the run waits for its commit).
    assert history.answers == [False, True]

    kinds = [type(e) for e in sink.events]
    assert kinds[0] is ModelCycleStarted
    assert kinds.index(ToolCallStart) < kinds.index(ModelCycleFinished) < kinds.index(ToolBatchStarted)
    assert kinds.index(ToolBatchFinished) < len(kinds) - 1 - kinds[::-1].index(ModelCycleStarted)
    assert [e.stop_reason for e in sink.of(ModelCycleFinished)] == ["tool_use", "end_turn"]

    # The tool results feed the second request, and its conversation starts with the exact bytes of
    # the first request's conversation (provider prompt caches need an unchanged prefix).
    first, second = fake_server.requests
    before, after = first.raw_items(dialect.messages_key), second.raw_items(dialect.messages_key)
    assert len(after) > len(before) and after[: len(before)] == before
    assert b"Read ok: {'path': 'a.py'}" in second.body and b"call_b" in second.body


@dialects
async def test_invalid_tool_json_becomes_a_tool_error(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(
        dialect.tool_calls([CallSpec("call_bad", "Read", ['{"path": "a.p']),
                            CallSpec("call_ok", "Read", ['{"path": "b.py"}'])]),
        dialect.text(["Retrying later."]),
    )
    engine, spec = setup(dialect, fake_server, http_client)
    history, tools = MemoryHistory(user("go")), ScriptedTools()

    result = await engine.run(spec, history, tools, RecordingSink())

    assert result.stop_reason == "end_turn"
    assert [c.call_id for c in tools.batches[0]] == ["call_ok"]  # the bad call never reaches the port
    bad, ok = history.items[2].parts
    assert bad.call_id == "call_bad" and bad.is_error and "not valid JSON" in bad.content
    assert ok.call_id == "call_ok" and not ok.is_error
    assert len(fake_server.requests) == 2


@dialects
async def test_stream_cut_runs_no_tool_and_commits_nothing(dialect: Dialect, fake_server, http_client) -> None:
    reply = dialect.tool_calls([CallSpec("call_a", "Read", ['{"path"', ': "a.py"}'])])
    reply.cut_after = len(reply.chunks) - 3
    fake_server.enqueue(reply)
    engine, spec = setup(dialect, fake_server, http_client)
    history, tools, sink = MemoryHistory(user("go")), ScriptedTools(), RecordingSink()

    with pytest.raises(StreamCutError):
        await engine.run(spec, history, tools, sink)
    assert tools.batches == [] and history.log == []
    assert any(isinstance(e, ToolCallStart) for e in sink.events)  # it was streaming a call


@dialects
async def test_thinking_is_replayed_on_the_next_request(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(dialect.thinking(["Consider ", "this."], ["Answer one."]), dialect.text(["Answer two."]))
    engine, spec = setup(dialect, fake_server, http_client)
    history = MemoryHistory(user("first"))
    await engine.run(spec, history, ScriptedTools(), RecordingSink())
    thinking, text = history.items[1].parts
    assert isinstance(thinking, ThinkingPart) and thinking.text == "Consider this." and thinking.replay
    assert text == TextPart("Answer one.")

    history.items.append(user("second"))
    await engine.run(spec, history, ScriptedTools(), RecordingSink())
    body = fake_server.requests[1].json()
    if dialect.kind.value == "anthropic":
        assert body["messages"][1]["content"][0] == {"type": "thinking", "thinking": "Consider this.",
                                                     "signature": SIGNATURE}
    elif dialect.kind.value == "openai-responses":
        item = body["input"][1]
        assert item["type"] == "reasoning" and item["id"] == "rs_fake1" and item["encrypted_content"] == ENCRYPTED
        assert item["summary"] == [{"type": "summary_text", "text": "Consider this."}]
    else:
        assert body["messages"][2]["reasoning_content"] == "Consider this."
    before = fake_server.requests[0].raw_items(dialect.messages_key)
    assert fake_server.requests[1].raw_items(dialect.messages_key)[: len(before)] == before


@dialects
async def test_provider_error_propagates_without_commits(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(dialect.auth_error())
    engine, spec = setup(dialect, fake_server, http_client)
    history = MemoryHistory(user("go"))
    with pytest.raises(AuthError):
        await engine.run(spec, history, ScriptedTools(), RecordingSink())
    assert history.log == []


async def test_max_cycles_bounds_the_loop(fake_server, http_client) -> None:
    dialect = OPENAI_CHAT
    fake_server.enqueue(dialect.tool_calls([CallSpec("c1", "Read", ['{"path": "x"}'])]))
    engine, spec = setup(dialect, fake_server, http_client)
    spec.max_cycles = 1
    history, tools = MemoryHistory(user("go")), ScriptedTools()
    result = await engine.run(spec, history, tools, RecordingSink())
    assert result.stop_reason == "max_cycles" and result.cycles == 1
    assert len(tools.batches) == 1 and history.items[-1].role == "tool"
    assert len(fake_server.requests) == 1


async def test_empty_arguments_mean_an_empty_object(fake_server, http_client) -> None:
    dialect = OPENAI_CHAT
    fake_server.enqueue(dialect.tool_calls([CallSpec("c1", "ReadLints", [])]), dialect.text(["ok"]))
    engine, spec = setup(dialect, fake_server, http_client)
    tools = ScriptedTools()
    result = await engine.run(spec, MemoryHistory(user("go")), tools, RecordingSink())
    assert result.stop_reason == "end_turn"
    assert tools.batches[0][0].parsed == {} and tools.batches[0][0].error is None


async def test_tool_results_keep_images_and_errors(fake_server, http_client) -> None:
    from cursor_byok.run import ImagePart, ToolOutcome

    dialect = OPENAI_CHAT
    fake_server.enqueue(dialect.tool_calls([CallSpec("c1", "Read", ['{"path": "shot.png"}']),
                                            CallSpec("c2", "Read", ['{"path": "missing"}'])]),
                        dialect.text(["seen"]))
    image = ImagePart("image/png", "iVBORw0KGgo=")

    async def handler(calls):
        return [ToolOutcome("c2", "Read", "no such file", is_error=True),
                ToolOutcome("c1", "Read", "an image", images=[image])]

    engine, spec = setup(dialect, fake_server, http_client)
    history = MemoryHistory(user("look"))
    await engine.run(spec, history, ScriptedTools(handler), RecordingSink())
    assert history.items[2].parts == [ToolResultPart("c1", "Read", "an image", False, [image]),
                                      ToolResultPart("c2", "Read", "no such file", True)]
    assert b"iVBORw0KGgo=" in fake_server.requests[1].body


async def test_usage_is_committed_with_the_assistant_message(fake_server, http_client) -> None:
    dialect = OPENAI_CHAT
    fake_server.enqueue(dialect.text(["hi"], usage=UsageSpec(input=10, output=2, cache_read=90)))
    engine, spec = setup(dialect, fake_server, http_client)
    history = MemoryHistory(user("go"))
    result = await engine.run(spec, history, ScriptedTools(), RecordingSink())
    (_, (message, usage)), = history.log
    assert message == Message("assistant", [TextPart("hi")])
    assert usage == dialect.expected_usage(UsageSpec(input=10, output=2, cache_read=90)) == result.usage_total



def test_a_batch_has_one_outcome_per_call_in_call_order() -> None:
    """What the engine commits for a batch, also used for a batch rebuilt after a restart: the
    returned outcome of each valid call, the argument error of an invalid one, and for a valid call
    without an outcome the text saying why (the batch was interrupted, or simply returned none)."""
    calls = [tool_call_request("call_a", "Read", '{"path": "a.py"}'), tool_call_request("call_bad", "Read", '{"path": '),
             tool_call_request("call_c", "Read", '{"path": "c.py"}')]
    returned = [ToolOutcome("call_a", "Read", "A")]
    for interrupted, missing in ((False, NO_RESULT), (True, INTERRUPTED_RESULT)):
        outcomes = batch_outcomes(calls, returned, interrupted)
        assert [o.call_id for o in outcomes] == ["call_a", "call_bad", "call_c"]
        assert outcomes[0].content == "A" and not outcomes[0].is_error
        assert outcomes[1].is_error and "Invalid arguments for Read" in outcomes[1].content
        assert outcomes[2].is_error and outcomes[2].content == missing
    message = tool_results_message(batch_outcomes(calls, returned, False))
    assert message.role == "tool" and [p.call_id for p in message.parts] == ["call_a", "call_bad", "call_c"]
