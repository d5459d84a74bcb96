"""A turn's end, frame by frame, in the order Cursor's own server keeps (PROTOCOL.md 2.7): the last
step's deltas, the final checkpoint's blobs set and acked, `turn_ended`, that checkpoint staged (the
answer still in `pending_tool_calls`), settled, and settled once more, then the end of the stream.
A compacting turn's end: test_checkpoint_fidelity.py."""
from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, run_request

from .conftest import MODEL, both_transports
from .test_lifecycle import wait_until

# What 2.7 has a successful turn end with, once its last step completed.
SUCCESS_END = ["set_blob", "turn_ended", "staged checkpoint", "settled checkpoint", "settled checkpoint"]


def frame_name(message: pb.AgentServerMessage) -> str:
    kind = message.WhichOneof("message") or "?"
    if kind == "interaction_update":
        return message.interaction_update.WhichOneof("message") or "?"
    if kind == "kv_server_message":
        return message.kv_server_message.WhichOneof("message").removesuffix("_args")  # type: ignore[union-attr]
    if kind == "conversation_checkpoint_update":
        return ("staged" if message.conversation_checkpoint_update.pending_tool_calls else "settled") + " checkpoint"
    return kind


def turn_end(log: StreamLog) -> list[str]:
    """The frames after the turn's last step_completed, a run of set_blobs named once."""
    names = [frame_name(m) for m in log.messages]
    last_step = len(names) - 1 - names[::-1].index("step_completed")
    out: list[str] = []
    for name in names[last_step + 1 :]:
        if not (name == "set_blob" and out and out[-1] == "set_blob"):
            out.append(name)
    return out


def final_checkpoints(log: StreamLog) -> list[pb.ConversationStateStructure]:
    return [m.conversation_checkpoint_update for m in log.messages if m.WhichOneof("message") == "conversation_checkpoint_update"][-3:]


def assert_staged_then_settled(log: StreamLog, answer: str) -> None:
    """The staged checkpoint holds the answer as the message in flight, the settled one as the last
    root; otherwise they are the same state, and the settled one comes twice, the same."""
    staged, settled, again = final_checkpoints(log)
    assert again == settled
    roots = list(settled.root_prompt_messages_json)
    assert list(staged.root_prompt_messages_json) == roots[:-1] and not settled.pending_tool_calls
    [pending] = staged.pending_tool_calls
    message = json.loads(pending)
    assert message["role"] == "assistant" and answer in json.dumps(message["content"])
    staged.ClearField("root_prompt_messages_json")
    staged.ClearField("pending_tool_calls")
    settled.ClearField("root_prompt_messages_json")
    assert staged == settled


@both_transports
async def test_a_plain_turn_ends_in_the_wire_order(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(OPENAI_CHAT.text(["a plain ", "answer"]))
    log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
    assert log.terminals == 1 and log.terminal is None and log.text == "a plain answer"
    assert turn_end(log) == SUCCESS_END
    assert_staged_then_settled(log, "a plain answer")


@both_transports
async def test_a_tool_turn_ends_in_the_wire_order(ide: ScriptedIDE, provider: FakeProviderServer, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("the notes\n")
    answer = OPENAI_CHAT.text(["read ", "it"])
    answer.chunk_delay = 0.3  # the checkpoint of the tool round's step lands before the last step ends
    provider.enqueue(OPENAI_CHAT.tool_calls([CallSpec("call_read", "Read", [json.dumps({"path": str(workspace / "notes.txt")})])]), answer)
    log = await ide.turn(run_request("read the notes", model=MODEL, conversation_id=uuid.uuid4().hex))
    assert log.terminals == 1 and log.terminal is None and log.text == "read it"
    assert "tool_call_completed" in log.kinds()
    assert turn_end(log) == SUCCESS_END
    assert_staged_then_settled(log, "read it")


@both_transports
async def test_turn_ended_waits_for_the_acks_of_the_final_blobs(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    """While the IDE has not acked the final checkpoint's blobs the turn has not ended; their acks
    end it, with the checkpoints that name them."""
    provider.enqueue(OPENAI_CHAT.text(["acked answer"]))
    ide.hold_kv = True
    rid, log = uuid.uuid4().hex, StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    await ide.append(rid, run_request("q", model=MODEL, conversation_id=uuid.uuid4().hex))
    await wait_until(lambda: "step_completed" in log.kinds() and bool(ide.held_kv))
    await asyncio.sleep(0.5)  # well within the server's ack timeout (1.5 s)
    assert "turn_ended" not in log.kinds() and not log.finished
    await ide.release_kv()
    await asyncio.wait_for(reader, 15)
    assert log.terminals == 1 and log.terminal is None
    assert turn_end(log) == SUCCESS_END


@both_transports
async def test_a_blob_goes_out_once_per_stream_however_many_checkpoints_name_it(ide: ScriptedIDE, provider: FakeProviderServer, workspace: Path) -> None:
    """A tool round's checkpoint at its start and the step checkpoint before it (and the final one
    after the last step) name the same new blobs while their acks are on the way: each is pushed
    once, and every checkpoint waits for that one ack."""
    (workspace / "notes.txt").write_text("the notes\n")
    read = [json.dumps({"path": str(workspace / "notes.txt")})]
    provider.enqueue(*(OPENAI_CHAT.tool_calls([CallSpec(f"call_{i}", "Read", read)]) for i in range(3)), OPENAI_CHAT.text(["read thrice"]))
    log = await ide.turn(run_request("read the notes three times", model=MODEL, conversation_id=uuid.uuid4().hex))
    assert log.terminals == 1 and log.terminal is None and log.text == "read thrice"
    pushed = [kv.set_blob_args.blob_id for kv in ide.kv_log if kv.WhichOneof("message") == "set_blob_args"]
    assert len(pushed) == len(set(pushed))
    assert turn_end(log) == SUCCESS_END
    assert_staged_then_settled(log, "read thrice")
