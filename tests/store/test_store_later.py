"""Writes queued `later` (a run's start records: nothing waits for them): they share the next
commit instead of adding one, and are committed within `LATER_SECONDS` when no other write comes."""
from __future__ import annotations

import asyncio

from cursor_byok.store import EventKind, NewEvent, RunRecord, Store
from cursor_byok.store.core import LATER_SECONDS


def _run(n: int) -> RunRecord:
    return RunRecord(f"run-{n}", "c", "preparing", started_at_ms=1)


async def test_a_later_write_alone_is_committed_within_its_delay(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("c"))
    await store.flush()
    before = store.stats.transactions
    started = store.start_run(_run(1), later=True)
    for _ in range(5):
        await asyncio.sleep(0)
    assert not started.done() and store.stats.transactions == before  # not handed over with this pass
    await asyncio.wait_for(started, LATER_SECONDS * 10)
    assert store.stats.transactions == before + 1


async def test_a_later_write_shares_the_next_writes_commit(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("c"))
    await store.flush()
    before = store.stats.transactions
    started = store.start_run(_run(1), later=True)
    store.bind_request("r1", "c", later=True)
    await asyncio.sleep(0.01)
    stored = store.append_events("c", [NewEvent("e1", EventKind.USER, b"{}")])
    await stored
    assert started.done() and store.stats.transactions == before + 1
    assert [r.run_id for r in await store.list_runs("c")] == ["run-1"]
    assert await store.lookup_conversation("r1") == "c"


async def test_a_later_write_keeps_its_place_in_the_queue(store: Store, conversation) -> None:
    """Queued before a write someone waits on, it commits with it (never after it): a run finished
    right after it started is stored finished."""
    store.upsert_conversation(conversation("c"))
    await store.flush()
    store.start_run(_run(1), later=True)
    store.finish_run("run-1", "failed")
    store.hand_over_now()
    await store.flush()
    assert [(r.run_id, r.outcome) for r in await store.list_runs("c")] == [("run-1", "failed")]


async def test_flush_and_close_commit_later_writes(store_location, conversation) -> None:
    store = await Store.open(store_location)
    store.upsert_conversation(conversation("c"))
    store.start_run(_run(1), later=True)
    await store.flush()
    assert [r.run_id for r in await store.list_runs("c")] == ["run-1"]
    store.start_run(_run(2), later=True)
    await store.close()
    store = await Store.open(store_location)
    try:
        assert [r.run_id for r in await store.list_runs("c")] == ["run-1", "run-2"]
    finally:
        await store.close()
