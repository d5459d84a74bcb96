"""Checkpoints carry everything the IDE keeps to redraw and resume a chat: turns with their steps,
todos, the paths read, sub-tasks, the tool round in flight; every blob they name is pushed and
acked first, and a checkpoint alone (a server with an empty data dir) continues the conversation."""
from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from pathlib import Path

import pytest

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess, one_model_config

from .conftest import MODEL, both_transports
from .test_crash_recovery import resume_request
from .test_turn_end import SUCCESS_END, assert_staged_then_settled, final_checkpoints, frame_name, turn_end


def checkpoints(log: StreamLog) -> list[pb.ConversationStateStructure]:
    return [m.conversation_checkpoint_update for m in log.messages if m.WhichOneof("message") == "conversation_checkpoint_update"]


def turn_of(ide: ScriptedIDE, blob: bytes) -> pb.AgentConversationTurnStructure:
    structure = pb.ConversationTurnStructure.FromString(ide.blobs[blob])
    assert structure.WhichOneof("turn") == "agent_conversation_turn"
    return structure.agent_conversation_turn


def steps_of(ide: ScriptedIDE, turn: pb.AgentConversationTurnStructure) -> list[pb.ConversationStep]:
    return [pb.ConversationStep.FromString(ide.blobs[s]) for s in turn.steps]


def named_blobs(state: pb.ConversationStateStructure, ide: ScriptedIDE) -> list[bytes]:
    """Every blob id the state names, down through its turns."""
    ids = [*state.root_prompt_messages_json, *state.turns, *state.todos]
    ids += [state.plan] if state.HasField("plan") else []
    for turn_id in state.turns:
        turn = turn_of(ide, turn_id)
        ids += [turn.user_message, *turn.steps]
    return ids


def assert_blobs_pushed_before(log: StreamLog, ide: ScriptedIDE) -> None:
    """Each checkpoint names only blobs pushed earlier on the stream, each hashing to its id."""
    pushed: set[bytes] = set(ide.blobs) - {kv.set_blob_args.blob_id for kv in ide.kv_log if kv.WhichOneof("message") == "set_blob_args"}
    for message in log.messages:
        kind = message.WhichOneof("message")
        if kind == "kv_server_message" and message.kv_server_message.WhichOneof("message") == "set_blob_args":
            pushed.add(message.kv_server_message.set_blob_args.blob_id)
        elif kind == "conversation_checkpoint_update":
            for blob in named_blobs(message.conversation_checkpoint_update, ide):
                assert blob in pushed, "a checkpoint names a blob not pushed before it"
                assert hashlib.sha256(ide.blobs[blob]).digest() == blob


@both_transports
async def test_a_turn_with_thinking_text_and_a_read_is_in_the_checkpoint_turns(ide: ScriptedIDE, provider: FakeProviderServer, workspace: Path) -> None:
    path = str(workspace / "notes.txt")
    (workspace / "notes.txt").write_text("hello from the notes\n")
    answer = OPENAI_CHAT.text(["It says ", "hello."])
    answer.chunk_delay = 0.3  # the checkpoint of the steps before it arrives meanwhile
    provider.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec("call_read", "Read", [json.dumps({"path": path})])], ["Let me look."], thoughts=["I should ", "read it"]),
        answer,
    )
    rid = uuid.uuid4().hex
    log = await ide.turn(run_request("what is in the notes?", model=MODEL, conversation_id=uuid.uuid4().hex, mode=pb.AGENT_MODE_ASK), request_id=rid)
    assert log.terminal is None and log.text == "Let me look.It says hello."
    states = checkpoints(log)
    state = states[-1]
    assert len(state.turns) == 1
    turn = turn_of(ide, state.turns[0])
    assert turn.request_id == rid
    user = pb.UserMessage.FromString(ide.blobs[turn.user_message])
    assert user.text == "what is in the notes?" and user.mode == pb.AGENT_MODE_ASK
    steps = steps_of(ide, turn)
    assert [s.WhichOneof("message") for s in steps] == ["thinking_message", "assistant_message", "tool_call", "assistant_message"]
    assert steps[0].thinking_message.text == "I should read it" and steps[0].thinking_message.duration_ms >= 1
    assert steps[1].assistant_message.text == "Let me look."
    call = steps[2].tool_call
    assert call.tool_call_id == "call_read" and call.read_tool_call.args.path == path
    assert call.read_tool_call.result.HasField("success")
    assert 0 < call.started_at_ms <= call.completed_at_ms
    assert steps[3].assistant_message.text == "It says hello."
    assert list(state.read_paths) == [path]
    assert state.mode == pb.AGENT_MODE_ASK and not state.pending_tool_calls
    assert_blobs_pushed_before(log, ide)
    # Within the turn, what one checkpoint published is a prefix of what the next one does.
    lists = [list(turn_of(ide, s.turns[-1]).steps) for s in states]
    assert any(0 < len(a) < len(lists[-1]) for a in lists), [len(x) for x in lists]  # a step checkpoint came mid-turn
    for before, after in zip(lists, lists[1:]):
        assert after[: len(before)] == before


