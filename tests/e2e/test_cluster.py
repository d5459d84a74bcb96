"""Several `cursor-byok serve` instances on one PostgreSQL database (issue 37): a conversation has one
owner at a time (a lease in the database); requests that land on another instance reach the owner
through the database (LISTEN/NOTIFY), and an owner killed mid-turn is taken over once its lease ends.

Each test runs two real servers on a fresh database of the session's throwaway cluster, a fake
provider, and the scripted IDE (behind a deterministic balancer where a turn is split)."""
from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from cursor_byok.protocol import RUN_SSE_PATH
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.e2e.test_crash_recovery import assert_history_once, resume_request, texts, wait_until
from tests.harness.balancer import balanced_client, by_path
from tests.harness.ide import ScriptedIDE, StreamLog, run_request
from tests.harness.server import ServerConfig, ServerProcess, one_model_config

MODEL = "byok-cluster"
LEASE_SECONDS = 1.0  # short, so a takeover after a kill comes soon (the test waits for its turn, not a time)


def instance_config(data_dir: Path, provider: FakeProviderServer, store_url: str) -> ServerConfig:
    return one_model_config(
        data_dir, provider.url, MODEL,
        runsse_wait_seconds=5.0,
        extra_toml=f'[store]\nurl = "{store_url}"\n\n[cluster]\nlease_seconds = {LEASE_SECONDS}\n',
    )


def running(configs: list[ServerConfig]) -> Iterator[list[ServerProcess]]:
    """The instances started, yielded, and stopped again (a fixture's body)."""
    servers = [ServerProcess(config) for config in configs]
    for server in servers:
        server.start()
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def pair(tmp_path: Path, provider: FakeProviderServer, postgres_url: str) -> Iterator[list[ServerProcess]]:
    yield from running([instance_config(tmp_path / name, provider, postgres_url) for name in ("a", "b")])


def ended_well(log: StreamLog) -> bool:
    return log.terminals == 1 and log.terminal is None and "turn_ended" in log.kinds()


@pytest.mark.parametrize("transport", ["sse", "run"])
async def test_a_conversation_continues_on_the_other_instance_and_back(pair, provider: FakeProviderServer, workspace: Path, transport: str) -> None:
    """Turn 1 on A, turn 2 on B, turn 3 on A again (RunSSE + BidiAppend, or one HTTP/2 Run stream a
    turn): each turn's model call holds every earlier turn once (B read what A saved; A does not
    answer from what it held before B's turn)."""
    a, b = pair
    conv = uuid.uuid4().hex
    ide_a, ide_b = (ScriptedIDE(server.base_url, workspace, transport=transport) for server in (a, b))
    try:
        for ide, question, answer in ((ide_a, "alpha question", "bravo answer"), (ide_b, "charlie question", "delta answer"),
                                      (ide_a, "echo question", "foxtrot answer")):
            provider.enqueue(OPENAI_CHAT.text([answer]))
            log = await ide.turn(run_request(question, model=MODEL, conversation_id=conv, message_id=question))
            assert ended_well(log), (log.kinds(), log.terminal)
            assert log.text == answer
    finally:
        await ide_a.close()
        await ide_b.close()
    assert_history_once(provider.requests[1].json(), "alpha question", "bravo answer", "charlie question")
    assert_history_once(provider.requests[2].json(), "alpha question", "bravo answer", "charlie question", "delta answer", "echo question")


