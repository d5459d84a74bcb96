"""A cancel the runtime holds in its queue (behind another command, its task not yet woken) when a
run's model request is about to leave (in the pass that learns its input's commit) is taken first:
the request never leaves. In this process, where the test decides that both reach the runtime in
the run request's own step, and that the input's commit is the writer thread's (one the loop makes
itself is learnt in that step: the request leaves in it, before any later input)."""
from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cursor_byok.run import start_now
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.ide import StreamLog, cancel_message, run_request
from tests.harness.inprocess import MODEL, Rig


@pytest.fixture
async def warm(tmp_path: Path) -> AsyncIterator[tuple[Rig, FakeProviderServer]]:
    """A provider that keeps its connections open, as real ones do: a request can leave at once."""
    with FakeProviderServer(keep_alive=True) as provider:
        rig = await Rig(tmp_path, provider).start()
        try:
            yield rig, provider
        finally:
            await rig.close()


async def test_a_cancel_queued_behind_another_command_is_taken_before_the_model_request_leaves(warm: tuple[Rig, FakeProviderServer]) -> None:
    rig, provider = warm
    conv = uuid.uuid4().hex
    provider.enqueue(OPENAI_CHAT.text(["first answer"]))
    first = await rig.ide().turn(run_request("the first question", model=MODEL, conversation_id=conv))
    assert first.terminal is None  # the conversation is in memory: its next start prepares in one step
    rid, log = uuid.uuid4().hex, StreamLog()
    reader = asyncio.create_task(rig.ide().stream(rid, log))
    service, store = rig.service, rig.store
    assert store is not None
    await service.resolve(rid)
    await store.flush()
    committed_on_the_loop = store.stats.loop_commits
    reading = start_now(store.latest_checkpoint(conv))  # a store thread is busy: the loop commits nothing itself
    service.open_run(rid, run_request("cancelled at once", model=MODEL, conversation_id=conv).run_request)
    # Its input's commit is the writer's: the model request would leave in the pass that learns it.
    assert store.stats.loop_commits == committed_on_the_loop
    service.heartbeat(rid)  # posted: the runtime's queue is not empty, its task wakes a pass later
    service.deliver(rid, cancel_message(), seqno=1)  # so this waits in the queue behind it
    await asyncio.wait_for(reader, 10)
    await reading
    assert log.terminal is not None and log.terminal.code == "canceled"
    provider.enqueue(OPENAI_CHAT.text(["after"]))
    after = await rig.ide().turn(run_request("the next question", model=MODEL, conversation_id=conv))
    assert after.terminal is None and after.text == "after"
    assert len(provider.requests) == 2  # the first turn's and the next turn's: the cancelled one never left
    assert "cancelled at once" in provider.requests[-1].body.decode()  # its input is kept


async def test_a_cancel_queued_when_a_tool_round_ends_is_taken_before_the_next_request_leaves(
    warm: tuple[Rig, FakeProviderServer], tmp_path: Path
) -> None:
    """A later cycle's request, whose input is stored already, leaves in the step the engine goes on
    in: what is queued for the runtime by then (a cancel behind another command) is taken first."""
    rig, provider = warm
    (tmp_path / "notes.txt").write_text("the notes\n")
    provider.enqueue(OPENAI_CHAT.tool_calls([CallSpec("call_1", "Read", [json.dumps({"path": str(tmp_path / "notes.txt")})])]))
    ide = rig.ide(tmp_path)
    ide.hold_execs = True
    service = rig.service

    async def exec_held() -> None:
        while not ide.held:  # the IDE got the Read and holds it
            await asyncio.sleep(0.01)

    async def results_then_cancel(rid: str, log: StreamLog) -> None:
        await asyncio.wait_for(exec_held(), 10)
        (_, ex), = ide.held
        for reply in ide.execute(ex):  # the batch ends: the engine goes on in the loop's next pass
            service.deliver(rid, reply)
        service.heartbeat(rid)  # posted: the runtime's task wakes a pass later, behind the engine
        service.deliver(rid, cancel_message())  # so this waits in the queue behind it

    log = await ide.turn(run_request("read the notes", model=MODEL, conversation_id=uuid.uuid4().hex), during=results_then_cancel)
    assert log.terminal is not None and log.terminal.code == "canceled"
    assert len(provider.requests) == 1  # the tool call's: the next cycle's never left
