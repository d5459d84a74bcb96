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
from tests.harness.server import ServerConfig, ServerProcess, one_model_config
from tests.harness.stored import stored_rows

from .test_crash_recovery import resume_request, wait_until

MODEL = "byok-crash"  # the model resume_request asks for


@pytest.fixture
def config(tmp_path: Path, provider: FakeProviderServer, store_url: str) -> ServerConfig:
    """On both store backends: the journal keeps what was acknowledged across a crash on PostgreSQL too."""
    extra = {"blob_ack_timeout_seconds": 1.0, "recovery_wait_seconds": RECOVERY_WAIT}
    return one_model_config(tmp_path / "data", provider.url, MODEL, extra_server=extra, store_url=store_url)


RECOVERY_WAIT = 3.0  # how long a resumed run waits for the IDE to come back


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


async def two_reads_held(server: ServerProcess, provider: FakeProviderServer, workspace: Path, conv: str) -> tuple[ScriptedIDE, str, dict[str, pb.ExecServerMessage], asyncio.Task[StreamLog]]:
    """A turn whose model reads a.txt and b.txt in one batch; the IDE holds both exec requests."""
    (workspace / "a.txt").write_text("ALPHA-CONTENT\n")
    (workspace / "b.txt").write_text("BRAVO-CONTENT\n")
    ide = ScriptedIDE(server.base_url, workspace)
    ide.hold_execs = True
    provider.enqueue(OPENAI_CHAT.tool_calls([read_call("call_a", workspace / "a.txt"), read_call("call_b", workspace / "b.txt")]))
    rid = uuid.uuid4().hex
    reader = asyncio.create_task(ide.stream(rid, StreamLog()))
    assert (await ide.append(rid, run_request("read both", model=MODEL, conversation_id=conv, message_id="m1"))).status_code == 200
    await wait_until(lambda: len(ide.held) == 2)
    return ide, rid, {ex.exec_id: ex for _, ex in ide.held}, reader


async def test_a_tool_result_acknowledged_just_before_a_crash_is_applied(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    """Two Reads in one batch: the IDE answers the first (200), the server dies before the second;
    after the restart the first call completes with the IDE's result, not "did not finish"."""
    server = ServerProcess(config).start()
    conv = uuid.uuid4().hex
    ide, rid, by_call, reader = await two_reads_held(server, provider, workspace, conv)
    try:
        for reply in ide.execute(by_call["call_a"]):
            assert (await ide.append(rid, reply)).status_code == 200  # acknowledged
        server.kill()
        assert (await asyncio.wait_for(reader, 10)).terminals == 0

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


async def test_an_append_resent_after_the_restart_fills_the_gap_and_what_was_held_follows(
    config: ServerConfig, provider: FakeProviderServer, workspace: Path
) -> None:
    """The IDE keeps several appends in flight: the second result got its 200 (held, waiting for the
    first), the first got none before the crash. After the restart the IDE sends the first again:
    both apply, in seqno order."""
    server = ServerProcess(config).start()
    conv = uuid.uuid4().hex
    ide, rid, by_call, reader = await two_reads_held(server, provider, workspace, conv)
    try:
        first = ide.seqnos[rid]
        [reply_a], [reply_b] = ide.execute(by_call["call_a"]), ide.execute(by_call["call_b"])
        assert (await ide.append(rid, reply_b, seqno=first + 1)).status_code == 200  # journaled, held behind the gap
        server.kill()
        await asyncio.wait_for(reader, 10)
        server.start()
        provider.enqueue(OPENAI_CHAT.text(["read them both"]))
        await ide.reconnect()
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(rid, log))
        assert (await ide.append(rid, reply_a, seqno=first)).status_code == 200  # the one that got no 200
        assert (await ide.append(rid, reply_b, seqno=first + 1)).status_code == 200  # a duplicate now: no effect
        await asyncio.wait_for(reader, 20)
    finally:
        await ide.close()
        server.stop()
    assert log.terminal is None and log.text == "read them both"
    results = tool_results(provider)
    assert "ALPHA-CONTENT" in results["call_a"] and "BRAVO-CONTENT" in results["call_b"], results
    assert sum(m["role"] == "tool" for m in provider.requests[-1].json()["messages"]) == 2  # applied once each


async def test_a_turn_retried_elsewhere_after_the_restart_sees_what_was_acknowledged(
    config: ServerConfig, provider: FakeProviderServer, workspace: Path
) -> None:
    """The IDE does not come back to the cut stream: it retries the turn on a new request id. The
    acknowledged result is in the history the retry continues from; the result the IDE never sent
    is answered as unfinished; the model is asked once, on the retry's stream."""
    server = ServerProcess(config).start()
    conv = uuid.uuid4().hex
    ide, rid, by_call, reader = await two_reads_held(server, provider, workspace, conv)
    try:
        for reply in ide.execute(by_call["call_a"]):
            assert (await ide.append(rid, reply)).status_code == 200
        server.kill()
        await asyncio.wait_for(reader, 10)
        server.start()
        provider.enqueue(OPENAI_CHAT.text(["retried"]))
        calls_before = len(provider.requests)
        await ide.reconnect()
        retried = await ide.turn(resume_request(conv))
        late = StreamLog()
        await asyncio.wait_for(ide.stream(rid, late), 10)  # the cut stream, read late: it says why it ended
    finally:
        await ide.close()
        server.stop()
    assert retried.terminal is None and retried.text == "retried"
    assert len(provider.requests) == calls_before + 1
    results = tool_results(provider)
    assert "ALPHA-CONTENT" in results["call_a"] and "did not finish" in results["call_b"], results
    assert late.terminal is not None and late.terminal.code == "unavailable" and "send it again" in late.terminal.message


