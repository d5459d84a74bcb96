"""Tool round trips through the real server: MCP, AskQuestion, background shells, background
completions, sub-task cancellation."""
from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, run_request

from .conftest import MODEL, both_transports

pytestmark = both_transports


def call(call_id: str, name: str, **args: object) -> CallSpec:
    return CallSpec(call_id, name, [json.dumps(args)])


def tool_messages(provider: FakeProviderServer, index: int) -> list[dict]:
    return [m for m in provider.requests[index].json()["messages"] if m["role"] == "tool"]


def with_mcp(msg: pb.AgentClientMessage) -> pb.AgentClientMessage:
    tool = msg.run_request.mcp_tools.mcp_tools.add()
    tool.name = "weather-get_forecast"
    tool.provider_identifier = "weather"
    tool.tool_name = "get_forecast"
    tool.description = "Forecast for a city."
    tool.input_schema_json = json.dumps({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    return msg


async def test_mcp_call_routed_by_descriptor(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    ide.mcp_servers = {"weather": {"get_forecast": lambda args: f"sunny in {args['city']}"}}
    provider.enqueue(OPENAI_CHAT.tool_calls([call("c_mcp", "mcp_weather_get_forecast", city="Oslo")]), OPENAI_CHAT.text(["it is sunny"]))
    log = await ide.turn(with_mcp(run_request("weather?", model=MODEL, conversation_id=uuid.uuid4().hex)))
    assert log.text == "it is sunny" and log.terminal is None
    tools_offered = [t["function"]["name"] for t in provider.requests[0].json()["tools"]]
    assert tools_offered[-1] == "mcp_weather_get_forecast"  # dynamic tools after the fixed ones
    mcp = [e.mcp_args for e in ide.exec_log if e.WhichOneof("message") == "mcp_args"]
    assert len(mcp) == 1 and mcp[0].tool_name == "get_forecast" and mcp[0].provider_identifier == "weather"
    assert "sunny in Oslo" in tool_messages(provider, 1)[0]["content"]


async def test_call_mcp_tool_by_server_and_name(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    ide.mcp_servers = {"weather": {"get_forecast": lambda args: f"rain in {args['city']}"}}
    provider.enqueue(
        OPENAI_CHAT.tool_calls([call("c_call", "CallMcpTool", server="weather", toolName="get_forecast", arguments={"city": "Rome"})]),
        OPENAI_CHAT.text(["ok"]),
    )
    await ide.turn(with_mcp(run_request("weather?", model=MODEL, conversation_id=uuid.uuid4().hex)))
    assert "rain in Rome" in tool_messages(provider, 1)[0]["content"]


async def test_unknown_mcp_descriptor_is_a_tool_error(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(
        OPENAI_CHAT.tool_calls([call("c_unknown", "CallMcpTool", server="nope", toolName="missing", arguments={})]),
        OPENAI_CHAT.text(["no such tool"]),
    )
    log = await ide.turn(with_mcp(run_request("call it", model=MODEL, conversation_id=uuid.uuid4().hex)))
    assert log.terminal is None
    assert [e for e in ide.exec_log if e.WhichOneof("message") == "mcp_args"] == []
    assert "unknown" in tool_messages(provider, 1)[0]["content"].lower()


async def test_ask_question_is_answered_by_the_user(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    def answer(query: pb.InteractionQuery) -> pb.InteractionResponse:
        q = query.ask_question_interaction_query.args.questions[0]
        resp = pb.InteractionResponse()
        a = resp.ask_question_interaction_response.result.success.answers.add()
        a.question_id = q.id
        a.selected_option_ids.append(q.options[1].id)
        return resp

    ide.answers["ask_question_interaction_query"] = answer
    question = {"id": "q1", "prompt": "Which database?", "options": [{"id": "pg", "label": "Postgres"}, {"id": "sq", "label": "SQLite"}]}
    provider.enqueue(OPENAI_CHAT.tool_calls([call("c_ask", "AskQuestion", questions=[question])]), OPENAI_CHAT.text(["SQLite it is"]))
    log = await ide.turn(run_request("set up storage", model=MODEL, conversation_id=uuid.uuid4().hex))
    assert log.text == "SQLite it is" and log.terminal is None
    assert "interaction_query" in log.kinds()
    assert "SQLite" in tool_messages(provider, 1)[0]["content"] or "sq" in tool_messages(provider, 1)[0]["content"]


async def test_shell_moves_to_background_then_is_awaited(ide: ScriptedIDE, provider: FakeProviderServer, workspace: Path) -> None:
    ide.terminals = workspace / "terminals"
    ide.terminals.mkdir()
    provider.enqueue(
        OPENAI_CHAT.tool_calls([call("c_sh", "Shell", command="background:echo built-ok", working_directory=str(workspace))]),
        OPENAI_CHAT.tool_calls([call("c_await", "Await", shell_id="100", timeout_ms=5000)]),
        OPENAI_CHAT.text(["build finished"]),
    )
    msg = run_request("build it", model=MODEL, conversation_id=uuid.uuid4().hex, workspace=str(workspace))
    msg.run_request.action.user_message_action.request_context.env.terminals_folder = str(ide.terminals)

    async def during(rid: str, log: StreamLog) -> None:
        while len(provider.requests) < 2:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # Await polls while the command is still running
        ide.finish_background()

    log = await ide.turn(msg, during=during)
    assert log.text == "build finished" and log.terminal is None
    first = tool_messages(provider, 1)[0]["content"]
    assert "background" in first.lower() and "100" in first
    awaited = tool_messages(provider, 2)[-1]["content"]
    assert "built-ok" in awaited
    reads = [e.read_args.path for e in ide.exec_log if e.WhichOneof("message") == "read_args"]
    assert reads and all(p.endswith("terminals/100.txt") for p in reads)


def completion_request(conv: str, task_id: str, tool_call_id: str, model: str = MODEL) -> pb.AgentClientMessage:
    msg = pb.AgentClientMessage()
    rr = msg.run_request
    rr.conversation_id = conv
    rr.run_id = uuid.uuid4().hex
    rr.requested_model.model_id = model
    c = rr.action.background_task_completion_action.completions.add()
    c.task_id = task_id
    c.tool_call_id = tool_call_id
    c.kind = pb.BACKGROUND_TASK_KIND_SUBAGENT
    c.status = pb.BACKGROUND_TASK_STATUS_SUCCESS
    c.title = "index the repo"
    c.detail = "Indexed 42 files."
    return msg


async def test_background_task_returns_at_once_and_its_completion_is_delivered_once(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    conv = uuid.uuid4().hex
    provider.enqueue(
        OPENAI_CHAT.tool_calls([call("c_bg", "Task", description="index the repo", prompt="Index it.", run_in_background=True)]),
        OPENAI_CHAT.text(["started it"]),
    )
    ide.hold_execs = True

    async def during(rid: str, log: StreamLog) -> None:
        while not ide.held:
            await asyncio.sleep(0.02)
        _, ex = ide.held.pop()
        assert ex.subagent_args.run_in_background
        reply = pb.AgentClientMessage()
        reply.exec_client_message.id = ex.id
        reply.exec_client_message.subagent_result.success.agent_id = "child-bg"
        reply.exec_client_message.subagent_result.success.background_reason = 1
        await ide.append(rid, reply)
        ide.hold_execs = False

    log = await ide.turn(run_request("index in the background", model=MODEL, conversation_id=conv), during=during)
    assert log.text == "started it" and log.terminal is None
    # The checkpoint records the sub-task: its run by the parent's Task call, its own state by id.
    state = [m.conversation_checkpoint_update for m in log.messages if m.WhichOneof("message") == "conversation_checkpoint_update"][-1]
    run = state.subagent_runs_by_parent_tool_call_id["c_bg"]
    assert run.parent_tool_call_id == "c_bg" and run.subagent_id == "child-bg"
    assert run.status == pb.SUBAGENT_RUN_STATUS_BACKGROUNDED and run.title == "index the repo"
    assert state.subagent_states["child-bg"].created_timestamp_ms > 0

    # Later the IDE reports the completion: one simulated user turn, one follow-up.
    provider.enqueue(OPENAI_CHAT.text(["the index is ready"]))
    follow = await ide.turn(completion_request(conv, "child-bg", "c_bg"))
    assert follow.text == "the index is ready" and follow.terminal is None
    assert "Indexed 42 files." in provider.requests[-1].body.decode()
    calls = len(provider.requests)
    # At-least-once delivery: the same completion again never wakes the model.
    again = await ide.turn(completion_request(conv, "child-bg", "c_bg"))
    assert again.terminal is None and len(provider.requests) == calls
    assert provider.requests[-1].body.decode().count("Indexed 42 files.") == 1


async def test_background_completion_joins_an_active_run(ide: ScriptedIDE, provider: FakeProviderServer, workspace: Path) -> None:
    conv = uuid.uuid4().hex
    (workspace / "a.txt").write_text("a\n")
    provider.enqueue(OPENAI_CHAT.tool_calls([call("c_r", "Read", path=str(workspace / "a.txt"))]), OPENAI_CHAT.text(["both handled"]))
    ide.hold_execs = True

    async def during(rid: str, log: StreamLog) -> None:
        while not ide.held:
            await asyncio.sleep(0.02)
        completion = pb.AgentClientMessage()
        completion.conversation_action.CopyFrom(completion_request(conv, "t9", "c_old").run_request.action)
        await ide.append(rid, completion)
        await asyncio.sleep(0.2)
        ide.hold_execs = False
        await ide.release_held()  # the pending tool was not aborted by the completion

    log = await ide.turn(run_request("read", model=MODEL, conversation_id=conv), during=during)
    assert log.text == "both handled" and log.terminals == 1
    assert "Indexed 42 files." in provider.requests[1].body.decode()
    assert tool_messages(provider, 1)[0]["tool_call_id"] == "c_r" and "did not finish" not in tool_messages(provider, 1)[0]["content"]
    assert len(provider.requests) == 2  # joined the run: no extra turn


async def test_cancel_of_a_subtask_leaves_the_parent_running(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(
        OPENAI_CHAT.tool_calls([call("c_task", "Task", description="slow job", prompt="Do the slow job.")]),
        OPENAI_CHAT.text(["parent carried on"]),
    )
    ide.hold_execs = True

    async def during(rid: str, log: StreamLog) -> None:
        while not ide.held:
            await asyncio.sleep(0.02)
        cancel = pb.AgentClientMessage()
        cancel.conversation_action.cancel_subagent_action.subagent_id = "c_task"
        await ide.append(rid, cancel)
        ide.hold_execs = False

    log = await ide.turn(run_request("delegate", model=MODEL, conversation_id=uuid.uuid4().hex), during=during)
    assert log.text == "parent carried on" and log.terminals == 1 and log.terminal is None
    aborts = [m.exec_server_control_message.abort.id for m in log.messages if m.WhichOneof("message") == "exec_server_control_message"]
    assert len(aborts) == 1
    result = tool_messages(provider, 1)[0]
    assert result["tool_call_id"] == "c_task" and "cancel" in result["content"].lower()
