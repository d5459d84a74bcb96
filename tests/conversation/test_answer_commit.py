"""The turn's answer is handed to the store the moment it is committed (on the loop, when the store
is idle), so the turn's end, which waits for it to be stored, does not wait for the writer thread.
That a tool step's message is not marked so: tests/run/test_engine_loop.py."""
from __future__ import annotations

import asyncio
import dataclasses
import threading

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import run_request
from tests.harness.inprocess import MODEL, Rig


async def test_the_answer_is_committed_on_the_idle_loop_at_once(rig: Rig, provider: FakeProviderServer) -> None:
    assert rig.store is not None
    resume = threading.Event()
    provider.enqueue(dataclasses.replace(OPENAI_CHAT.text(["an ", "answer"]), pause_after=1, resume=resume))
    await rig.store.flush()  # the store's threads idle: nothing of the rig's set-up in flight
    before = rig.store.stats.loop_commits
    turn = asyncio.create_task(rig.ide().turn(run_request("question", model=MODEL, conversation_id="c1")))
    try:
        await asyncio.to_thread(provider.wait_for_requests, 1)
        assert rig.store.stats.loop_commits - before == 1  # the turn's input, before the model was called
        await rig.store.flush()  # what the start queued for later is committed: the threads idle again
        before = rig.store.stats.loop_commits
    finally:
        resume.set()  # the answer's chunks
    log = await turn
    assert "turn_ended" in log.kinds() and log.terminal is None
    assert rig.store.stats.loop_commits - before == 1  # the answer, at once on the loop
