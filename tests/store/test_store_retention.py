"""Retention: finished runs, traces and usage older than their age go, a batch at a time; runs in
progress and every piece of conversation history stay."""
from __future__ import annotations

import asyncio
import time

from cursor_byok.store import EventKind, NewEvent, Retained, RunRecord, Store, TraceRecord, UsageRecord, keep_retention
from tests.store.conftest import Committed

DAY = 86_400_000
NOW = 400 * DAY


def counts(committed: Committed) -> dict[str, int]:
    tables = ("conversations", "request_bindings", "runs", "history_events", "checkpoints", "traces", "usage")
    return {t: committed(f"SELECT COUNT(*) FROM {t}")[0][0] for t in tables}


async def test_old_records_that_are_not_history_go(store: Store, conversation, committed: Committed) -> None:
    store.upsert_conversation(conversation("c"))
    for day in range(0, 400, 4):  # a run every four days for 400 days, each with its usage and trace
        at = day * DAY
        run_id = f"run-{day}"
        store.bind_request(f"rq-{day}", "c", created_at_ms=at)
        store.start_run(RunRecord(run_id, "c", "preparing", at))
        store.finish_run(run_id, "succeeded", ended_at_ms=at + 1_000)
        store.append_events("c", [NewEvent(f"ev-{day}", EventKind.USER, b"{}", run_id=run_id, created_at_ms=at)])
        store.put_checkpoint("c", b"state", kind="final", run_id=run_id, created_at_ms=at)
        store.record_usage(UsageRecord("m", "anthropic", at + 1_000, run_id=run_id, conversation_id="c"))
        store.record_trace(TraceRecord(f"t-{day}", "local_byok", "POST", "/x", started_at_ms=at))
    store.start_run(RunRecord("run-open", "c", "modeling", 0))  # started 400 days ago, still going
    await store.flush()
    before = counts(committed)

    pruned = await store.apply_retention({Retained.RUNS: 180 * DAY, Retained.TRACES: 30 * DAY, Retained.USAGE: 0}, NOW)
    assert pruned == {Retained.RUNS: 55, Retained.TRACES: 93}
    after = counts(committed)
    assert after == {**before, "runs": before["runs"] - 55, "traces": before["traces"] - 93}
    assert committed("SELECT MIN(ended_at_ms) FROM runs WHERE outcome IS NOT NULL")[0][0] >= NOW - 180 * DAY
    assert committed("SELECT run_id FROM runs WHERE outcome IS NULL") == [("run-open",)]
    assert committed("SELECT MIN(started_at_ms) FROM traces")[0][0] >= NOW - 30 * DAY
    # Nothing left to prune: a second pass deletes nothing.
    assert await store.apply_retention({Retained.RUNS: 180 * DAY, Retained.TRACES: 30 * DAY}, NOW) == {Retained.RUNS: 0, Retained.TRACES: 0}


async def test_a_backlog_goes_in_small_batches(store: Store, conversation, committed: Committed) -> None:
    store.upsert_conversation(conversation("c"))
    for n in range(1_050):
        store.record_usage(UsageRecord("m", "anthropic", n, conversation_id="c"))
    await store.flush()
    writes = store.stats.writes
    assert await store.prune_older(Retained.USAGE, 1_000, batch=100, pause=0) == 1_000
    assert store.stats.writes - writes == 10  # one write per batch
    assert committed("SELECT MIN(created_at_ms), COUNT(*) FROM usage") == [(1_000, 50)]


async def test_the_server_side_loop_prunes_again_and_again(store: Store, conversation, committed: Committed) -> None:
    store.upsert_conversation(conversation("c"))
    store.record_trace(TraceRecord("old", "local_byok", "POST", "/x", started_at_ms=1))
    await store.flush()
    loop = asyncio.create_task(keep_retention(store, {"traces": DAY, "usage": 0}, first_after=0, every=0.05))
    try:
        await wait_for_traces(committed, 0)
        store.record_trace(TraceRecord("later", "local_byok", "POST", "/x", started_at_ms=2))  # old on arrival
        store.record_trace(TraceRecord("fresh", "local_byok", "POST", "/x", started_at_ms=time.time_ns() // 1_000_000))
        await store.flush()
        await wait_for_traces(committed, 1)
    finally:
        loop.cancel()
    assert committed("SELECT trace_id FROM traces") == [("fresh",)]


async def wait_for_traces(committed: Committed, left: int) -> None:
    for _ in range(200):
        if committed("SELECT COUNT(*) FROM traces")[0][0] == left:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"traces never came down to {left}")
