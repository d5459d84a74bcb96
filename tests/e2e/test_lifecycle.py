"""Conversation lifecycle (seed stage 1): cancel in every phase, soft interrupt, late results,
checkpoint ordering. Real server, scripted IDE, fake provider."""
from __future__ import annotations

import asyncio
import hashlib
import uuid

import httpx

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, Reply
from tests.harness.ide import BIDI_APPEND, ScriptedIDE, StreamLog, append_body, appends_waiting, cancel_message, run_request

from .conftest import MODEL, both_transports, direct_transports


def slow_text(pieces: list[str], delay: float = 0.08) -> Reply:
    reply = OPENAI_CHAT.text(pieces)
    reply.chunk_delay = delay
    return reply


def read_call(call_id: str, path: str) -> CallSpec:
    return CallSpec(call_id, "Read", [f'{{"path": "{path}"}}'])


def user_message_action(text: str, message_id: str | None = None) -> pb.AgentClientMessage:
    msg = pb.AgentClientMessage()
    um = msg.conversation_action.user_message_action.user_message
    um.text = text
    um.message_id = message_id or uuid.uuid4().hex
    return msg


async def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.02)


async def follow_up_works(ide: ScriptedIDE, provider: FakeProviderServer, conv: str, text: str = "after") -> StreamLog:
    """A clean state after an ended run: the next run on the same conversation completes."""
    provider.enqueue(OPENAI_CHAT.text([text]))
    rid = uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("next", model=MODEL, conversation_id=conv))
    await asyncio.wait_for(reader, 15)
    assert log.text == text and log.terminals == 1 and log.terminal is None
    return log


