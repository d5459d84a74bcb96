"""What a turn start costs the user: the model request leaves on a connection opened before the turn."""
from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

MODEL = "byok-warm"


async def test_first_turn_reaches_the_provider_on_a_connection_opened_at_start(tmp_path: Path) -> None:
    with FakeProviderServer(keep_alive=True) as provider:
        config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")])
        with ServerProcess(config) as server:
            # Before any turn: the server has opened a connection to the provider (no key, no model request).
            [probe] = await asyncio.to_thread(provider.wait_for_probes, 1)
            assert "authorization" not in probe.headers and provider.requests == []
            provider.enqueue(OPENAI_CHAT.text(["warm"]))
            ide = ScriptedIDE(server.base_url, tmp_path)
            try:
                rid = uuid.uuid4().hex
                log = StreamLog()
                reader = asyncio.create_task(ide.stream(rid, log))
                await ide.append(rid, run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
                await asyncio.wait_for(reader, 15)
            finally:
                await ide.close()
        assert log.text == "warm" and log.terminal is None
        [request] = provider.requests
        assert request.peer == probe.peer  # the turn did not wait for a new connection
