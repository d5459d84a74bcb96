"""Request bindings live in the store's table, not in memory: after a restart (when memory holds none
of them) an old request id still routes to its conversation, and offering it to another conversation
is still refused with nothing routed."""
from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.server import ServerConfig, ServerProcess, one_model_config

MODEL = "byok-bindings"


@pytest.fixture
def config(tmp_path: Path, provider: FakeProviderServer, store_url: str) -> ServerConfig:
    """On both store backends: bindings stored before a restart hold after it."""
    return one_model_config(tmp_path / "data", provider.url, MODEL, store_url=store_url)


async def one_turn(server: ServerProcess, workspace: Path, rid: str, conv: str | None, text: str) -> None:
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        log = await ide.turn(request_id=rid, message=run_request(text, model=MODEL, conversation_id=conv))
        assert log.terminal is None, log.terminal
    finally:
        await ide.close()


async def test_a_request_id_bound_before_a_restart_conflicts_after_it(
    config: ServerConfig, provider: FakeProviderServer, workspace: Path
) -> None:
    rid = uuid.uuid4().hex
    provider.enqueue(OPENAI_CHAT.text(["first"]))
    with ServerProcess(config) as server:
        await one_turn(server, workspace, rid, "conv-a", "one")
    with ServerProcess(config) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        try:
            resp = await ide.append(rid, run_request("two", model=MODEL, conversation_id="conv-b"), seqno=0)
            assert resp.status_code == 409 and resp.json()["code"] == "already_exists"
            assert "conv-a" in resp.json()["message"]
            await asyncio.sleep(0.2)
            assert len(provider.requests) == 1  # nothing routed
        finally:
            await ide.close()


async def test_a_request_id_bound_before_a_restart_still_routes_its_conversation(
    config: ServerConfig, provider: FakeProviderServer, workspace: Path
) -> None:
    rid, conv = uuid.uuid4().hex, uuid.uuid4().hex
    provider.enqueue(OPENAI_CHAT.text(["the first answer"]), OPENAI_CHAT.text(["the second answer"]))
    with ServerProcess(config) as server:
        await one_turn(server, workspace, rid, conv, "the first question")
    with ServerProcess(config) as server:
        # A new Cursor run on the old request id, without a conversation id: only the stored
        # binding can route it.
        await one_turn(server, workspace, rid, None, "the second question")
    body = provider.requests[1].body.decode()
    assert "the first question" in body and "the first answer" in body and "the second question" in body