async def test_cancel_in_prepare_phase(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    rid, conv = uuid.uuid4().hex, uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    # seqno 1 (cancel) first: it waits for seqno 0, which takes it along, so both reach the
    # runtime together and the cancel lands while the run is still preparing.
    async with httpx.AsyncClient(base_url=ide.base_url, headers={"content-type": "application/proto"}) as client:
        early = asyncio.create_task(client.post(BIDI_APPEND, content=append_body(rid, 1, cancel_message())))
        await appends_waiting(client, 1)  # seqno 1 waits (bounded) for the route that seqno 0 sets
        msg = run_request("never modelled", model=MODEL, conversation_id=conv)
        assert (await client.post(BIDI_APPEND, content=append_body(rid, 0, msg))).status_code == 200
        assert (await early).status_code == 200
    ide.seqnos[rid] = 2
    await asyncio.wait_for(reader, 15)
    assert log.terminals == 1 and log.terminal is not None and log.terminal.code == "canceled"
    assert "step_started" not in log.kinds()
    assert provider.requests == []
    await follow_up_works(ide, provider, conv)


@both_transports
async def test_cancel_in_model_phase(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(slow_text(["w"] * 40, 0.05))
    rid, conv = uuid.uuid4().hex, uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("long", model=MODEL, conversation_id=conv))
    await wait_until(lambda: bool(log.text))
    await ide.append(rid, cancel_message())
    await asyncio.wait_for(reader, 15)
    assert log.terminals == 1 and log.terminal.code == "canceled"
    await wait_until(lambda: provider.requests[0].disconnected.is_set(), 5)  # the provider stream was closed
    after = await follow_up_works(ide, provider, conv)
    assert after.terminal is None


@both_transports
async def test_cancel_in_tools_phase_aborts_the_exec(ide: ScriptedIDE, provider: FakeProviderServer, workspace) -> None:
    (workspace / "f.txt").write_text("data\n")
    provider.enqueue(OPENAI_CHAT.tool_calls([read_call("call_1", f"{workspace}/f.txt")]))
    ide.hold_execs = True
    rid, conv = uuid.uuid4().hex, uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("read it", model=MODEL, conversation_id=conv))
    await wait_until(lambda: len(ide.held) == 1)
    exec_id = ide.held[0][1].id
    await ide.append(rid, cancel_message())
    await asyncio.wait_for(reader, 15)
    aborts = [m.exec_server_control_message.abort.id for m in log.messages if m.WhichOneof("message") == "exec_server_control_message"]
    assert aborts == [exec_id]
    kinds = log.kinds()
    assert kinds.index("exec_server_control_message") < len(kinds)
    assert log.terminals == 1 and log.terminal.code == "canceled"
    await ide.release_held()  # a result after the run ended is ignored
    ide.hold_execs = False
    await follow_up_works(ide, provider, conv)
    messages = provider.requests[-1].json()["messages"]
    results = [m for m in messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["call_1"]  # the cancelled call has an explicit result
    assert "did not finish" in results[0]["content"] and "data" not in results[0]["content"]


@both_transports
async def test_cancel_in_checkpoint_phase(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(OPENAI_CHAT.text(["answer"]))
    ide.hold_kv = True
    rid, conv = uuid.uuid4().hex, uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("q", model=MODEL, conversation_id=conv))
    await wait_until(lambda: "step_completed" in log.kinds() and bool(ide.held_kv))  # the final blobs await acks
    await ide.append(rid, cancel_message())
    await asyncio.wait_for(reader, 15)
    assert log.terminals == 1 and log.terminal.code == "canceled"
    assert "turn_ended" not in log.kinds() and "conversation_checkpoint_update" not in log.kinds()
    ide.hold_kv = False
    await follow_up_works(ide, provider, conv)


@both_transports
async def test_final_checkpoint_precedes_the_terminal(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(OPENAI_CHAT.text(["hello"]))
    rid = uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
    await asyncio.wait_for(reader, 15)
    kinds = log.kinds()
    assert kinds[-1] == "conversation_checkpoint_update"  # last data frame, then the terminal
    assert kinds.index("turn_ended") < kinds.index("conversation_checkpoint_update")
    assert log.terminals == 1 and log.terminal is None
    checkpoint = log.messages[-1].conversation_checkpoint_update
    pushed = {kv.set_blob_args.blob_id: kv.set_blob_args.blob_data for kv in ide.kv_log if kv.WhichOneof("message") == "set_blob_args"}
    assert checkpoint.root_prompt_messages_json  # every root blob was pushed (and acked) before
    for blob_id in checkpoint.root_prompt_messages_json:
        assert blob_id in pushed and hashlib.sha256(pushed[blob_id]).digest() == blob_id
    roles = [__import__("json").loads(pushed[b])["role"] for b in checkpoint.root_prompt_messages_json]
    assert roles[0] == "system" and roles[-1] == "assistant" and "user" in roles


@both_transports
async def test_next_turn_pushes_only_the_blobs_the_clients_checkpoint_lacks(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    conv = uuid.uuid4().hex
    provider.enqueue(OPENAI_CHAT.text(["first answer"]), OPENAI_CHAT.text(["second answer"]))
    first = await ide.turn(run_request("one", model=MODEL, conversation_id=conv))
    held = list(first.messages[-1].conversation_checkpoint_update.root_prompt_messages_json)
    assert len(held) >= 3  # system, user, assistant
    ide.kv_log.clear()
    follow = run_request("two", model=MODEL, conversation_id=conv)
    follow.run_request.conversation_state.CopyFrom(first.messages[-1].conversation_checkpoint_update)  # as the IDE does
    second = await ide.turn(follow)
    roots = list(second.messages[-1].conversation_checkpoint_update.root_prompt_messages_json)
    assert roots[: len(held)] == held
    pushed = [kv.set_blob_args.blob_id for kv in ide.kv_log if kv.WhichOneof("message") == "set_blob_args"]
    assert [b for b in pushed if b in roots] == roots[len(held):]  # the new user and assistant messages only
    named = set(held) | set(first.messages[-1].conversation_checkpoint_update.turns)
    assert not named & set(pushed)  # nothing the client's checkpoint names is pushed again
    assert all(blob in ide.blobs for blob in roots)  # and the client holds every blob it names


@both_transports
async def test_soft_interrupt_continues_the_same_conversation(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(slow_text(["part "] * 30, 0.05), OPENAI_CHAT.text(["handled the follow-up"]))
    rid, conv = uuid.uuid4().hex, uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("first ask", model=MODEL, conversation_id=conv))
    await wait_until(lambda: "part" in log.text)
    await ide.append(rid, user_message_action("actually, do this instead", "msg-2"))
    await asyncio.wait_for(reader, 15)
    assert log.terminals == 1 and log.terminal is None
    assert log.text.endswith("handled the follow-up")
    assert len(log.updates("user_message_appended")) == 1
    second = provider.requests[1].json()["messages"]
    contents = [str(m.get("content")) for m in second]
    assert any("first ask" in c for c in contents) and any("do this instead" in c for c in contents)
    assert any(m["role"] == "assistant" and "part" in str(m.get("content")) for m in second)  # partial text kept


@both_transports
async def test_late_tool_result_never_pollutes_the_next_round(ide: ScriptedIDE, provider: FakeProviderServer, workspace) -> None:
    (workspace / "secret.txt").write_text("LATE-CONTENT\n")
    provider.enqueue(OPENAI_CHAT.tool_calls([read_call("call_late", f"{workspace}/secret.txt")]), OPENAI_CHAT.text(["moved on"]))
    ide.hold_execs = True
    rid, conv = uuid.uuid4().hex, uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("read", model=MODEL, conversation_id=conv))
    await wait_until(lambda: len(ide.held) == 1)
    await ide.append(rid, user_message_action("never mind", "msg-late"))
    await wait_until(lambda: len(provider.requests) >= 2)
    await ide.release_held()  # the result arrives after the interrupt
    ide.hold_execs = False
    await asyncio.wait_for(reader, 15)
    assert log.terminals == 1 and log.terminal is None and log.text == "moved on"
    body = provider.requests[1].body.decode()
    assert "LATE-CONTENT" not in body
    assert "interrupted" in body
    completed = [u for u in log.updates("tool_call_completed") if u.call_id == "call_late"]
    assert len(completed) == 1


@both_transports
async def test_client_that_never_acks_blobs_still_ends_its_turn(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(OPENAI_CHAT.text(["answer without acks"]))
    ide.hold_kv = True
    conv = uuid.uuid4().hex
    log = await ide.turn(run_request("q", model=MODEL, conversation_id=conv))
    assert log.text == "answer without acks" and log.terminals == 1 and log.terminal is None
    assert "turn_ended" in log.kinds() and "conversation_checkpoint_update" not in log.kinds()
    ide.hold_kv = False
    after = await follow_up_works(ide, provider, conv)
    assert "conversation_checkpoint_update" in after.kinds()
    assert "answer without acks" in provider.requests[-1].body.decode()  # the history kept the turn


@direct_transports
async def test_follow_up_on_the_same_stream_within_the_continuation_window(tmp_path, provider: FakeProviderServer, workspace, transport: str) -> None:
    """After a turn the stream stays open briefly; a user message appended then starts the next run
    on the same stream, with one terminal after the last run."""
    from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

    config = ServerConfig(
        data_dir=tmp_path / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
        continuation_window_seconds=3.0,
    )
    provider.enqueue(OPENAI_CHAT.text(["first answer"]), OPENAI_CHAT.text(["second answer"]))
    with ServerProcess(config) as server:
        ide = ScriptedIDE(server.base_url, workspace, transport=transport)
        try:

            async def follow_up(rid: str, log: StreamLog) -> None:
                await wait_until(lambda: log.kinds().count("conversation_checkpoint_update") == 3)  # the turn's last
                await ide.append(rid, user_message_action("and one more thing", "msg-follow"))

            log = await ide.turn(run_request("first", model=MODEL, conversation_id=uuid.uuid4().hex), during=follow_up)
        finally:
            await ide.close()
    assert log.text == "first answersecond answer"
    assert log.kinds().count("turn_ended") == 2 and log.terminals == 1 and log.terminal is None
    second = provider.requests[1].json()["messages"]
    assert any("first answer" in str(m.get("content")) for m in second)
    assert "and one more thing" in str(second[-1]["content"])
