"""A tool batch cut by a restart, rebuilt from its recorded start and the IDE's results taken again:
the same exec ids, the same outcomes, and nothing sent to the IDE twice (a request that went out
before the restart, or never, is not sent again; one caused by a result that came after it is)."""
from __future__ import annotations

import asyncio
import json

from cursor_byok import tools
from cursor_byok.conversation.active_run import ActiveRun, begin_run
from cursor_byok.conversation.output import OutputStream
from cursor_byok.conversation.tool_calls import ToolRounds, ToolState, decode_tool_state, encode_tool_state
from cursor_byok.hotpath import FrameDecoder
from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.run import Interrupted, ToolOutcome, tool_call_request

CALLS = [
    tool_call_request("call_read", "Read", json.dumps({"path": "/w/a.txt"})),
    tool_call_request("call_edit", "StrReplace", json.dumps({"path": "/w/b.txt", "old_string": "old", "new_string": "new"})),
]


def new_run(request_id: str = "req-1") -> ActiveRun:
    output = OutputStream(request_id, 0, cursor_run_id="cursor-run-1")
    run = begin_run("conv", request_id, output, pb.AgentRunRequest(run_id="cursor-run-1"), follow_up=False, resumed=False)
    run.tool_ctx = tools.ToolContext(workspace_root="/w", conversation_id="conv")
    return run


def exec_requests(run: ActiveRun) -> list[pb.ExecServerMessage]:
    decoder = FrameDecoder()
    out = []
    for frame in run.output.frames:
        for _, payload in decoder.feed(frame):
            message = pb.AgentServerMessage.FromString(payload)
            if message.HasField("exec_server_message"):
                out.append(message.exec_server_message)
    return out


def result(ex: pb.ExecServerMessage, **fields: object) -> pb.ExecClientMessage:
    return pb.ExecClientMessage(id=ex.id, exec_id=ex.exec_id, **fields)


def read_ok(ex: pb.ExecServerMessage, content: str) -> pb.ExecClientMessage:
    return result(ex, read_result=pb.ReadResult(success=pb.ReadSuccess(path=ex.read_args.path, content=content, total_lines=1)))


def write_ok(ex: pb.ExecServerMessage) -> pb.ExecClientMessage:
    return result(ex, write_result=pb.WriteResult(success=pb.WriteSuccess(path=ex.write_args.path, lines_created=1)))


async def test_a_rebuilt_batch_takes_the_same_ids_sends_nothing_again_and_completes_alike() -> None:
    persisted: list[ToolState] = []
    before = ToolRounds("conv", lambda state: persisted.append(decode_tool_state(encode_tool_state(state))))
    before.next_exec_id = 40  # earlier batches of this runtime's life
    run = new_run()
    assert not before.start(run, CALLS, asyncio.get_running_loop().create_future())
    read, edit_read = exec_requests(run)
    assert persisted[-1].open_batch is not None and persisted[-1].open_batch.exec_base == 40
    taken = [read_ok(read, "alpha"), read_ok(edit_read, "old text")]  # what the IDE sent, journaled
    for message in taken:
        before.on_client_message(run, "exec_client_message", message)
    edit_write = exec_requests(run)[-1]
    assert edit_write.HasField("write_args") and edit_write.write_args.file_text == "new text"
    # The server dies here, the write request already sent (or not: the rebuilt batch cannot know).

    after = ToolRounds("conv", lambda state: None)
    after.state = persisted[-1]
    resumed = new_run("req-1")
    after.recover(resumed, CALLS, resumed.tool_ctx)  # type: ignore[arg-type]
    for message in taken:
        after.on_client_message(resumed, "exec_client_message", message, replayed=True)
    assert exec_requests(resumed) == []  # nothing the IDE was asked before is asked again
    assert resumed.rebuilt is not None and not resumed.rebuilt.done()
    assert sorted(resumed.execs) == sorted(run.execs) and edit_write.id in resumed.execs  # it waits for the write, as before
    after.on_client_message(resumed, "exec_client_message", write_ok(edit_write))  # the IDE's answer, after the restart
    outcomes: list[ToolOutcome] = await resumed.rebuilt.future
    assert [o.call_id for o in outcomes] == ["call_read", "call_edit"]
    assert "alpha" in outcomes[0].content and not outcomes[1].is_error


async def test_a_step_caused_by_a_result_that_comes_after_the_restart_is_sent() -> None:
    persisted: list[ToolState] = []
    before = ToolRounds("conv", persisted.append)
    run = new_run()
    before.start(run, CALLS, asyncio.get_running_loop().create_future())
    read, edit_read = exec_requests(run)
    # The server dies before any result is journaled; the IDE sends them again afterwards.
    after = ToolRounds("conv", lambda state: None)
    after.state = persisted[-1]
    resumed = new_run()
    after.recover(resumed, CALLS, resumed.tool_ctx)  # type: ignore[arg-type]
    after.on_client_message(resumed, "exec_client_message", read_ok(edit_read, "old text"))
    [write] = exec_requests(resumed)
    assert write.HasField("write_args") and write.id == edit_read.id + 1  # the id the original would have taken
    # The read result never comes: giving the batch up ends its calls as errors, the write's too.
    after.give_up_rebuilt(resumed, "gone")
    assert resumed.rebuilt is not None
    try:
        await resumed.rebuilt.future
    except Interrupted as exc:
        assert {o.call_id for o in exc.outcomes} == {"call_read", "call_edit"} and all(o.is_error for o in exc.outcomes)
    else:
        raise AssertionError("a batch given up must end Interrupted")
