"""Refused input is never kept: an append the server refuses leaves nothing behind, so no later
start replays it, and an append that reuses a seqno with other content is refused by name.

Each test holds a run open (the IDE holds its exec request: the stream is live, so what is
appended to it would be journaled), sends what the server must refuse, stops the real server
(Ctrl-C or a kill) and starts it again on the same data dir: it must serve a new turn."""
from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, heartbeat_message, run_request
from tests.harness.server import ServerConfig, ServerProcess, one_model_config
from tests.harness.stored import change_stored, stored_rows

from .restart_fuzz import stop
from .test_crash_recovery import wait_until
from .test_journal import read_call

MODEL = "byok-crash"


@pytest.fixture
def config(tmp_path: Path, provider: FakeProviderServer, store_url: str) -> ServerConfig:
    """On both store backends: refused input is never kept, and a start never fails because of stored data."""
    return one_model_config(tmp_path / "data", provider.url, MODEL, extra_server={"recovery_wait_seconds": 1.0}, store_url=store_url)


async def a_held_read(server: ServerProcess, provider: FakeProviderServer, workspace: Path) -> tuple[ScriptedIDE, str, pb.ExecServerMessage, asyncio.Task[StreamLog]]:
    """A turn whose model reads a file; the IDE holds the exec request (the run stays live)."""
    (workspace / "a.txt").write_text("ALPHA\n")
    ide = ScriptedIDE(server.base_url, workspace)
    ide.hold_execs = True
    provider.enqueue(OPENAI_CHAT.tool_calls([read_call("call_a", workspace / "a.txt")]))
    rid = uuid.uuid4().hex
    reader = asyncio.create_task(ide.stream(rid, StreamLog()))
    ok = await ide.append(rid, run_request("read it", model=MODEL, conversation_id=uuid.uuid4().hex, message_id="m1"))
    assert ok.status_code == 200
    await wait_until(lambda: len(ide.held) == 1)
    return ide, rid, ide.held[0][1], reader


async def a_new_turn_is_served(server: ServerProcess, provider: FakeProviderServer, workspace: Path) -> None:
    provider.enqueue(OPENAI_CHAT.text(["served again"]))
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        log = await ide.turn(run_request("hello again", model=MODEL, conversation_id=uuid.uuid4().hex))
    finally:
        await ide.close()
    assert log.terminal is None and log.text == "served again"


@pytest.mark.parametrize("how", ["sigint", "sigkill"])
async def test_an_append_far_past_the_window_is_refused_and_never_replayed(
    config: ServerConfig, provider: FakeProviderServer, workspace: Path, how: str
) -> None:
    server = ServerProcess(config).start()
    ide, rid, _, reader = await a_held_read(server, provider, workspace)
    try:
        far = ide.seqnos[rid] + 200
        refused = await ide.append(rid, heartbeat_message(), seqno=far)
        assert refused.status_code == 429 and refused.json()["code"] == "resource_exhausted", refused.text
        stop(server, how)
        await asyncio.wait_for(reader, 10)
        server.start()  # a refused append must not keep any later start from serving
        await a_new_turn_is_served(server, provider, workspace)
    finally:
        await ide.close()
        server.stop()
    assert f"seqno {far}" not in server.log()  # nothing refused was taken again


async def test_a_seqno_reused_with_other_content_is_refused_naming_it(
    config: ServerConfig, provider: FakeProviderServer, workspace: Path
) -> None:
    """Taken (delivered) or held behind a gap: the same seqno with other content is a client bug it
    must hear of; the same append again stays an idempotent resend."""
    server = ServerProcess(config).start()
    ide, rid, _, reader = await a_held_read(server, provider, workspace)
    try:
        taken = ide.seqnos[rid]
        assert (await ide.append(rid, heartbeat_message(), seqno=taken)).status_code == 200
        held = taken + 2  # behind a gap at taken + 1
        assert (await ide.append(rid, heartbeat_message(), seqno=held)).status_code == 200
        other = pb.AgentClientMessage()
        other.conversation_action.cancel_action.SetInParent()
        for seqno in (taken, held):
            reused = await ide.append(rid, other, seqno=seqno)
            assert reused.status_code == 400, reused.text
            assert reused.json()["code"] == "invalid_argument" and f"seqno {seqno}" in reused.json()["message"], reused.text
            assert (await ide.append(rid, heartbeat_message(), seqno=seqno)).status_code == 200  # a resend
        assert not reader.done()  # the refused cancel was not applied: the run goes on
    finally:
        await ide.close()
        server.stop()


def damage_history(config: ServerConfig) -> None:
    """A stored history row this version cannot read (written by hand, or by a newer version)."""
    change_stored(
        config,
        sqlite=["DROP TRIGGER history_events_no_update", "UPDATE history_events SET kind = 'from-the-future'"],
        postgres=["DROP TRIGGER history_events_no_update ON history_events", "UPDATE history_events SET kind = 'from-the-future'"],
    )


@pytest.mark.parametrize("how", ["sigint", "sigkill"])
async def test_a_journaled_stream_that_cannot_be_resumed_is_quarantined_and_the_server_starts(
    config: ServerConfig, provider: FakeProviderServer, workspace: Path, how: str
) -> None:
    server = ServerProcess(config).start()
    ide, rid, _, reader = await a_held_read(server, provider, workspace)
    try:
        stop(server, how)
        await asyncio.wait_for(reader, 10)
        damage_history(config)
        server.start()
        await a_new_turn_is_served(server, provider, workspace)
        doctor = server.run_to_exit("doctor")
        stats = server.run_to_exit("db", "stats")
    finally:
        await ide.close()
        server.stop()
    warnings = [line for line in server.log().splitlines() if "quarantined" in line and " WARNING " in line]
    assert len(warnings) == 1 and rid in warnings[0], server.log()
    [(named,)] = stored_rows(config, "SELECT DISTINCT conversation_id FROM quarantined_appends WHERE request_id = ?", (rid,))
    assert stored_rows(config, "SELECT COUNT(*) FROM inbound_appends WHERE request_id = ?", (rid,)) == [(0,)]
    assert named and named in warnings[0]
    assert named in doctor.stdout and "quarantined" in doctor.stdout, doctor.stdout
    assert named in stats.stdout and "quarantined" in stats.stdout, stats.stdout
