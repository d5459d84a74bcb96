"""Nothing acknowledged is lost: an append the server answered 200 is applied even if the server is
killed right after, and applied once.

Each test SIGKILLs the real server with input acknowledged but not yet in the history, restarts it
on the same data dir, and lets the scripted IDE do what Cursor does after a restart: open RunSSE
again on the same request id, send what it still owes (a result it had not sent, or an append that
got no 200) and, when the server has no run for that request id, retry the turn."""
from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

from .test_crash_recovery import resume_request, wait_until

MODEL = "byok-crash"  # the model resume_request asks for


@pytest.fixture
def config(tmp_path: Path, provider: FakeProviderServer) -> ServerConfig:
    return ServerConfig(
        data_dir=tmp_path / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
        runsse_wait_seconds=1.5,
        extra_server={"blob_ack_timeout_seconds": 1.0},
    )


def read_call(call_id: str, path: Path) -> CallSpec:
    return CallSpec(call_id, "Read", [f'{{"path": "{path}"}}'])


async def after_restart(ide: ScriptedIDE, conv: str, rid: str, owed: list[pb.AgentClientMessage]) -> StreamLog:
    """The IDE after the server came back: RunSSE on the same request id, what it still owes
    appended there; a retry of the turn (resume) when that request id has no run any more."""
    await ide.reconnect()
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    for message in owed:
        await ide.append(rid, message)
    await asyncio.wait_for(reader, 20)
    if log.terminal is None:
        return log
    return await ide.turn(resume_request(conv))


def tool_results(provider: FakeProviderServer) -> dict[str, str]:
    """call id → the tool result content the model was last sent."""
    messages = provider.requests[-1].json()["messages"]
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


async def test_a_tool_result_acknowledged_just_before_a_crash_is_applied(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    """Two Reads in one batch: the IDE answers the first (200), the server dies before the second;
    after the restart the first call completes with the IDE's result, not "did not finish"."""
    (workspace / "a.txt").write_text("ALPHA-CONTENT\n")
    (workspace / "b.txt").write_text("BRAVO-CONTENT\n")
    server = ServerProcess(config).start()
    conv = uuid.uuid4().hex
    ide = ScriptedIDE(server.base_url, workspace)
    ide.hold_execs = True
    try:
        provider.enqueue(OPENAI_CHAT.tool_calls([read_call("call_a", workspace / "a.txt"), read_call("call_b", workspace / "b.txt")]))
        rid = uuid.uuid4().hex
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(rid, log))
        assert (await ide.append(rid, run_request("read both", model=MODEL, conversation_id=conv, message_id="m1"))).status_code == 200
        await wait_until(lambda: len(ide.held) == 2)
        by_call = {ex.exec_id: ex for _, ex in ide.held}
        for reply in ide.execute(by_call["call_a"]):
            assert (await ide.append(rid, reply)).status_code == 200  # acknowledged
        server.kill()
        await asyncio.wait_for(reader, 10)
        assert log.terminals == 0

        server.start()
        provider.enqueue(OPENAI_CHAT.text(["read them both"]))
        calls_before = len(provider.requests)
        resumed = await after_restart(ide, conv, rid, ide.execute(by_call["call_b"]))
    finally:
        await ide.close()
        server.stop()
    assert resumed.terminals == 1 and resumed.terminal is None and resumed.text == "read them both"
    assert len(provider.requests) == calls_before + 1  # the model was asked once more, not twice
    results = tool_results(provider)
    assert "ALPHA-CONTENT" in results["call_a"], results
    assert "did not finish" not in results["call_a"]