@both_transports
async def test_the_next_turn_keeps_the_earlier_turns_unchanged(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    conv = uuid.uuid4().hex
    provider.enqueue(OPENAI_CHAT.text(["one"]), OPENAI_CHAT.text(["two"]))
    first = await ide.turn(run_request("first", model=MODEL, conversation_id=conv))
    state = checkpoints(first)[-1]
    follow = run_request("second", model=MODEL, conversation_id=conv)
    follow.run_request.conversation_state.CopyFrom(state)
    second = await ide.turn(follow)
    turns = list(checkpoints(second)[-1].turns)
    assert len(turns) == 2 and turns[0] == state.turns[0]
    assert [s.assistant_message.text for s in steps_of(ide, turn_of(ide, turns[1]))] == ["two"]


@both_transports
async def test_todo_write_fills_the_checkpoint_todos(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    todos = [{"id": "a", "content": "write the tests", "status": "in_progress"}, {"id": "b", "content": "fix the bug", "status": "pending"}]
    provider.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec("call_todo", "TodoWrite", [json.dumps({"todos": todos})])]),
        OPENAI_CHAT.text(["planned"]),
    )
    log = await ide.turn(run_request("plan the work", model=MODEL, conversation_id=uuid.uuid4().hex))
    state = checkpoints(log)[-1]
    items = [pb.TodoItem.FromString(ide.blobs[t]) for t in state.todos]
    assert [(i.id, i.content, i.status) for i in items] == [
        ("a", "write the tests", pb.TODO_STATUS_IN_PROGRESS),
        ("b", "fix the bug", pb.TODO_STATUS_PENDING),
    ]
    steps = steps_of(ide, turn_of(ide, state.turns[0]))
    assert steps[0].tool_call.WhichOneof("tool") == "update_todos_tool_call"
    assert_blobs_pushed_before(log, ide)


@pytest.fixture
def restartable(tmp_path: Path, provider: FakeProviderServer) -> ServerConfig:
    return one_model_config(tmp_path / "first", provider.url, MODEL, extra_server={"blob_ack_timeout_seconds": 3.0})


async def test_a_checkpoint_alone_continues_the_conversation_on_an_empty_data_dir(
    restartable: ServerConfig, provider: FakeProviderServer, workspace: Path, tmp_path: Path
) -> None:
    """Turn 2 from the IDE's checkpoint, on the server that has the conversation and on a fresh one
    (killed, restarted on an empty data dir): the same provider request, the same turns."""
    conv = uuid.uuid4().hex
    server = ServerProcess(restartable).start()
    ide = ScriptedIDE(server.base_url, workspace)
    provider.enqueue(OPENAI_CHAT.text(["alpha answer"]), OPENAI_CHAT.text(["bravo answer"]))
    first = await ide.turn(run_request("alpha", model=MODEL, conversation_id=conv, message_id="m1"))
    state = checkpoints(first)[-1]
    second = run_request("bravo", model=MODEL, conversation_id=conv, message_id="m2", run_id="run-2")
    second.run_request.conversation_state.CopyFrom(state)
    with_db = await ide.turn(second, request_id="rid-2")
    server.kill()
    await ide.close()

    restartable.data_dir = tmp_path / "empty"
    server = ServerProcess(restartable).start()
    fresh = ScriptedIDE(server.base_url, workspace)
    fresh.blobs = dict(ide.blobs)  # what the IDE stores
    provider.enqueue(OPENAI_CHAT.text(["bravo answer"]))
    try:
        without_db = await fresh.turn(second, request_id="rid-2")
    finally:
        await fresh.close()
        server.stop()
    assert with_db.terminal is None and without_db.terminal is None
    assert provider.requests[-1].raw_items("messages") == provider.requests[-2].raw_items("messages")
    assert provider.requests[-1].body == provider.requests[-2].body
    turns_with, turns_without = checkpoints(with_db)[-1].turns, checkpoints(without_db)[-1].turns
    assert list(turns_without) == list(turns_with) and turns_with[:1] == state.turns