async def test_a_cut_turn_waits_for_its_ide_and_is_given_up_when_it_does_not_come(
    config: ServerConfig, provider: FakeProviderServer, workspace: Path
) -> None:
    """After a restart nothing calls the model on its own: a turn cut while modeling goes on only
    once the IDE reads its stream again; one nobody comes back for ends after the recovery wait,
    and the IDE that reads it then is told to send it again."""
    server = ServerProcess(config).start()
    conv = uuid.uuid4().hex
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        for rid_name, text in (("waited", "first question"), ("abandoned", "second question")):
            slow = OPENAI_CHAT.text(["zulu "] * 50)
            slow.chunk_delay = 0.05
            provider.enqueue(slow)
            rid = uuid.uuid4().hex
            log = StreamLog()
            reader = asyncio.create_task(ide.stream(rid, log))
            assert (await ide.append(rid, run_request(text, model=MODEL, conversation_id=conv, message_id=rid_name))).status_code == 200
            await wait_until(lambda: "zulu" in log.text)
            server.kill()
            await asyncio.wait_for(reader, 10)
            server.start()
            await ide.reconnect()
            calls = len(provider.requests)
            if rid_name == "waited":
                await asyncio.sleep(RECOVERY_WAIT / 3)
                assert len(provider.requests) == calls  # not without the IDE
                provider.enqueue(OPENAI_CHAT.text(["first answer"]))
                resumed = StreamLog()
                await asyncio.wait_for(ide.stream(rid, resumed), 20)
                assert resumed.terminal is None and resumed.text == "first answer"
            else:
                await asyncio.sleep(RECOVERY_WAIT + 1)
                late = StreamLog()
                await asyncio.wait_for(ide.stream(rid, late), 10)
                assert len(provider.requests) == calls
                assert late.terminal is not None and late.terminal.code == "unavailable", late.terminal
    finally:
        await ide.close()
        server.stop()


async def test_a_graceful_stop_keeps_what_a_cut_batch_was_sent(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    """SIGTERM ends the open stream with `unavailable`, as before; the result the IDE had sent is
    still applied at the next start."""
    server = ServerProcess(config).start()
    conv = uuid.uuid4().hex
    ide, rid, by_call, reader = await two_reads_held(server, provider, workspace, conv)
    try:
        for reply in ide.execute(by_call["call_a"]):
            assert (await ide.append(rid, reply)).status_code == 200
        assert server.stop() == 0
        cut = await asyncio.wait_for(reader, 10)
        assert cut.terminal is not None and cut.terminal.code == "unavailable"
        server.start()
        provider.enqueue(OPENAI_CHAT.text(["read them both"]))
        resumed = await after_restart(ide, conv, rid, ide.execute(by_call["call_b"]))
    finally:
        await ide.close()
        server.stop()
    assert resumed.terminal is None and resumed.text == "read them both"
    results = tool_results(provider)
    assert "ALPHA-CONTENT" in results["call_a"] and "BRAVO-CONTENT" in results["call_b"], results


def journal_rows(config: ServerConfig, request_id: str) -> list[tuple[int, bool]]:
    """(seqno, message kept) of the request id's journaled appends, as the database holds them now."""
    rows = stored_rows(config, "SELECT seqno, message IS NOT NULL FROM inbound_appends WHERE request_id = ? ORDER BY seqno", (request_id,))
    return [(seqno, bool(kept)) for seqno, kept in rows]


async def test_the_journal_holds_only_what_is_in_flight(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    """Rows go once their effect is stored: through the last committed tool round while the run
    goes on (its run request and where the stream stood are kept), all of them when it ends."""
    (workspace / "a.txt").write_text("ALPHA\n")
    with ServerProcess(config) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        ide.hold_execs = True
        provider.enqueue(*[OPENAI_CHAT.tool_calls([read_call(f"call_{i}", workspace / "a.txt")]) for i in range(3)], OPENAI_CHAT.text(["read thrice"]))
        seen: list[list[tuple[int, bool]]] = []

        async def rounds(rid: str, log: StreamLog) -> None:
            for i in range(3):
                await wait_until(lambda: len(ide.held) == 1)
                seen.append(journal_rows(config, rid))
                await ide.release_held()

        try:
            log = await ide.turn(run_request("read it thrice", model=MODEL, conversation_id=uuid.uuid4().hex), during=rounds)
            rid = next(iter(ide.seqnos))
            await wait_until(lambda: journal_rows(config, rid) == [])  # the stream's end is stored, its rows gone
            # Replies that come after the end (a blob acked late, a result sent again) change nothing: no
            # row (a journaled append is answered once its row is stored: none can come after its 200).
            late = [m for _, _, m in ide.acked if m.HasField("kv_client_message") or m.HasField("exec_client_message")][-2:]
            for message in late:
                assert (await ide.append(rid, message)).status_code == 200
            after_late = journal_rows(config, rid)
        finally:
            await ide.close()
    assert log.terminal is None and log.text == "read thrice"
    # The run request and what came before round 1's result (blob acks of its checkpoints): nothing settled yet.
    assert seen[0][0] == (0, True) and all(kept for _, kept in seen[0])
    marks = [[seqno for seqno, kept in rows if not kept] for rows in seen[1:]]
    assert all(rows[0] == (0, True) for rows in seen)  # the run request stays while the run goes on
    assert len(marks[0]) == len(marks[1]) == 1 and marks[1][0] > marks[0][0]  # settled through the last round
    assert all(seqno > marks[1][0] for seqno, kept in seen[2][1:] if kept)  # only what came after is kept
    assert after_late == []
