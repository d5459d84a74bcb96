"""The turn's answer is handed to the store the moment it is committed (on the loop, when the store
is idle), so the turn's end, which waits for it to be stored, does not wait for the writer thread.
That a tool step's message is not marked so: tests/run/test_engine_loop.py."""
from __future__ import annotations

import dataclasses

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import run_request
from tests.harness.inprocess import MODEL, Rig

# Chunks apart, as a model's answer is: its commit comes passes of the loop after the input's
# (the loop commits at most once per pass).
SLOW = 0.03


async def test_the_answer_is_committed_on_the_idle_loop_at_once(rig: Rig, provider: FakeProviderServer) -> None:
    assert rig.store is not None
    provider.enqueue(dataclasses.replace(OPENAI_CHAT.text(["an ", "answer"]), chunk_delay=SLOW))
    before = rig.store.stats.loop_commits
    log = await rig.ide().turn(run_request("question", model=MODEL, conversation_id="c1"))
    assert "turn_ended" in log.kinds() and log.terminal is None
    assert rig.store.stats.loop_commits - before == 2  # the turn's input, then its answer
