"""A newer Cursor never kills a run: enum values and fields this build does not know, through the
real server; the checkpoints it builds from the IDE's state keep them (upstream forwarding: see
test_upstream)."""
from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, run_request
from tests.harness.newer import NEWER_ENUM_VALUE, add_newer_field, unknown_numbers
from tests.harness.server import ServerProcess

from .conftest import MODEL

NEWER = NEWER_ENUM_VALUE


def newer_completion(task_id: str) -> pb.ConversationAction:
    action = pb.ConversationAction()
    c = action.background_task_completion_action.completions.add()
    c.task_id = task_id
    c.tool_call_id = "c_old"
    c.kind = NEWER
    c.status = NEWER
    c.reason = NEWER
    c.title = "render the video"
    c.detail = "Rendered 12 frames."
    return action


async def test_background_completion_of_an_unknown_kind_during_a_run_is_delivered(
    ide: ScriptedIDE, provider: FakeProviderServer, workspace: Path, server: ServerProcess
) -> None:
    conv = uuid.uuid4().hex
    (workspace / "a.txt").write_text("a\n")
    read = CallSpec("c_r", "Read", [json.dumps({"path": str(workspace / "a.txt")})])
    provider.enqueue(OPENAI_CHAT.tool_calls([read]), OPENAI_CHAT.text(["both handled"]))
    ide.hold_execs = True

    async def during(rid: str, log: StreamLog) -> None:
        while not ide.held:
            await asyncio.sleep(0.02)
        completion = pb.AgentClientMessage()
        completion.conversation_action.CopyFrom(newer_completion("t-new"))
        assert (await ide.append(rid, completion)).status_code == 200
        await asyncio.sleep(0.2)
        ide.hold_execs = False
        await ide.release_held()

    log = await ide.turn(run_request("read", model=MODEL, conversation_id=conv), during=during)
    assert log.terminal is None, log.terminal
    assert log.text == "both handled"
    delivered = provider.requests[1].body.decode()
    assert "render the video" in delivered and "Rendered 12 frames." in delivered
    assert "unknown(99)" in delivered  # named as unknown, not guessed


async def test_background_completion_of_an_unknown_kind_starts_a_run(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    conv = uuid.uuid4().hex
    provider.enqueue(OPENAI_CHAT.text(["first"]), OPENAI_CHAT.text(["the video is ready"]))
    assert (await ide.turn(run_request("hi", model=MODEL, conversation_id=conv))).terminal is None
    msg = pb.AgentClientMessage()
    rr = msg.run_request
    rr.conversation_id = conv
    rr.run_id = uuid.uuid4().hex
    rr.requested_model.model_id = MODEL
    rr.action.CopyFrom(newer_completion("t-next"))
    log = await ide.turn(msg)
    assert log.terminal is None, log.terminal
    assert log.text == "the video is ready"
    assert "Rendered 12 frames." in provider.requests[-1].body.decode()


async def test_fields_a_newer_cursor_adds_are_logged_and_kept_in_checkpoints(ide: ScriptedIDE, provider: FakeProviderServer, server: ServerProcess) -> None:
    provider.enqueue(OPENAI_CHAT.text(["kept"]))
    msg = run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex)
    newer_user = add_newer_field(msg.run_request.action.user_message_action.user_message)
    state = msg.run_request.conversation_state
    top = add_newer_field(state)
    nested = add_newer_field(state.token_details)
    state.mode = NEWER  # an agent mode newer than our schema, in the state it hands us

    log = await ide.turn(msg)
    assert log.text == "kept" and log.terminal is None
    checkpoints = [m.conversation_checkpoint_update for m in log.messages if m.HasField("conversation_checkpoint_update")]
    assert checkpoints, log.kinds()
    assert top in unknown_numbers(checkpoints[-1]) and nested in unknown_numbers(checkpoints[-1].token_details)
    assert f"unknown=agent.v1.UserMessage#{newer_user}" in server.log_path.read_text(errors="replace")
