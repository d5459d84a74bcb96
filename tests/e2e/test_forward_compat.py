"""A newer Cursor never kills a run: enum values and fields this build does not know, through the
real server; what it passes on (checkpoints, upstream) keeps them."""
from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, Reply
from tests.harness.ide import BIDI_APPEND, RUN_SSE, ScriptedIDE, StreamLog, append_body, envelope, run_request
from tests.harness.newer import NEWER_ENUM_VALUE, add_newer_field, unknown_numbers
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

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


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as stand_in:
        yield stand_in


@pytest.fixture(scope="module")
def forwarding_server(tmp_path_factory: pytest.TempPathFactory, upstream: FakeProviderServer) -> Iterator[ServerProcess]:
    cfg = ServerConfig(
        data_dir=tmp_path_factory.mktemp("forwarding") / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url="http://127.0.0.1:9/v1")],
        upstream=upstream.url,
        runsse_wait_seconds=2.0,
    )
    with ServerProcess(cfg) as proc:
        yield proc


async def test_a_newer_client_message_is_forwarded_upstream_byte_for_byte(forwarding_server: ServerProcess, upstream: FakeProviderServer, tmp_path: Path) -> None:
    frames = envelope(b"\x0a\x09\x0a\x07\x0a\x05Hello") + envelope(b"{}", 2)
    upstream.enqueue(Reply(body=b"", content_type="application/proto"), Reply(chunks=[frames], content_type="application/connect+proto"))
    msg = run_request("hi", model="official-model", conversation_id=uuid.uuid4().hex)
    rr = msg.run_request
    rr.action.user_message_action.user_message.mode = NEWER
    add_newer_field(rr)
    add_newer_field(rr.action)
    ide = ScriptedIDE(forwarding_server.base_url, tmp_path)
    try:
        rid = uuid.uuid4().hex
        assert (await ide.append(rid, msg)).status_code == 200
        log = await asyncio.wait_for(ide.stream(rid, StreamLog()), 10)
    finally:
        await ide.close()
    assert bytes(log.raw) == frames
    assert [r.path for r in upstream.requests] == [BIDI_APPEND, RUN_SSE]
    assert upstream.requests[0].body == append_body(rid, 0, msg)  # the newer fields went on untouched
