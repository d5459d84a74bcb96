"""The todo list and Await's output offsets outlive the runtime: after an idle eviction or a server
restart, TodoWrite merges into the list the conversation had, and Await shows only the output the
model has not seen yet."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.ide import _terminal_file, run_request
from tests.harness.inprocess import MODEL, Rig


def call(call_id: str, name: str, **args: object) -> CallSpec:
    return CallSpec(call_id, name, [json.dumps(args)])


def tool_result(provider: FakeProviderServer, call_id: str) -> str:
    messages = provider.requests[-1].json()["messages"]
    return next(m["content"] for m in messages if m["role"] == "tool" and m["tool_call_id"] == call_id)


@pytest.mark.parametrize("between", ["eviction", "restart"])
async def test_todos_and_await_offsets_survive(rig: Rig, provider: FakeProviderServer, tmp_path: Path, between: str) -> None:
    terminals = tmp_path / "terminals"
    terminals.mkdir()
    shell = terminals / "7.txt"
    shell.write_text(_terminal_file("make", str(tmp_path), "line one\n", 0))
    conv = uuid.uuid4().hex

    def turn(text: str) -> object:
        msg = run_request(text, model=MODEL, conversation_id=conv, workspace=str(tmp_path))
        msg.run_request.action.user_message_action.request_context.env.terminals_folder = str(terminals)
        return msg

    provider.enqueue(
        OPENAI_CHAT.tool_calls([
            call("c_todo1", "TodoWrite", todos=[{"id": "a", "content": "write tests", "status": "in_progress"}, {"id": "b", "content": "fix bug"}]),
            call("c_wait1", "Await", shell_id="7", timeout_ms=1000),
        ]),
        OPENAI_CHAT.text(["planned"]),
    )
    ide = rig.ide(tmp_path)
    assert (await ide.turn(turn("plan it"))).text == "planned"
    assert "line one" in tool_result(provider, "c_wait1")

    if between == "eviction":
        rig.service.evict_idle(-1)
    else:
        await rig.restart()
        ide = rig.ide(tmp_path)
    shell.write_text(_terminal_file("make", str(tmp_path), "line one\nline two\n", 0))
    provider.enqueue(
        OPENAI_CHAT.tool_calls([
            call("c_todo2", "TodoWrite", merge=True, todos=[{"id": "b", "status": "completed"}]),
            call("c_wait2", "Await", shell_id="7", timeout_ms=1000),
        ]),
        OPENAI_CHAT.text(["done"]),
    )
    assert (await ide.turn(turn("go on"))).text == "done"
    todos = tool_result(provider, "c_todo2")
    assert "[in_progress] write tests (id: a)" in todos and "[completed] fix bug (id: b)" in todos
    awaited = tool_result(provider, "c_wait2")
    assert "line two" in awaited and "line one" not in awaited
