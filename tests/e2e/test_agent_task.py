"""An end-to-end agent task: the model reads, greps, edits with StrReplace and runs a shell command;
the scripted IDE executes every exec message against a temp workspace."""
from __future__ import annotations

import asyncio
import json
import uuid

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, run_request

from .conftest import MODEL, both_transports


def call(call_id: str, name: str, **args: object) -> CallSpec:
    text = json.dumps(args)
    mid = len(text) // 2
    return CallSpec(call_id, name, [text[:mid], text[mid:]])  # arguments stream in two pieces


async def run(ide: ScriptedIDE, text: str, *, workspace: str) -> StreamLog:
    return await ide.turn(run_request(text, model=MODEL, conversation_id=uuid.uuid4().hex, workspace=workspace), timeout=30)


def card_order(log: StreamLog, call_id: str) -> list[str]:
    out = []
    for m in log.messages:
        kind = m.WhichOneof("message")
        if kind == "interaction_update":
            u = m.interaction_update
            which = u.WhichOneof("message")
            if which in ("partial_tool_call", "tool_call_started", "tool_call_completed", "tool_call_delta"):
                if getattr(u, which).call_id == call_id:
                    out.append(which)
        elif kind == "exec_server_message" and m.exec_server_message.exec_id == call_id:
            out.append("exec:" + (m.exec_server_message.WhichOneof("message") or "?"))
    return out


def collapse(seq: list[str]) -> list[str]:
    out: list[str] = []
    for item in seq:
        if not out or out[-1] != item:
            out.append(item)
    return out


@both_transports
async def test_end_to_end_agent_task_changes_the_workspace(ide: ScriptedIDE, provider: FakeProviderServer, workspace) -> None:
    src = workspace / "app.py"
    src.write_text("def greet():\n    return 'hello world'\n\nprint(greet())\n")
    provider.enqueue(
        OPENAI_CHAT.tool_calls([call("c_read", "Read", path=str(src)), call("c_grep", "Grep", pattern="hello", path=str(workspace))]),
        OPENAI_CHAT.tool_calls([call("c_edit", "StrReplace", path=str(src), old_string="'hello world'", new_string="'hello, cursor'")]),
        OPENAI_CHAT.tool_calls([call("c_shell", "Shell", command="python3 app.py > out.txt && cat out.txt", working_directory=str(workspace))]),
        OPENAI_CHAT.text(["Done: greeting updated."]),
    )
    log = await run(ide, "change the greeting and run it", workspace=str(workspace))
    assert log.terminals == 1 and log.terminal is None, log.terminal
    assert log.text == "Done: greeting updated."
    assert src.read_text() == "def greet():\n    return 'hello, cursor'\n\nprint(greet())\n"
    assert (workspace / "out.txt").read_text() == "hello, cursor\n"

    # What the IDE executed, in order.
    kinds = [e.WhichOneof("message") for e in ide.exec_log]
    assert kinds == ["read_args", "grep_args", "read_args", "write_args", "shell_stream_args"]
    ids = [e.id for e in ide.exec_log]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)  # monotonic, never reused

    # Tool cards: partial → started → exec → completed, for every call.
    assert collapse(card_order(log, "c_read")) == ["partial_tool_call", "tool_call_started", "exec:read_args", "tool_call_completed"]
    assert collapse(card_order(log, "c_shell")) == ["partial_tool_call", "tool_call_started", "exec:shell_stream_args", "tool_call_delta", "tool_call_completed"]
    edit = collapse(card_order(log, "c_edit"))
    assert edit[-4:] == ["tool_call_started", "exec:read_args", "exec:write_args", "tool_call_completed"]
    completed = {u.call_id: u.tool_call for u in log.updates("tool_call_completed")}
    assert completed["c_edit"].WhichOneof("tool") == "edit_tool_call"
    assert completed["c_shell"].WhichOneof("tool") == "shell_tool_call"
    assert completed["c_read"].WhichOneof("tool") == "read_tool_call"

    # A checkpoint after each committed step (3 tool rounds), then the final one last.
    kinds = log.kinds()
    assert kinds.count("conversation_checkpoint_update") >= 2
    assert kinds[-1] == "conversation_checkpoint_update"
    first_checkpoint = kinds.index("conversation_checkpoint_update")
    assert first_checkpoint < kinds.index("turn_ended")  # a step checkpoint came mid-run

    # What the provider saw: tool results fed back, in call order.
    second = provider.requests[1].json()["messages"]
    tool_msgs = [m for m in second if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["c_read", "c_grep"]
    assert "hello world" in tool_msgs[0]["content"]
    assert "app.py" in tool_msgs[1]["content"]
    last = provider.requests[3].json()["messages"]
    assert "hello, cursor" in [m for m in last if m["role"] == "tool"][-1]["content"]


async def test_invalid_tool_arguments_become_a_tool_error(ide: ScriptedIDE, provider: FakeProviderServer, workspace) -> None:
    provider.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec("c_bad", "Read", ['{"path": '])]),
        OPENAI_CHAT.text(["recovered"]),
    )
    log = await run(ide, "read something", workspace=str(workspace))
    assert log.text == "recovered" and log.terminal is None
    assert ide.exec_log == []  # nothing was executed
    tool_msg = [m for m in provider.requests[1].json()["messages"] if m["role"] == "tool"][0]
    assert tool_msg["tool_call_id"] == "c_bad"
    assert "invalid" in tool_msg["content"].lower() or "json" in tool_msg["content"].lower()


@both_transports
async def test_result_of_the_wrong_kind_is_rejected(ide: ScriptedIDE, provider: FakeProviderServer, workspace) -> None:
    target = workspace / "r.txt"
    target.write_text("right content\n")
    provider.enqueue(OPENAI_CHAT.tool_calls([call("c_kind", "Read", path=str(target))]), OPENAI_CHAT.text(["ok"]))
    ide.hold_execs = True
    rid = uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("read", model=MODEL, conversation_id=uuid.uuid4().hex, workspace=str(workspace)))
    while not ide.held:
        await asyncio.sleep(0.02)
    _, exec_msg = ide.held[0]
    wrong = pb.AgentClientMessage()
    wrong.exec_client_message.id = exec_msg.id
    wrong.exec_client_message.write_result.success.path = str(target)  # a write result for a read
    await ide.append(rid, wrong)
    await asyncio.sleep(0.3)
    assert "tool_call_completed" not in log.kinds()  # the wrong kind did not complete the call
    await ide.release_held()
    ide.hold_execs = False
    await asyncio.wait_for(reader, 15)
    tool_msg = [m for m in provider.requests[1].json()["messages"] if m["role"] == "tool"][0]
    assert "right content" in tool_msg["content"]
