"""Identity and transport characterization (seed stage 1), against the real server over loopback."""
from __future__ import annotations

import asyncio
import random
import uuid

import httpx

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, Reply
from tests.harness.ide import ScriptedIDE, StreamLog, append_body, cancel_message, gauge_reaches, heartbeat_message, run_request

from .conftest import MODEL, both_transports


def slow_text(pieces: list[str], delay: float = 0.08) -> Reply:
    reply = OPENAI_CHAT.text(pieces)
    reply.chunk_delay = delay
    return reply


async def test_same_request_same_conversation_same_event_is_idempotent(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(OPENAI_CHAT.text(["Hello", " world"]))
    rid, conv = uuid.uuid4().hex, uuid.uuid4().hex
    msg = run_request("hi", model=MODEL, conversation_id=conv)
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    assert (await ide.append(rid, msg, seqno=0)).status_code == 200
    assert (await ide.append(rid, msg, seqno=0)).status_code == 200  # the same event again
    await asyncio.wait_for(reader, 20)
    assert log.text == "Hello world"
    assert log.terminals == 1 and log.terminal is None
    assert len(provider.requests) == 1


async def test_a_different_seqno0_for_the_same_run_is_refused(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    """Only the very same seqno-0 event may come again; another one for the same request and
    Cursor run is refused, and the first run is not disturbed."""
    provider.enqueue(slow_text(["Hello", " world"]))
    rid, conv = uuid.uuid4().hex, uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    first = run_request("one", model=MODEL, conversation_id=conv, run_id="cursor-run-1")
    assert (await ide.append(rid, first, seqno=0)).status_code == 200
    other = run_request("two", model=MODEL, conversation_id=conv, run_id="cursor-run-1")
    resp = await ide.append(rid, other, seqno=0)
    assert resp.status_code == 400 and resp.json()["code"] == "failed_precondition"
    await asyncio.wait_for(reader, 20)
    assert log.text == "Hello world" and log.terminals == 1 and log.terminal is None
    assert len(provider.requests) == 1


@both_transports
async def test_same_request_same_conversation_new_run_is_new_generation(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(OPENAI_CHAT.text(["first"]), OPENAI_CHAT.text(["second"]))
    rid, conv = uuid.uuid4().hex, uuid.uuid4().hex
    first = await ide.turn(request_id=rid, message=run_request("one", model=MODEL, conversation_id=conv))
    assert first.text == "first" and first.terminal is None
    ide.seqnos[rid] = 0  # the IDE starts a new transport generation at seqno 0
    second = await ide.turn(request_id=rid, message=run_request("two", model=MODEL, conversation_id=conv))
    assert second.text == "second" and second.terminals == 1 and second.terminal is None
    # Same conversation: the second provider request carries the first turn.
    body = provider.requests[1].json()
    texts = [m.get("content") for m in body["messages"]]
    assert any("one" in str(t) for t in texts) and any("first" in str(t) for t in texts)


async def test_same_request_different_conversation_conflicts(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(OPENAI_CHAT.text(["ok"]))
    rid = uuid.uuid4().hex
    await ide.turn(request_id=rid, message=run_request("one", model=MODEL, conversation_id="conv-a"))
    resp = await ide.append(rid, run_request("two", model=MODEL, conversation_id="conv-b"), seqno=0)
    assert resp.status_code == 409
    assert resp.json()["code"] == "already_exists"
    await asyncio.sleep(0.2)
    assert len(provider.requests) == 1  # nothing routed


async def test_run_request_without_conversation_id_needs_a_binding(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    resp = await ide.append(uuid.uuid4().hex, run_request("x", model=MODEL, conversation_id=None), seqno=0)
    assert resp.status_code == 400 and resp.json()["code"] == "invalid_argument"
    assert provider.requests == []


@both_transports
async def test_expected_run_id_is_compared_with_the_wire_run_id(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(slow_text(["a", "b", "c", "d", "e", "f"], 0.15), OPENAI_CHAT.text(["after injection"]))
    rid, conv, run_id = uuid.uuid4().hex, uuid.uuid4().hex, "cursor-run-1"
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("start", model=MODEL, conversation_id=conv, run_id=run_id))
    while not provider.requests:  # waits without blocking the loop (a Run stream sends from it)
        await asyncio.sleep(0.02)
    stale = pb.AgentClientMessage()
    ica = stale.conversation_action.inject_context_action
    ica.injection_id = "inj-stale"
    ica.expected_run_id = rid  # the request id is NOT the run id
    ica.system_context.content = "ignored"
    await ide.append(rid, stale)
    good = pb.AgentClientMessage()
    ica = good.conversation_action.inject_context_action
    ica.injection_id = "inj-good"
    ica.expected_run_id = run_id
    ica.system_context.producer = "test"
    ica.system_context.content = "remember the injection"
    await ide.append(rid, good)
    await asyncio.wait_for(reader, 20)
    states = {(s.injection_id, s.state.WhichOneof("state")) for s in log.updates("context_injection_state")}
    assert ("inj-stale", "rejected") in states
    assert ("inj-good", "queued") in states and ("inj-good", "delivered") in states
    assert log.terminal is None and log.terminals == 1
    assert "remember the injection" in provider.requests[-1].body.decode()


@both_transports
async def test_runsse_first_waits_for_the_first_append(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(OPENAI_CHAT.text(["early bird"]))
    rid = uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    if ide.transport == "sse":  # a Run stream carries its appends itself: there is no "before"
        await gauge_reaches(ide.client, "cursor_byok_runsse_waiting", 1)  # RunSSE is waiting before any append exists
    await ide.append(rid, run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
    await asyncio.wait_for(reader, 20)
    assert log.text == "early bird" and log.terminals == 1


async def test_runsse_without_any_append_ends_with_deadline(ide: ScriptedIDE) -> None:
    log = await asyncio.wait_for(ide.stream(uuid.uuid4().hex, StreamLog()), 20)
    assert log.terminals == 1 and log.terminal is not None and log.terminal.code == "deadline_exceeded"


@both_transports
async def test_runsse_reconnect_and_late_arrival_replay(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(slow_text(["one ", "two ", "three ", "four"], 0.1))
    rid = uuid.uuid4().hex
    first = StreamLog()
    stop = asyncio.Event()
    reader = asyncio.create_task(ide.stream(rid, first, stop=stop))
    await ide.append(rid, run_request("count", model=MODEL, conversation_id=uuid.uuid4().hex))
    while "one" not in first.text:
        await asyncio.sleep(0.02)
    stop.set()  # disconnect mid-run
    await asyncio.wait_for(reader, 20)
    assert first.terminals == 0
    second = await asyncio.wait_for(ide.stream(rid, StreamLog()), 20)  # reconnect: replay + live
    assert second.text == "one two three four" and second.terminals == 1 and second.terminal is None
    late = await asyncio.wait_for(ide.stream(rid, StreamLog()), 20)  # after the run ended
    assert late.raw == second.raw


@both_transports
async def test_sse_detach_is_independent_of_cancel(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(slow_text(["x"] * 8, 0.08))
    rid = uuid.uuid4().hex
    log = StreamLog()
    stop = asyncio.Event()
    reader = asyncio.create_task(ide.stream(rid, log, stop=stop))
    await ide.append(rid, run_request("go", model=MODEL, conversation_id=uuid.uuid4().hex))
    while not log.text:
        await asyncio.sleep(0.02)
    stop.set()
    await reader
    await asyncio.sleep(1.2)  # the run keeps going without a reader
    replay = await asyncio.wait_for(ide.stream(rid, StreamLog()), 20)
    assert replay.text == "x" * 8 and replay.terminal is None  # not cancelled by the disconnect
    assert not provider.requests[0].disconnected.is_set()


@both_transports
async def test_cancel_action_ends_with_one_canceled_terminal(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(slow_text(["tick"] * 30, 0.1))
    rid = uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("long", model=MODEL, conversation_id=uuid.uuid4().hex))
    while not log.text:
        await asyncio.sleep(0.02)
    await ide.append(rid, cancel_message())
    await asyncio.wait_for(reader, 20)
    assert log.terminals == 1 and log.terminal is not None and log.terminal.code == "canceled"
    assert "turn_ended" not in log.kinds()


async def test_terminal_frame_exactly_once_for_every_reader(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(slow_text(["a", "b", "c"], 0.05))
    rid = uuid.uuid4().hex
    logs = [StreamLog() for _ in range(3)]
    readers = [asyncio.create_task(ide.stream(rid, log)) for log in logs]
    await ide.append(rid, run_request("go", model=MODEL, conversation_id=uuid.uuid4().hex))
    await asyncio.wait_for(asyncio.gather(*readers), 20)
    for log in logs:
        assert log.terminals == 1 and log.terminal is None
        assert log.raw.endswith(bytes.fromhex("02000000027b7d"))
        assert log.kinds().count("turn_ended") == 1
    assert logs[0].raw == logs[1].raw == logs[2].raw


@both_transports
async def test_heartbeat_is_answered_at_once(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(slow_text(["z"] * 6, 0.1))
    rid = uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("go", model=MODEL, conversation_id=uuid.uuid4().hex))
    await ide.append(rid, heartbeat_message())
    await asyncio.wait_for(reader, 20)
    assert "heartbeat" in log.kinds()
    assert bytes.fromhex("00000000040a026a00") in bytes(log.raw)


async def test_out_of_order_appends_are_delivered_once_in_order(ide: ScriptedIDE, provider: FakeProviderServer, workspace) -> None:
    for name in "abcd":
        (workspace / f"{name}.txt").write_text(f"content of {name}\n")
    calls = [CallSpec(f"call_{n}", "Read", [f'{{"path": "{workspace}/{n}.txt"}}']) for n in "abcd"]
    provider.enqueue(OPENAI_CHAT.tool_calls(calls), OPENAI_CHAT.text(["done"]))
    ide.hold_execs = True
    rid = uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("read all", model=MODEL, conversation_id=uuid.uuid4().hex))
    # The round's checkpoint (its blobs acked by the IDE's own appends) comes first.
    while len(ide.held) < 4 or "conversation_checkpoint_update" not in log.kinds():
        await asyncio.sleep(0.02)
    replies = [ide.execute(ex)[0] for _, ex in ide.held]
    start = ide.seqnos[rid]
    bodies = [(start + i, append_body(rid, start + i, r)) for i, r in enumerate(replies)]
    ide.seqnos[rid] = start + len(bodies)  # the IDE's own later appends (blob acks) continue after these
    shuffled = bodies[1:] + [bodies[2]]  # seqno 1 (a gap) comes last; seqno 3 twice
    random.Random(7).shuffle(shuffled)
    async with httpx.AsyncClient(base_url=ide.base_url, headers={"content-type": "application/proto"}) as client:
        for _, body in shuffled:
            assert (await client.post("/aiserver.v1.BidiService/BidiAppend", content=body)).status_code == 200
        await asyncio.sleep(0.3)
        assert "tool_call_completed" not in log.kinds()  # held behind the gap
        assert (await client.post("/aiserver.v1.BidiService/BidiAppend", content=bodies[0][1])).status_code == 200
    await asyncio.wait_for(reader, 20)
    completed = [u.call_id for u in log.updates("tool_call_completed")]
    assert completed == [c.id for c in calls]
    assert log.text == "done" and log.terminals == 1
    second = provider.requests[1].json()["messages"]
    tool_msgs = [m for m in second if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == [c.id for c in calls]
    assert all(f"content of {n}" in m["content"] for m, n in zip(tool_msgs, "abcd"))


async def test_a_whole_turn_over_h2c(server, provider: FakeProviderServer, workspace) -> None:  # type: ignore[no-untyped-def]
    # The IDE may speak HTTP/2: the stream, its live frames (sent from the producing task) and the
    # single terminal must come out the same as over HTTP/1.1.
    provider.enqueue(slow_text(["over ", "h2 ", "too"], 0.05))
    ide = ScriptedIDE(server.base_url, workspace, http2=True)
    try:
        assert (await ide.client.get("/__byok-api__/healthz")).http_version == "HTTP/2"
        log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
    finally:
        await ide.close()
    assert log.text == "over h2 too"
    assert log.terminals == 1 and log.terminal is None and not log.broken
    assert log.kinds()[-1] == "conversation_checkpoint_update"
