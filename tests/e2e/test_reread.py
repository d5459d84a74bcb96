"""Reading a finished stream again, against the real `serve`: a RunSSE that reads a request id's
stream again gets the whole replay with exactly one terminal for as long as the IDE is still on
that request id (its appends keep coming) and for the retention time after, and a clear
`not_found` once that time has passed with nothing from the IDE.

The first case is the soak's "reconnect" turn under load: the server had sent the stream's
terminal on the first connection, but the IDE, still busy with the frames before it (sending their
acks), never took it; its connection went and it read the stream again, more than the retention
time after the stream ended and less than that after its last append. To the server the terminal
was delivered either way, so here the IDE simply reads the first stream to its end.
"""
from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from cursor_byok.gateway import sweep_seconds
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, gauge_reaches, heartbeat_message, run_request
from tests.harness.server import ServerConfig, ServerProcess, one_model_config

MODEL = "byok-reread"
RETENTION = 1.0  # a finished stream's output, kept for a RunSSE that reads it again


@pytest.fixture
def config(tmp_path: Path, provider: FakeProviderServer) -> ServerConfig:
    return one_model_config(
        tmp_path / "data", provider.url, MODEL, runsse_wait_seconds=1.0, output_retention_seconds=RETENTION,
        extra_server={"blob_ack_timeout_seconds": 1.0},
    )


async def finished_turn(ide: ScriptedIDE, provider: FakeProviderServer) -> tuple[str, StreamLog]:
    """A turn whose stream the IDE read to its end: its request id and what the stream delivered."""
    provider.enqueue(OPENAI_CHAT.text(["the ", "answer"]))
    rid = uuid.uuid4().hex
    first = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex), request_id=rid)
    assert first.terminals == 1 and first.terminal is None and first.text == "the answer"
    return rid, first


async def test_a_stream_read_again_while_its_ide_is_still_on_it_is_replayed_whole(
    config: ServerConfig, provider: FakeProviderServer, workspace: Path
) -> None:
    with ServerProcess(config) as server:
        period = sweep_seconds(server.settings().server)
        ide = ScriptedIDE(server.base_url, workspace)
        try:
            rid, first = await finished_turn(ide, provider)
            # The IDE is still on the request id (as it is while it works through what the stream
            # sent): an append every half retention time, for three retention times and sweeps.
            for _ in range(int(3 * (RETENTION + period) / (RETENTION / 2))):
                assert (await ide.append(rid, heartbeat_message())).status_code == 200
                await asyncio.sleep(RETENTION / 2)
            again = await asyncio.wait_for(ide.stream(rid, StreamLog()), 10)
            # Nothing more from the IDE: the retention time (and a sweep) passes, the stream is let go.
            await gauge_reaches(ide.client, "cursor_byok_runsse_streams_retained", 0, timeout=10 + 3 * (RETENTION + period))
            late = await asyncio.wait_for(ide.stream(rid, StreamLog()), 10)
        finally:
            await ide.close()
    assert again.terminals == 1 and again.terminal is None and not again.broken, again.terminal
    assert bytes(again.raw) == bytes(first.raw)  # the whole stream, as first sent
    assert late.terminals == 1 and late.terminal is not None and late.terminal.code == "not_found", late.terminal
    assert rid in late.terminal.message and not late.messages


async def test_a_stream_read_again_after_its_transport_expired_is_replayed(
    tmp_path: Path, provider: FakeProviderServer, workspace: Path
) -> None:
    """A request id's transport (its append ordering) expires on its own clock; a finished stream
    still retained is replayed to a RunSSE that comes after that, not kept waiting for a first
    append that will never come."""
    config = one_model_config(
        tmp_path / "data", provider.url, MODEL, runsse_wait_seconds=5.0, output_retention_seconds=60.0,
        extra_server={"transport_idle_seconds": 0.5, "blob_ack_timeout_seconds": 1.0},
    )
    with ServerProcess(config) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        try:
            rid, first = await finished_turn(ide, provider)
            await gauge_reaches(ide.client, "cursor_byok_transports", 0)  # its transport expired
            again = await asyncio.wait_for(ide.stream(rid, StreamLog()), 10)
        finally:
            await ide.close()
    assert again.terminals == 1 and again.terminal is None, again.terminal
    assert bytes(again.raw) == bytes(first.raw)
