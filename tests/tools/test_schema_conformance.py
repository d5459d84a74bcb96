"""Everything the tools layer puts on the wire exists in the shared schema under the same number.

Drives every tool through a realistic exchange, collects each ExecServerMessage,
InteractionQuery, ToolCall (placeholder / started / completed) and InteractionUpdate produced,
and checks every set field, recursively, against schema.json.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message

from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.tools import (
    BUILTIN_TOOLS,
    ArgsStream,
    Done,
    ExecStep,
    InteractionStep,
    Progress,
    ToolContext,
    completed_update,
    start_tool,
    started_update,
)

from .support import FakeClock, make_ctx, request

REPO = Path(__file__).resolve().parents[2]


def _schema() -> dict[str, Any]:
    override = os.environ.get("CURSOR_BYOK_SHARED")
    base = Path(override) if override else REPO / ".." / "shared"
    path = base / "cursor-wire" / "schema.json"
    if not path.is_file():  # a missing reference is a broken checkout: fail, never skip
        raise FileNotFoundError(f"schema.json not found at {path} (set CURSOR_BYOK_SHARED)")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def schema_fields() -> dict[str, dict[str, int]]:
    return {
        name: {field["name"]: field["number"] for field in message["fields"]}
        for name, message in _schema()["messages"].items()
    }


def _answer(step: Any, scenario: dict[str, Any]) -> Any:
    """The client's reply to a step, from the scenario's canned results (by args/query kind)."""
    if isinstance(step, ExecStep):
        kind = step.message.WhichOneof("message")
        return "exec", pb.ExecClientMessage(id=step.message.id, exec_id=step.message.exec_id, **scenario[kind])
    kind = step.query.WhichOneof("query")
    return "interaction", pb.InteractionResponse(id=step.query.id, **scenario[kind])


def _shell_stream(**event: Any) -> dict[str, Any]:
    return {"shell_stream": pb.ShellStream(**event)}


SCENARIOS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("Read", {"path": "a", "offset": 1, "limit": 5},
     {"read_args": {"read_result": pb.ReadResult(success=pb.ReadSuccess(content="x\n", total_lines=1, range_applied=True))}}),
    ("Write", {"path": "a", "contents": "x"},
     {"write_args": {"write_result": pb.WriteResult(success=pb.WriteSuccess(path="/ws/a"))}}),
    ("StrReplace", {"path": "a", "old_string": "x", "new_string": "y"},
     {"read_args": {"read_result": pb.ReadResult(success=pb.ReadSuccess(content="x\n"))},
      "write_args": {"write_result": pb.WriteResult(permission_denied=pb.WritePermissionDenied(error="ro", is_readonly=True))}}),
    ("Delete", {"path": "a"},
     {"delete_args": {"delete_result": pb.DeleteResult(success=pb.DeleteSuccess(path="/ws/a"))}}),
    ("Ls", {"path": "a", "ignore": ["b"]},
     {"ls_args": {"ls_result": pb.LsResult(success=pb.LsSuccess(directory_tree_root=pb.LsDirectoryTreeNode(abs_path="/ws/a")))}}),
    ("Glob", {"glob_pattern": "*.py", "target_directory": "src"},
     {"grep_args": {"grep_result": pb.GrepResult(success=pb.GrepSuccess(
         workspace_results={"/ws": pb.GrepUnionResult(files=pb.GrepFilesResult(files=["/ws/a.py"], total_files=1))}))}}),
    ("Grep", {"pattern": "x", "output_mode": "count", "case_insensitive": True, "context_lines": 1, "head_limit": 3, "glob": "*"},
     {"grep_args": {"grep_result": pb.GrepResult(error=pb.GrepError(error="bad regex"))}}),
    ("ReadLints", {"paths": ["a"]},
     {"diagnostics_args": {"diagnostics_result": pb.DiagnosticsResult(success=pb.DiagnosticsSuccess(
         path="/ws/a", diagnostics=[pb.Diagnostic(severity=1, message="m", range=pb.Range(start=pb.Position(line=1)))]))}}),
    ("Shell", {"command": "ls", "description": "list"},
     {"shell_stream_args": _shell_stream(exit=pb.ShellStreamExit(code=1, aborted=True, abort_reason=2))}),
    ("Shell", {"command": "./serve", "run_in_background": True},
     {"background_shell_spawn_args": {"background_shell_spawn_result": pb.BackgroundShellSpawnResult(
         success=pb.BackgroundShellSpawnSuccess(shell_id=5, command="./serve", working_directory="/ws", pid=42))}}),
    ("Await", {"shell_id": "4", "timeout_ms": 0},
     {"read_args": {"read_result": pb.ReadResult(success=pb.ReadSuccess(content="---\nstatus: running\n---\n"))}}),
    ("TodoWrite", {"todos": [{"id": "1", "content": "c", "status": "completed"}]}, {}),
    ("AskQuestion", {"questions": [{"id": "q", "prompt": "p", "options": [{"id": "o", "label": "l"}]}]},
     {"ask_question_interaction_query": {"ask_question_interaction_response": pb.AskQuestionInteractionResponse(
         result=pb.AskQuestionResult(success=pb.AskQuestionSuccess(answers=[pb.AskQuestionSuccess.Answer(question_id="q", selected_option_ids=["o"])])))}}),
    ("SwitchMode", {"target_mode": "plan", "explanation": "e"},
     {"switch_mode_request_query": {"switch_mode_request_response": pb.SwitchModeRequestResponse(
         rejected=pb.SwitchModeRequestResponse.Rejected(reason="no"))}}),
    ("CreatePlan", {"name": "n", "overview": "o", "plan": "p", "todos": [{"id": "t", "content": "c"}]},
     {"create_plan_request_query": {"create_plan_request_response": pb.CreatePlanRequestResponse(
         result=pb.CreatePlanResult(success=pb.CreatePlanSuccess(), plan_uri="u"))}}),
    ("Task", {"description": "d", "prompt": "p", "subagent_type": "reviewer", "run_in_background": True},
     {"subagent_args": {"subagent_result": pb.SubagentResult(success=pb.SubagentSuccess(agent_id="a", transcript_path="/t"))}}),
    ("CallMcpTool", {"server": "docs", "toolName": "search", "arguments": {"q": [1, {"x": None}]}},
     {"mcp_args": {"mcp_result": pb.McpResult(success=pb.McpSuccess(content=[pb.McpToolResultContentItem(text=pb.McpTextContent(text="t"))]))}}),
    ("WebFetch", {"url": "https://example.com/doc"},
     {"fetch_args": {"fetch_result": pb.FetchResult(success=pb.FetchSuccess(
         url="https://example.com/doc", content="# Doc", status_code=200, content_type="text/markdown"))}}),
    ("WriteShellStdin", {"shell_id": 4, "chars": "y\n"},
     {"write_shell_stdin_args": {"write_shell_stdin_result": pb.WriteShellStdinResult(success=pb.WriteShellStdinSuccess(
         shell_id=4, terminal_file_length_before_input_written=120))}}),
    ("AwaitSubagent", {"agent_id": "sub-1", "timeout_ms": 100},
     {"subagent_await_args": {"subagent_await_result": pb.SubagentAwaitResult(
         complete=pb.SubagentAwaitComplete(agent_id="sub-1", tool_call_count=1, final_message="done"))}}),
    ("ListMcpResources", {"server": "docs"},
     {"list_mcp_resources_exec_args": {"list_mcp_resources_exec_result": pb.ListMcpResourcesExecResult(
         success=pb.ListMcpResourcesSuccess(resources=[pb.ListMcpResourcesExecResult.McpResource(uri="docs://a", server="docs")]))}}),
    ("FetchMcpResource", {"server": "docs", "uri": "docs://a"},
     {"read_mcp_resource_exec_args": {"read_mcp_resource_exec_result": pb.ReadMcpResourceExecResult(
         success=pb.ReadMcpResourceSuccess(uri="docs://a", text="contents"))}}),
    ("mcp_docs_search", {"q": "x"},
     {"mcp_args": {"mcp_result": pb.McpResult(rejected=pb.McpRejected(reason="r"))}}),
]


def _drive(name: str, args: dict[str, Any], scenario: dict[str, Any], ctx: ToolContext) -> list[Message]:
    produced: list[Message] = []
    stream = ArgsStream("call-1", name, "m1", workspace_root=ctx.workspace_root)
    produced += stream.opened()
    produced += stream.feed(json.dumps(args))
    execution = start_tool(request(name, args), ctx, model_call_id="m1")
    produced += [execution.placeholder(), started_update(execution, started_at_ms=1)]
    step = execution.first()
    next_id = 1
    while not isinstance(step, Done):
        if isinstance(step, Progress):
            raise AssertionError(f"{name}: unexpected progress while driving")
        if isinstance(step, ExecStep):
            step.message.id = next_id
            produced.append(step.message)
        else:
            assert isinstance(step, InteractionStep)
            step.query.id = next_id
            produced.append(step.query)
        next_id += 1
        channel, answer = _answer(step, scenario)
        if channel == "exec" and step.message.HasField("shell_stream_args"):
            produced += execution.on_exec_result(
                pb.ExecClientMessage(id=step.message.id, shell_stream=pb.ShellStream(stdout=pb.ShellStreamStdout(data="o")))
            ).updates
        step = execution.on_exec_result(answer) if channel == "exec" else execution.on_interaction_response(answer)
    produced.append(completed_update(execution, completed_at_ms=2))
    return produced


def _walk(message: Message, schema_fields: dict[str, dict[str, int]], problems: list[str]) -> None:
    full_name = message.DESCRIPTOR.full_name
    known = schema_fields.get(full_name)
    if known is None:
        problems.append(f"{full_name} is not in schema.json")
        return
    for field, value in message.ListFields():
        if known.get(field.name) != field.number:
            problems.append(f"{full_name}.{field.name} = {field.number}; schema has {known.get(field.name)}")
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            items = [v for v in value.values() if isinstance(v, Message)]
        elif field.is_repeated:
            items = list(value)
        else:
            items = [value]
        for item in items:
            _walk(item, schema_fields, problems)


@pytest.mark.parametrize("name,args,scenario", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_everything_produced_exists_in_schema(name, args, scenario, schema_fields):
    ctx = make_ctx(FakeClock())
    produced = _drive(name, args, scenario, ctx)
    problems: list[str] = []
    for message in produced:
        _walk(message, schema_fields, problems)
    assert problems == []
    # and the variants themselves: the ToolCall card and every exec/query sent
    card = next(m for m in produced if isinstance(m, pb.InteractionUpdate) and m.HasField("tool_call_completed"))
    variant = card.tool_call_completed.tool_call.WhichOneof("tool")
    if name in BUILTIN_TOOLS and BUILTIN_TOOLS[name].variant is None:  # a tool the IDE shows no card for
        assert variant is None
    else:
        assert schema_fields["agent.v1.ToolCall"][variant] == pb.ToolCall.DESCRIPTOR.fields_by_name[variant].number
    for message in produced:
        if isinstance(message, pb.ExecServerMessage):
            kind = message.WhichOneof("message")
            assert schema_fields["agent.v1.ExecServerMessage"][kind] == message.DESCRIPTOR.fields_by_name[kind].number
            assert message.exec_id == "call-1" and message.id > 0


def test_scenarios_cover_every_builtin_tool():
    assert set(BUILTIN_TOOLS) <= {name for name, _, _ in SCENARIOS}


def test_expected_wire_numbers(schema_fields):
    # The numbers PROTOCOL.md 2.2/2.3/2.6 states for what the tools send.
    expected = {
        "agent.v1.ExecServerMessage": {
            "write_args": 3, "delete_args": 4, "grep_args": 5, "read_args": 7, "ls_args": 8,
            "diagnostics_args": 9, "mcp_args": 11, "shell_stream_args": 14, "subagent_args": 28,
            "exec_id": 15, "accept_hook_additional_contexts": 55,
        },
        "agent.v1.ToolCall": {
            "shell_tool_call": 1, "delete_tool_call": 3, "glob_tool_call": 4, "grep_tool_call": 5,
            "read_tool_call": 8, "update_todos_tool_call": 9, "edit_tool_call": 12, "ls_tool_call": 13,
            "read_lints_tool_call": 14, "mcp_tool_call": 15, "create_plan_tool_call": 17,
            "task_tool_call": 19, "ask_question_tool_call": 23, "switch_mode_tool_call": 25,
            "await_tool_call": 42, "tool_call_id": 57, "started_at_ms": 59, "completed_at_ms": 60,
        },
        "agent.v1.InteractionQuery": {
            "ask_question_interaction_query": 3, "switch_mode_request_query": 4, "create_plan_request_query": 7,
        },
        "agent.v1.InteractionUpdate": {
            "tool_call_started": 2, "tool_call_completed": 3, "partial_tool_call": 7, "tool_call_delta": 15,
        },
    }
    for message, fields in expected.items():
        descriptor = getattr(pb, message.split(".")[-1]).DESCRIPTOR
        for name, number in fields.items():
            assert schema_fields[message][name] == number, (message, name)
            assert descriptor.fields_by_name[name].number == number, (message, name)