async def test_a_tool_round_in_flight_runs_again_on_resume(restartable: ServerConfig, provider: FakeProviderServer, workspace: Path, tmp_path: Path) -> None:
    """The server dies while the IDE runs a Read: the checkpoint it sent names the round in flight
    (pending_tool_calls); resuming from it on an empty data dir runs the Read again before the
    model, whose next request carries the real result."""
    path = str(workspace / "data.txt")
    (workspace / "data.txt").write_text("THE-REAL-CONTENT\n")
    conv = uuid.uuid4().hex
    server = ServerProcess(restartable).start()
    ide = ScriptedIDE(server.base_url, workspace)
    ide.hold_execs = True
    provider.enqueue(OPENAI_CHAT.tool_calls([CallSpec("call_r", "Read", [json.dumps({"path": path})])]))
    log = StreamLog()
    rid = uuid.uuid4().hex
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("read the data", model=MODEL, conversation_id=conv))
    deadline = asyncio.get_running_loop().time() + 15
    while not any(s.pending_tool_calls for s in checkpoints(log)):
        assert asyncio.get_running_loop().time() < deadline, "no checkpoint with the round in flight"
        await asyncio.sleep(0.02)
    server.kill()
    await asyncio.wait_for(reader, 10)
    await ide.close()
    pending = [s for s in checkpoints(log) if s.pending_tool_calls][-1]
    assert "call_r" in pending.pending_tool_calls[0]

    restartable.data_dir = tmp_path / "empty"
    server = ServerProcess(restartable).start()
    fresh = ScriptedIDE(server.base_url, workspace)
    fresh.blobs = dict(ide.blobs)
    provider.enqueue(OPENAI_CHAT.text(["the data is real"]))
    resume = resume_request(conv, MODEL)
    resume.run_request.conversation_state.CopyFrom(pending)
    try:
        resumed = await fresh.turn(resume)
    finally:
        await fresh.close()
        server.stop()
    assert resumed.terminal is None and resumed.text == "the data is real"
    assert [e.read_args.path for e in fresh.exec_log if e.WhichOneof("message") == "read_args"] == [path]
    tool_results = [m for m in provider.requests[-1].json()["messages"] if m["role"] == "tool"]
    assert len(tool_results) == 1 and "THE-REAL-CONTENT" in tool_results[0]["content"]
    assert not checkpoints(resumed)[-1].pending_tool_calls


async def test_a_follow_up_on_the_same_stream_keeps_what_the_ides_state_carried(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    config = ServerConfig(
        data_dir=tmp_path / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
        continuation_window_seconds=3.0,
    )
    earlier_turn = pb.ConversationTurnStructure(agent_conversation_turn=pb.AgentConversationTurnStructure(request_id="older")).SerializeToString()
    earlier_id = hashlib.sha256(earlier_turn).digest()
    msg = run_request("first", model=MODEL, conversation_id=uuid.uuid4().hex)
    state = msg.run_request.conversation_state
    state.turns.append(earlier_id)
    state.active_branch_name = "feature-x"
    provider.enqueue(OPENAI_CHAT.text(["first answer"]), OPENAI_CHAT.text(["second answer"]))
    with ServerProcess(config) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        ide.blobs[earlier_id] = earlier_turn
        try:

            async def follow_up(rid: str, log: StreamLog) -> None:
                while len(checkpoints(log)) < 1 or "turn_ended" not in log.kinds():
                    await asyncio.sleep(0.02)
                again = pb.AgentClientMessage()
                um = again.conversation_action.user_message_action.user_message
                um.text, um.message_id = "and one more thing", "msg-follow"
                await ide.append(rid, again)

            log = await ide.turn(msg, during=follow_up)
        finally:
            await ide.close()
    assert log.kinds().count("turn_ended") == 2 and log.terminal is None
    last = checkpoints(log)[-1]
    assert last.active_branch_name == "feature-x"
    assert len(last.turns) == 3 and last.turns[0] == earlier_id
    users = [pb.UserMessage.FromString(ide.blobs[turn_of(ide, t).user_message]).text for t in last.turns[1:]]
    assert users == ["first", "and one more thing"]


async def test_a_compaction_checkpoint_carries_its_summary_and_archive(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    """A turn that compacts the history first: summary_started and summary_completed around the
    summary call, then the turn ends as any other (PROTOCOL.md 2.7), its checkpoints carrying the
    summary and the archive of what it replaced."""
    config = ServerConfig(
        data_dir=tmp_path / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1", context_window=8000, max_output_tokens=1024)],
    )
    provider.enqueue(OPENAI_CHAT.text(["a durable summary"]), OPENAI_CHAT.text(["answered after compaction"]))
    with ServerProcess(config) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        try:
            log = await ide.turn(run_request("x" * 20_000, model=MODEL, conversation_id=uuid.uuid4().hex))
        finally:
            await ide.close()
    assert log.terminal is None and log.text == "answered after compaction"
    assert provider.requests[0].json().get("tools") in (None, [])  # the summary call came first
    names = [frame_name(m) for m in log.messages]
    assert names.count("summary_started") == names.count("summary_completed") == 1
    assert names.index("summary_started") < names.index("summary_completed") < names.index("text_delta")
    assert turn_end(log) == SUCCESS_END
    assert_staged_then_settled(log, "answered after compaction")
    assert all(state.self_summary_count == 1 for state in final_checkpoints(log))
    state = checkpoints(log)[-1]
    assert state.self_summary_count == 1
    assert pb.ConversationSummary.FromString(ide.blobs[state.summary]).summary == "a durable summary"
    assert list(state.summary_archives) == [state.summary_archive]
    archive = pb.ConversationSummaryArchive.FromString(ide.blobs[state.summary_archive])
    assert archive.summary == "a durable summary" and len(archive.summarized_messages) == 1
    assert archive.summary_message in state.root_prompt_messages_json
    assert "a durable summary" in json.loads(ide.blobs[archive.summary_message])["content"][0]["text"]
