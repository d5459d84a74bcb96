"""What a turn start costs the user: the model request leaves on a connection opened before the turn,
and only once the turn's input is stored."""
from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path

import httpx

from cursor_byok.store import Store

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.fakes.server import RecordedRequest, Reply
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


async def first_step(log: StreamLog) -> None:
    while "step_started" not in log.kinds():
        await asyncio.sleep(0.01)


async def test_the_input_is_stored_before_the_provider_has_the_request(tmp_path: Path) -> None:
    """The server builds the model request while the turn's input is being written, but the request
    leaves only once the input is stored. Another connection holds the database's write lock while
    the turn starts: the run gets as far as its first step, and the provider sees nothing until the
    lock is let go (the server answers other requests meanwhile); killed the instant the provider
    has the request, the server has the input."""
    with FakeProviderServer() as provider:
        config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")])
        server = ServerProcess(config).start()
        conversation_id = uuid.uuid4().hex

        def kill_on_arrival(request: RecordedRequest) -> Reply:
            server.kill()
            return OPENAI_CHAT.text(["never read"])

        provider.respond_with(kill_on_arrival)
        ide = ScriptedIDE(server.base_url, tmp_path)
        lock = sqlite3.connect(config.data_dir / "state.db", isolation_level=None)
        try:
            lock.execute("BEGIN IMMEDIATE")  # the server's writer waits (its busy timeout is 5 s)
            rid = uuid.uuid4().hex
            log = StreamLog()
            reader = asyncio.create_task(ide.stream(rid, log))
            # Its 200 waits for the append's journal row, which waits for the lock too.
            appended = asyncio.create_task(ide.append(rid, run_request("durable words", model=MODEL, conversation_id=conversation_id)))
            await asyncio.wait_for(first_step(log), 4)  # well within the writer's busy timeout
            # The wait for the lock is the writer thread's: the server goes on serving meanwhile.
            async with httpx.AsyncClient() as client:
                health = await asyncio.wait_for(client.get(server.base_url + "/__byok-api__/healthz"), 4)
            assert health.status_code == 204
            await asyncio.sleep(0.3)  # time enough for a request that did not wait to arrive
            unsent = provider.requests == [] and not appended.done()
            lock.execute("ROLLBACK")
            # The append's 200 and the model request follow the same commit, and the server dies the
            # instant the provider has the request: the 200 may not have been written by then.
            try:
                answered: int | None = (await asyncio.wait_for(appended, 15)).status_code
            except httpx.RemoteProtocolError:
                answered = None
            assert answered in (200, None)
            await asyncio.wait_for(reader, 15)
        finally:
            lock.close()
            await ide.close()
            server.kill()
        assert unsent, "the model request left before the turn's input was stored"
        assert log.terminals == 0 and "durable words" in provider.requests[0].body.decode()
    store = await Store.open(config.data_dir / "state.db")
    try:
        events = await store.load_events(conversation_id)
    finally:
        await store.close()
    assert any(b"durable words" in event.payload for event in events)