async def test_a_turn_split_across_instances_completes(pair, provider: FakeProviderServer, workspace: Path) -> None:
    """No affinity: the RunSSE on A, every BidiAppend on B (the run request, the tool's result and
    the blob acks). The turn runs where its appends went and its output reaches A's stream; a
    resend of an acknowledged append is answered as a duplicate, with no effect."""
    a, b = pair
    (workspace / "x.txt").write_text("kilo content\n")
    provider.enqueue(OPENAI_CHAT.tool_calls([CallSpec("call_x", "Read", [f'{{"path": "{workspace}/x.txt"}}'])]))
    provider.enqueue(OPENAI_CHAT.text(["lima answer"]))
    conv = uuid.uuid4().hex
    ide = ScriptedIDE(a.base_url, workspace)
    await ide.client.aclose()
    ide.client = balanced_client(by_path(run_sse=a.base_url, appends=b.base_url))
    try:
        rid = uuid.uuid4().hex
        log = await ide.turn(run_request("kilo question", model=MODEL, conversation_id=conv, message_id="m1"), request_id=rid)
        assert ended_well(log), (log.kinds(), log.terminal)
        assert log.text == "lima answer"
        assert [ex.WhichOneof("message") for ex in ide.exec_log].count("read_args") == 1
        first_rid, first_seqno, first = ide.acked[1]  # a reply after the run request, sent again
        again = await ide.append(first_rid, first, seqno=first_seqno)
        assert again.status_code == 200
    finally:
        await ide.close()
    assert len(provider.requests) == 2
    tool_results = [m for m in provider.requests[1].json()["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_results] == ["call_x"] and "kilo content" in tool_results[0]["content"]


async def test_appends_through_both_instances_keep_their_order_and_are_taken_once(pair, provider: FakeProviderServer, workspace: Path) -> None:
    """Two Reads in one batch; the IDE answers the second first, through A (not the owner: held in
    the owner's reorder buffer behind the gap, answered once journaled), then the first through B,
    then the second again through A: both results reach the model in order, each once."""
    a, b = pair
    (workspace / "a.txt").write_text("ALPHA-CONTENT\n")
    (workspace / "b.txt").write_text("BRAVO-CONTENT\n")
    reads = [CallSpec(call, "Read", [f'{{"path": "{workspace / name}"}}']) for call, name in (("call_a", "a.txt"), ("call_b", "b.txt"))]
    provider.enqueue(OPENAI_CHAT.tool_calls(reads))
    provider.enqueue(OPENAI_CHAT.text(["read them both"]))
    appends_to = {"url": b.base_url}
    ide = ScriptedIDE(a.base_url, workspace)
    ide.hold_execs = True
    await ide.client.aclose()
    ide.client = balanced_client(lambda request: a.base_url if request.url.path == RUN_SSE_PATH else appends_to["url"])
    conv = uuid.uuid4().hex
    try:
        rid, log = uuid.uuid4().hex, StreamLog()
        reader = asyncio.create_task(ide.stream(rid, log))  # on A; the run request makes B the owner
        assert (await ide.append(rid, run_request("read both", model=MODEL, conversation_id=conv, message_id="m1"))).status_code == 200
        await wait_until(lambda: len(ide.held) == 2)
        by_call = {ex.exec_id: ex for _, ex in ide.held}
        [reply_a], [reply_b] = ide.execute(by_call["call_a"]), ide.execute(by_call["call_b"])
        first = ide.seqnos[rid]
        appends_to["url"] = a.base_url
        assert (await ide.append(rid, reply_b, seqno=first + 1)).status_code == 200
        appends_to["url"] = b.base_url
        assert (await ide.append(rid, reply_a, seqno=first)).status_code == 200
        appends_to["url"] = a.base_url
        assert (await ide.append(rid, reply_b, seqno=first + 1)).status_code == 200  # a duplicate now: no effect
        await asyncio.wait_for(reader, 30)
    finally:
        await ide.close()
    assert ended_well(log) and log.text == "read them both", (log.kinds(), log.terminal)
    messages = provider.requests[-1].json()["messages"]
    tools = [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"]
    assert [call for call, _ in tools] == ["call_a", "call_b"], tools
    assert "ALPHA-CONTENT" in tools[0][1] and "BRAVO-CONTENT" in tools[1][1]
    assert len(provider.requests) == 2


async def test_instances_whose_database_connections_were_dropped_still_split_a_turn(
    pair, provider: FakeProviderServer, workspace: Path, postgres_url: str
) -> None:
    """The database ends the cluster connections of both instances (an idle-session timeout, a
    proxy between them restarting): they open them again, and a turn split across them completes as
    before."""
    a, b = pair
    provider.enqueue(OPENAI_CHAT.text(["mike answer"]))
    provider.enqueue(OPENAI_CHAT.text(["november answer"]))
    ide = ScriptedIDE(a.base_url, workspace)
    await ide.client.aclose()
    ide.client = balanced_client(by_path(run_sse=a.base_url, appends=b.base_url))
    conv = uuid.uuid4().hex
    try:
        assert ended_well(await ide.turn(run_request("mike question", model=MODEL, conversation_id=conv, message_id="m1")))
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            ended = admin.execute(TERMINATE_CLUSTER).fetchall()
            assert len(ended) == 4  # each instance's listener and talker
            await wait_until(lambda: admin.execute(LISTENERS).fetchone()[0] == 2)  # both hear again
        log = await ide.turn(run_request("november question", model=MODEL, conversation_id=conv, message_id="m2"))
    finally:
        await ide.close()
    assert ended_well(log), (log.kinds(), log.terminal)
    assert log.text == "november answer"
    assert_history_once(provider.requests[-1].json(), "mike question", "mike answer", "november question")


TERMINATE_CLUSTER = """
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE 'cursor-byok cluster %'
"""
LISTENERS = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE 'cursor-byok cluster %' AND query = 'LISTEN cursor_byok_all'
"""


async def test_the_owner_killed_while_modeling_is_taken_over(pair, provider: FakeProviderServer, workspace: Path) -> None:
    """B owns the conversation and is SIGKILLed while the model streams turn 2. The IDE's retry
    goes to A, which takes the conversation over once B's lease ends: the turn goes on from what B
    saved, nothing it acknowledged lost or doubled, nothing unfinished kept."""
    a, b = pair
    conv = uuid.uuid4().hex
    ide = ScriptedIDE(b.base_url, workspace)
    ide.tolerate_crashes = True
    try:
        provider.enqueue(OPENAI_CHAT.text(["bravo answer"]))
        assert ended_well(await ide.turn(run_request("alpha question", model=MODEL, conversation_id=conv, message_id="m1")))
        slow = OPENAI_CHAT.text(["zulu "] * 200)
        slow.chunk_delay = 0.05
        provider.enqueue(slow)
        rid, log = uuid.uuid4().hex, StreamLog()
        reader = asyncio.create_task(ide.stream(rid, log))
        assert (await ide.append(rid, run_request("charlie question", model=MODEL, conversation_id=conv, message_id="m2"))).status_code == 200
        await wait_until(lambda: "zulu" in log.text)  # the model streams on B
        b.kill()
        await asyncio.wait_for(reader, 10)
        assert log.terminals == 0  # the stream died with B
        await ide.reconnect(a.base_url)  # the balancer's retry lands on A
        provider.enqueue(OPENAI_CHAT.text(["resumed fine"]))
        resumed = await ide.turn(resume_request(conv, MODEL), timeout=30)
    finally:
        await ide.close()
    assert resumed.terminals == 1 and resumed.terminal is None and "resumed fine" in resumed.text
    body = provider.requests[-1].json()
    assert_history_once(body, "alpha question", "bravo answer", "charlie question")
    assert not any("zulu" in t for t in texts(body))  # an unfinished stream is not history


async def test_a_tool_result_the_killed_owner_acknowledged_is_applied_by_the_other(pair, provider: FakeProviderServer, workspace: Path) -> None:
    """Two Reads in one batch on B; the IDE answers the first (B's 200: journaled), then B is
    SIGKILLed. The IDE's retry — RunSSE on the same request id and the second result — lands on A,
    which takes the cut stream over from the journal: both results reach the model, the first as
    the IDE sent it (not "did not finish"), and the model is asked once more, not twice."""
    a, b = pair
    (workspace / "a.txt").write_text("ALPHA-CONTENT\n")
    (workspace / "b.txt").write_text("BRAVO-CONTENT\n")
    conv = uuid.uuid4().hex
    ide = ScriptedIDE(b.base_url, workspace)
    ide.hold_execs = True
    reads = [CallSpec(call, "Read", [f'{{"path": "{workspace / name}"}}']) for call, name in (("call_a", "a.txt"), ("call_b", "b.txt"))]
    provider.enqueue(OPENAI_CHAT.tool_calls(reads))
    try:
        rid = uuid.uuid4().hex
        reader = asyncio.create_task(ide.stream(rid, StreamLog()))
        assert (await ide.append(rid, run_request("read both", model=MODEL, conversation_id=conv, message_id="m1"))).status_code == 200
        await wait_until(lambda: len(ide.held) == 2)
        by_call = {ex.exec_id: ex for _, ex in ide.held}
        for reply in ide.execute(by_call["call_a"]):
            assert (await ide.append(rid, reply)).status_code == 200  # acknowledged by B
        b.kill()
        assert (await asyncio.wait_for(reader, 10)).terminals == 0
        provider.enqueue(OPENAI_CHAT.text(["read them both"]))
        calls_before = len(provider.requests)
        await ide.reconnect(a.base_url)
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(rid, log))
        for reply in ide.execute(by_call["call_b"]):
            assert (await ide.append(rid, reply)).status_code == 200
        await asyncio.wait_for(reader, 30)
    finally:
        await ide.close()
    assert log.terminals == 1 and log.terminal is None and log.text == "read them both"
    assert len(provider.requests) == calls_before + 1
    results = {m["tool_call_id"]: m["content"] for m in provider.requests[-1].json()["messages"] if m["role"] == "tool"}
    assert "ALPHA-CONTENT" in results["call_a"] and "BRAVO-CONTENT" in results["call_b"], results
