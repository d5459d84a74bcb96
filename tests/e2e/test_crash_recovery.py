"""SIGKILL the real server at several points of a run, restart it on the same database, resume.

What the client had acknowledged (its own user messages once the model was called, and every
checkpoint it received) must still be in the history, nothing duplicated, and the resumed run must
finish."""
from __future__ import annotations

import asyncio
import json
import threading
import uuid
from pathlib import Path

import pytest

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, RecordedRequest, Reply
from tests.harness.ide import ScriptedIDE, StreamLog, cancel_message, gauge_reaches, run_request
from tests.harness.stored import history_holds, writes_held
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess, one_model_config

MODEL = "byok-crash"
RUNTIME_IDLE = 0.5  # an idle runtime is evicted soon (exec ids start again in the next one)


def resume_request(conv: str, model: str = MODEL) -> pb.AgentClientMessage:
    msg = pb.AgentClientMessage()
    rr = msg.run_request
    rr.conversation_id = conv
    rr.run_id = uuid.uuid4().hex
    rr.requested_model.model_id = model
    rr.action.resume_action.SetInParent()
    return msg


async def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.02)


def texts(body: dict) -> list[str]:
    return [json.dumps(m, sort_keys=True) for m in body["messages"]]


@pytest.fixture
def config(tmp_path: Path, provider: FakeProviderServer, store_url: str) -> ServerConfig:
    """On both store backends: SIGKILL and restart lose nothing acknowledged on PostgreSQL too."""
    return one_model_config(tmp_path / "data", provider.url, MODEL, store_url=store_url)


async def first_turn(ide: ScriptedIDE, provider: FakeProviderServer, conv: str) -> StreamLog:
    provider.enqueue(OPENAI_CHAT.text(["bravo answer"]))
    rid = uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("alpha question", model=MODEL, conversation_id=conv, message_id="m1"))
    await asyncio.wait_for(reader, 15)
    assert "conversation_checkpoint_update" in log.kinds() and log.terminal is None
    return log


async def start_second_turn(ide: ScriptedIDE, conv: str) -> tuple[str, StreamLog, asyncio.Task[StreamLog]]:
    rid = uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("charlie question", model=MODEL, conversation_id=conv, message_id="m2"))
    return rid, log, reader


async def resume_after_restart(server: ServerProcess, provider: FakeProviderServer, conv: str, workspace: Path, action: pb.AgentClientMessage) -> tuple[StreamLog, dict]:
    server.start()
    provider.enqueue(OPENAI_CHAT.text(["resumed fine"]))
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        rid = uuid.uuid4().hex
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(rid, log))
        await ide.append(rid, action)
        await asyncio.wait_for(reader, 15)
    finally:
        await ide.close()
    return log, provider.requests[-1].json()


def assert_history_once(body: dict, *needles: str) -> None:
    joined = texts(body)
    for needle in needles:
        hits = [t for t in joined if needle in t]
        assert len(hits) == 1, (needle, hits)


