"""Task sub-agents: a child is its own conversation with an immutable ParentConversationRef."""
from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.store import ParentRef, Store
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

from .conftest import direct_transports

MODEL = "byok-parent"


@direct_transports
async def test_foreground_task_parent_triple_is_exact_and_survives_restart(tmp_path: Path, provider: FakeProviderServer, workspace: Path, transport: str) -> None:
    config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")])
    task_args = json.dumps({"description": "count files", "prompt": "Count the files and report.", "run_in_background": False})
    provider.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec("call_task", "Task", [task_args])]),  # parent: dispatch the sub-task
        OPENAI_CHAT.text(["there are 3 files"]),  # the child's own run
        OPENAI_CHAT.text(["the sub-agent says 3"]),  # parent, after the task result
    )
    server = ServerProcess(config).start()
    ide = ScriptedIDE(server.base_url, workspace, transport=transport)
    ide.hold_execs = True
    parent_conv, child_conv = uuid.uuid4().hex, uuid.uuid4().hex
    parent_rid, child_rid = uuid.uuid4().hex, uuid.uuid4().hex
    try:
        parent_log = StreamLog()
        parent_reader = asyncio.create_task(ide.stream(parent_rid, parent_log))
        await ide.append(parent_rid, run_request("delegate it", model=MODEL, conversation_id=parent_conv))
        while not ide.held:
            await asyncio.sleep(0.02)
        _, exec_msg = ide.held.pop()
        assert exec_msg.WhichOneof("message") == "subagent_args"
        args = exec_msg.subagent_args
        assert args.tool_call_id == "call_task" and not args.run_in_background
        assert args.prompt == "Count the files and report."

        # The IDE runs the child under its own request id, naming its parent in headers.
        headers = {"x-parent-request-id": parent_rid, "x-parent-agent-tool-call-id": args.tool_call_id}
        child_log = StreamLog()
        child_reader = asyncio.create_task(ide.stream(child_rid, child_log))
        child = run_request(args.prompt, model=args.model_id or MODEL, conversation_id=child_conv)
        assert (await ide.append(child_rid, child, headers=headers)).status_code == 200
        await asyncio.wait_for(child_reader, 15)
        assert child_log.text == "there are 3 files" and child_log.terminal is None

        reply = pb.AgentClientMessage()
        reply.exec_client_message.id = exec_msg.id
        success = reply.exec_client_message.subagent_result.success
        success.agent_id = child_conv
        success.final_message = child_log.text
        await ide.append(parent_rid, reply)
        ide.hold_execs = False
        await asyncio.wait_for(parent_reader, 15)
        assert parent_log.text == "the sub-agent says 3" and parent_log.terminal is None
        completed = [u for u in parent_log.updates("tool_call_completed") if u.call_id == "call_task"]
        assert len(completed) == 1 and completed[0].tool_call.WhichOneof("tool") == "task_tool_call"
        tool_msg = [m for m in provider.requests[2].json()["messages"] if m["role"] == "tool"][0]
        assert child_conv in tool_msg["content"] and "there are 3 files" in tool_msg["content"]
        child_tools = {t["function"]["name"] for t in provider.requests[1].json().get("tools", [])}
        assert "Task" not in child_tools  # a sub-agent cannot spawn sub-agents
    finally:
        await ide.close()
        server.stop()

    # After the server is gone, the database alone still holds the exact triple.
    store = await Store.open(config.data_dir / "state.db")
    try:
        parent_runs = await store.list_runs(parent_conv)
        assert len(parent_runs) == 1
        record = await store.get_conversation(child_conv)
        assert record is not None
        assert record.parent == ParentRef(parent_conv, parent_runs[0].run_id, "call_task")
        assert (await store.get_conversation(parent_conv)).parent is None
    finally:
        await store.close()

    # And a restarted server keeps it: a second run of the child does not change its origin.
    server.start()
    provider.enqueue(OPENAI_CHAT.text(["again"]))
    ide = ScriptedIDE(server.base_url, workspace, transport=transport)
    try:
        rid = uuid.uuid4().hex
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(rid, log))
        await ide.append(rid, run_request("once more", model=MODEL, conversation_id=child_conv))
        await asyncio.wait_for(reader, 15)
        assert log.terminal is None
    finally:
        await ide.close()
        server.stop()
    store = await Store.open(config.data_dir / "state.db")
    try:
        record = await store.get_conversation(child_conv)
        assert record.parent == ParentRef(parent_conv, parent_runs[0].run_id, "call_task")
    finally:
        await store.close()
