"""How long a request id's transport lives, against the real `serve`: it lives as long as its run
(however long the IDE takes over a tool), and an append for a stream that has ended — before a
restart, or since its transport went — is told so at once, not kept waiting for a seqno 0 that
will never come."""
from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from cursor_byok.gateway import sweep_seconds
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, heartbeat_message, run_request
from tests.harness.server import ServerConfig, ServerProcess, one_model_config

from .test_crash_recovery import wait_until
from .test_journal import journal_rows, read_call

MODEL = "byok-lifetime"
TRANSPORT_IDLE = 0.5  # far shorter than the IDE takes over the tool below
# The wait for a seqno 0 that never comes: long, so an append kept waiting would show as a
# deadline in these tests rather than pass unnoticed.
SEQNO0_WAIT = 30.0


@pytest.fixture
def config(tmp_path: Path, provider: FakeProviderServer) -> ServerConfig:
    extra = {"transport_idle_seconds": TRANSPORT_IDLE, "blob_ack_timeout_seconds": 1.0}
    return one_model_config(tmp_path / "data", provider.url, MODEL, runsse_wait_seconds=SEQNO0_WAIT, extra_server=extra)


async def test_a_run_waiting_on_its_ide_keeps_its_transport(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    """The IDE takes longer over a Read than the transport idle time (and a sweep passes): its
    result is still taken and the turn ends with its answer."""
    (workspace / "a.txt").write_text("ALPHA-CONTENT\n")
    provider.enqueue(OPENAI_CHAT.tool_calls([read_call("call_a", workspace / "a.txt")]), OPENAI_CHAT.text(["read it"]))
    with ServerProcess(config) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        ide.hold_execs = True
        try:
            rid, log = uuid.uuid4().hex, StreamLog()
            reader = asyncio.create_task(ide.stream(rid, log))
            first = run_request("read it", model=MODEL, conversation_id=uuid.uuid4().hex)
            assert (await ide.append(rid, first)).status_code == 200
            await wait_until(lambda: len(ide.held) == 1)
            # The IDE is slow: the idle time passes twice over, and sweeps run meanwhile.
            await asyncio.sleep(sweep_seconds(server.settings().server) + 2 * TRANSPORT_IDLE)
            _, exec_msg = ide.held.pop()
            for reply in ide.execute(exec_msg):
                resp = await asyncio.wait_for(ide.append(rid, reply), SEQNO0_WAIT / 2)
                assert resp.status_code == 200, resp.text
            await asyncio.wait_for(reader, 20)
        finally:
            await ide.close()
    assert log.terminals == 1 and log.terminal is None and log.text.endswith("read it")


async def test_an_append_for_a_stream_that_ended_before_a_restart_is_told_at_once(
    config: ServerConfig, provider: FakeProviderServer, workspace: Path
) -> None:
    """The IDE sends something late for a turn that ended before the server restarted: the
    request id's durable binding says its stream is gone, and the append gets `not_found` (404)
    at once."""
    provider.enqueue(OPENAI_CHAT.text(["done"]))
    server = ServerProcess(config).start()
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        rid = uuid.uuid4().hex
        log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex), request_id=rid)
        assert log.terminal is None and log.text == "done"
        # Ended before the restart: its end is stored (the journal forgot the stream). Killed
        # sooner, the restart would rightly resume the stream from the journal.
        await wait_until(lambda: not journal_rows(config, rid))
        server.kill()
        server.start()
        await ide.reconnect()
        resp = await asyncio.wait_for(ide.append(rid, heartbeat_message(), seqno=5), SEQNO0_WAIT / 2)
    finally:
        await ide.close()
        server.stop()
    assert resp.status_code == 404, resp.text
    body = resp.json()
    assert body["code"] == "not_found" and rid in body["message"], body


async def test_an_append_for_an_ended_stream_whose_transport_expired_is_told_at_once(
    config: ServerConfig, provider: FakeProviderServer, workspace: Path
) -> None:
    provider.enqueue(OPENAI_CHAT.text(["done"]))
    with ServerProcess(config) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        try:
            rid = uuid.uuid4().hex
            log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex), request_id=rid)
            assert log.terminal is None and log.text == "done"
            await asyncio.sleep(sweep_seconds(server.settings().server) + 2 * TRANSPORT_IDLE)  # its transport expires
            resp = await asyncio.wait_for(ide.append(rid, heartbeat_message(), seqno=5), SEQNO0_WAIT / 2)
        finally:
            await ide.close()
    assert resp.status_code == 404 and resp.json()["code"] == "not_found", resp.text