async def test_kill_while_modeling_then_resume(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    server = ServerProcess(config).start()
    conv = uuid.uuid4().hex
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        await first_turn(ide, provider, conv)
        slow = OPENAI_CHAT.text(["zulu "] * 50)
        slow.chunk_delay = 0.05
        provider.enqueue(slow)
        _, log, reader = await start_second_turn(ide, conv)
        await wait_until(lambda: "zulu" in log.text)
        server.kill()
        await asyncio.wait_for(reader, 10)
        assert log.terminals == 0  # the stream died with the server
    finally:
        await ide.close()
    resumed, body = await resume_after_restart(server, provider, conv, workspace, resume_request(conv))
    try:
        assert resumed.terminals == 1 and resumed.terminal is None and resumed.text == "resumed fine"
        assert_history_once(body, "alpha question", "bravo answer", "charlie question")
        assert not any("zulu" in t for t in texts(body))  # an unfinished stream is not history
    finally:
        server.stop()


async def test_kill_while_waiting_for_a_tool_then_resume(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    (workspace / "x.txt").write_text("x\n")
    server = ServerProcess(config).start()
    conv = uuid.uuid4().hex
    ide = ScriptedIDE(server.base_url, workspace)
    ide.hold_execs = True
    try:
        await first_turn(ide, provider, conv)
        provider.enqueue(OPENAI_CHAT.tool_calls([CallSpec("call_k", "Read", [f'{{"path": "{workspace}/x.txt"}}'])]))
        _, log, reader = await start_second_turn(ide, conv)
        await wait_until(lambda: len(ide.held) == 1)
        await wait_until(lambda: history_holds(config, b"call_k"))  # the assistant message is committed
        server.kill()
        await asyncio.wait_for(reader, 10)
    finally:
        await ide.close()
    resumed, body = await resume_after_restart(server, provider, conv, workspace, resume_request(conv))
    try:
        assert resumed.terminals == 1 and resumed.terminal is None and resumed.text == "resumed fine"
        assert_history_once(body, "alpha question", "bravo answer", "charlie question")
        tool_results = [m for m in body["messages"] if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tool_results] == ["call_k"]
        assert "did not finish" in tool_results[0]["content"]
    finally:
        server.stop()


async def test_kill_during_checkpointing_then_new_turn(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    server = ServerProcess(config).start()
    conv = uuid.uuid4().hex
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        await first_turn(ide, provider, conv)
        provider.enqueue(OPENAI_CHAT.text(["delta answer"]))
        ide.hold_kv = True  # the turn's end waits for the acks of its final blobs, which never come
        _, log, reader = await start_second_turn(ide, conv)
        await wait_until(lambda: "step_completed" in log.kinds() and bool(ide.held_kv))  # its answer is saved by then
        server.kill()
        await asyncio.wait_for(reader, 10)
        assert "turn_ended" not in log.kinds() and "conversation_checkpoint_update" not in log.kinds()
    finally:
        await ide.close()
    follow = run_request("echo question", model=MODEL, conversation_id=conv, message_id="m3")
    resumed, body = await resume_after_restart(server, provider, conv, workspace, follow)
    try:
        assert resumed.terminals == 1 and resumed.terminal is None
        assert_history_once(body, "alpha question", "bravo answer", "charlie question", "delta answer", "echo question")
    finally:
        server.stop()


class HeldAnswer:
    """The model's answer, sent once the test lets it go; its request has arrived by then, so the
    turn's input is saved (the server sends it only after)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.arrived = threading.Event()
        self.go = threading.Event()

    def __call__(self, request: RecordedRequest) -> Reply:
        self.arrived.set()
        self.go.wait(15)
        return OPENAI_CHAT.text([self.text])


async def test_the_ide_hears_a_turn_ended_only_once_its_answer_is_saved(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    """The answer's write is held up (another connection holds the database's write lock, as a
    slow disk under load delays a commit): the IDE is not told the turn ended before the answer is
    saved, so a kill then loses nothing it was told; once the lock goes, the turn ends."""
    server = ServerProcess(config).start()
    conv = uuid.uuid4().hex
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        await first_turn(ide, provider, conv)
        for question, answer, kill in (("charlie question", "delta answer", True), ("foxtrot question", "golf answer", False)):
            held = HeldAnswer(answer)
            provider.respond_with(held)
            rid, log = uuid.uuid4().hex, StreamLog()
            reader = asyncio.create_task(ide.stream(rid, log))
            await ide.append(rid, run_request(question, model=MODEL, conversation_id=conv, message_id=question))
            await wait_until(held.arrived.is_set)
            with writes_held(config):
                held.go.set()
                await wait_until(lambda: "step_completed" in log.kinds())  # the model's answer is complete
                await asyncio.sleep(0.5)  # time for a frame the server must not send yet
                assert "turn_ended" not in log.kinds()
                if kill:
                    server.kill()
            await asyncio.wait_for(reader, 15)
            if kill:  # the IDE was not told the turn ended; the restarted server goes on without the answer
                assert log.terminals == 0
                await ide.close()
                server.start()
                ide = ScriptedIDE(server.base_url, workspace)
            else:
                assert "turn_ended" in log.kinds() and log.terminals == 1 and log.terminal is None
        provider.respond_with(None)
        provider.enqueue(OPENAI_CHAT.text(["resumed fine"]))
        resumed = await ide.turn(run_request("echo question", model=MODEL, conversation_id=conv, message_id="m3"))
    finally:
        await ide.close()
        server.stop()
    assert resumed.terminals == 1 and resumed.terminal is None
    body = provider.requests[-1].json()
    assert_history_once(body, "alpha question", "bravo answer", "charlie question", "foxtrot question", "golf answer", "echo question")
    assert not any("delta answer" in t for t in texts(body))  # never saved, and the IDE was never told it was


async def test_retried_user_message_after_restart_is_not_duplicated(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    server = ServerProcess(config).start()
    conv = uuid.uuid4().hex
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        await first_turn(ide, provider, conv)
    finally:
        await ide.close()
    server.kill()
    # The IDE retries the same message (same message_id) after the restart: committed input never
    # wakes the model again.
    retry = run_request("alpha question", model=MODEL, conversation_id=conv, message_id="m1")
    server.start()
    calls_before = len(provider.requests)
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        rid = uuid.uuid4().hex
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(rid, log))
        await ide.append(rid, retry)
        await asyncio.wait_for(reader, 15)
    finally:
        await ide.close()
        server.stop()
    assert log.terminals == 1 and log.terminal is None
    assert len(provider.requests) == calls_before


async def test_background_completion_after_sigkill_gets_exactly_one_follow_up(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    from .test_tools import completion_request

    server = ServerProcess(config).start()
    conv = uuid.uuid4().hex
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        await first_turn(ide, provider, conv)
        slow = OPENAI_CHAT.text(["yankee "] * 50)
        slow.chunk_delay = 0.05
        provider.enqueue(slow)
        rid = uuid.uuid4().hex
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(rid, log))
        await ide.append(rid, completion_request(conv, "task-7", "call-7", MODEL))
        await wait_until(lambda: "yankee" in log.text)
        server.kill()  # the follow-up was cut short
        await asyncio.wait_for(reader, 10)
    finally:
        await ide.close()
    calls_before = len(provider.requests)
    # The IDE delivers the completion again (at least once): exactly one follow-up runs.
    resumed, body = await resume_after_restart(server, provider, conv, workspace, completion_request(conv, "task-7", "call-7", MODEL))
    try:
        assert resumed.terminals == 1 and resumed.terminal is None and resumed.text == "resumed fine"
        assert len(provider.requests) == calls_before + 1
        assert_history_once(body, "Indexed 42 files.")
    finally:
        server.stop()
    again, _ = await resume_after_restart(server, provider, conv, workspace, completion_request(conv, "task-7", "call-7", MODEL))
    try:
        assert again.terminal is None and len(provider.requests) == calls_before + 1  # never a second follow-up
    finally:
        server.stop()


async def test_resume_hydrates_from_the_client_checkpoint_on_a_new_database(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    """Our database is gone (a new machine): the IDE's checkpoint and its KV blobs rebuild the history."""
    first_cfg = ServerConfig(data_dir=tmp_path / "one", models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")])
    conv = uuid.uuid4().hex
    with ServerProcess(first_cfg) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        try:
            log = await first_turn(ide, provider, conv)
        finally:
            await ide.close()
    checkpoint = [m.conversation_checkpoint_update for m in log.messages if m.WhichOneof("message") == "conversation_checkpoint_update"][-1]
    blobs = dict(ide.blobs)

    second_cfg = ServerConfig(data_dir=tmp_path / "two", models=first_cfg.models)
    for corrupt in (True, False):
        with ServerProcess(second_cfg) as server:
            ide = ScriptedIDE(server.base_url, workspace)
            ide.blobs = dict(blobs)
            ide.corrupt_blobs = corrupt
            provider.enqueue(OPENAI_CHAT.text(["hydrated answer"]))
            calls = len(provider.requests)
            msg = run_request("foxtrot question", model=MODEL, conversation_id=conv, message_id="m9")
            msg.run_request.conversation_state.CopyFrom(checkpoint)
            try:
                resumed = await ide.turn(msg)
            finally:
                await ide.close()
            gets = [kv for kv in ide.kv_log if kv.WhichOneof("message") == "get_blob_args"]
            assert {kv.get_blob_args.blob_id for kv in gets} == set(checkpoint.root_prompt_messages_json)
            if corrupt:
                assert resumed.terminal is not None and resumed.terminal.code == "invalid_argument"
                assert len(provider.requests) == calls  # a bad blob never reaches the model
                provider._replies.clear()
                continue
            assert resumed.terminal is None and resumed.text == "hydrated answer"
            assert_history_once(provider.requests[-1].json(), "alpha question", "bravo answer", "foxtrot question")


async def test_a_late_result_from_an_earlier_stream_never_enters_a_new_run(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    """Exec ids are only unique within one runtime's life: after an idle runtime is evicted (or the
    server restarts) they start again. A late result on an earlier run's stream must not be taken for
    the new run's exec with the same id."""
    (workspace / "old.txt").write_text("OLD-CONTENT\n")
    (workspace / "new.txt").write_text("NEW-CONTENT\n")
    config = ServerConfig(
        data_dir=tmp_path / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
        extra_server={"runtime_idle_seconds": RUNTIME_IDLE},
    )
    conv = uuid.uuid4().hex
    with ServerProcess(config) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        ide.hold_execs = True
        try:
            provider.enqueue(OPENAI_CHAT.tool_calls([CallSpec("call_old", "Read", [f'{{"path": "{workspace}/old.txt"}}'])]))

            async def cancel_while_held(rid: str, log: StreamLog) -> None:
                await wait_until(lambda: len(ide.held) == 1)
                await ide.append(rid, cancel_message())

            await ide.turn(run_request("first", model=MODEL, conversation_id=conv), during=cancel_while_held)
            old_request, old_exec = ide.held.pop()
            await gauge_reaches(ide.client, "cursor_byok_conversations_loaded", 0, timeout=20)  # the idle runtime is evicted
            provider.enqueue(
                OPENAI_CHAT.tool_calls([CallSpec("call_new", "Read", [f'{{"path": "{workspace}/new.txt"}}'])]),
                OPENAI_CHAT.text(["read the new one"]),
            )

            async def late_then_real(rid: str, log: StreamLog) -> None:
                await wait_until(lambda: len(ide.held) == 1)
                assert ide.held[0][1].id == old_exec.id  # the same exec id, on a new stream
                for reply in ide.execute(old_exec):  # the late result, on the old stream
                    reply.exec_client_message.ClearField("exec_id")  # only the numeric id to go by
                    assert (await ide.append(old_request, reply)).status_code == 200
                await asyncio.sleep(0.3)
                ide.hold_execs = False
                await ide.release_held()

            resumed = await ide.turn(run_request("again", model=MODEL, conversation_id=conv), during=late_then_real)
        finally:
            await ide.close()
    assert resumed.terminal is None and resumed.text == "read the new one"
    results = [m for m in provider.requests[-1].json()["messages"] if m["role"] == "tool"]
    new = [m for m in results if m["tool_call_id"] == "call_new"][0]
    assert "NEW-CONTENT" in new["content"] and "OLD-CONTENT" not in new["content"]
