"""Run ledger: phases, first outcome wins, unfinished runs found after a restart."""
from __future__ import annotations

import msgspec
import pytest

from cursor_byok.store import BindingConflict, FlushError, RunOutcome, RunRecord, Store, WriteFailedError


async def test_run_lifecycle(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("c"))
    store.start_run(RunRecord("r1", "c", "preparing", started_at_ms=10, cursor_run_id="cr", request_id="q"))
    store.update_run_phase("r1", "modeling")
    await store.update_run_phase("r1", "waiting_tools")
    run = await store.get_run("r1")
    assert (run.phase, run.outcome, run.ended_at_ms) == ("waiting_tools", None, None)

    await store.finish_run("r1", RunOutcome.FAILED, ended_at_ms=20, error_code="provider", error_message="503")
    await store.finish_run("r1", RunOutcome.SUCCEEDED, ended_at_ms=30)  # too late: first wins
    await store.update_run_phase("r1", "modeling")  # ended runs keep their last phase
    run = await store.get_run("r1")
    assert (run.phase, run.outcome, run.ended_at_ms, run.error_code, run.error_message) == (
        "waiting_tools", RunOutcome.FAILED, 20, "provider", "503",
    )
    assert await store.get_run("missing") is None


async def test_unfinished_runs_are_found_after_reopen(store_location, conversation) -> None:
    store = await Store.open(store_location)
    store.upsert_conversation(conversation("c"))
    store.upsert_conversation(conversation("d"))
    for i, conv in enumerate(["c", "c", "d"]):
        store.start_run(RunRecord(f"r{i}", conv, "modeling", started_at_ms=i))
    store.finish_run("r1", "succeeded", ended_at_ms=50)
    await store.close()  # the process "dies" with r0 and r2 active

    store = await Store.open(store_location)
    try:
        unfinished = await store.find_unfinished_runs()
        assert [(r.run_id, r.conversation_id, r.phase) for r in unfinished] == [
            ("r0", "c", "modeling"), ("r2", "d", "modeling"),
        ]
        # One conversation's (another instance taking it over): an index range, not every one's.
        assert [r.run_id for r in await store.find_unfinished_runs("d")] == ["r2"]
        for run in unfinished:
            store.finish_run(run.run_id, RunOutcome.INTERRUPTED_BY_CRASH, ended_at_ms=99)
        await store.flush()
        assert await store.find_unfinished_runs() == []
        assert [(r.run_id, r.outcome) for r in await store.list_runs("c")] == [
            ("r0", RunOutcome.INTERRUPTED_BY_CRASH), ("r1", RunOutcome.SUCCEEDED),
        ]
    finally:
        await store.close()


async def test_start_run_requires_an_active_run(store: Store) -> None:
    with pytest.raises(ValueError):
        store.start_run(RunRecord("r", "c", "done", started_at_ms=1, outcome=RunOutcome.SUCCEEDED, ended_at_ms=2))


async def test_every_index_of_the_runs_table_serves_a_query(store: Store, committed) -> None:
    """Each run start writes every index of its row: by conversation (its runs, their count, a
    deletion's), unfinished (a restart's recovery) and finished (retention). None by Cursor run id:
    no query reads runs by it."""
    await store.flush()
    if store.path is None:
        names = committed("SELECT indexname FROM pg_indexes WHERE tablename = 'runs' AND indexname <> 'runs_pkey'")
    else:
        names = committed("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs' AND sql IS NOT NULL")
    assert sorted(n for (n,) in names) == ["runs_by_conversation", "runs_finished", "runs_unfinished"]


async def test_a_run_start_is_one_write_binding_its_request_and_updating_its_conversation(store: Store, conversation) -> None:
    await store.upsert_conversation(conversation("c"))
    writes = store.stats.writes
    updated = msgspec.structs.replace(conversation("c"), updated_at_ms=99, last_cursor_run_id="cr")
    started = store.start_run(
        RunRecord("r1", "c", "preparing", started_at_ms=10, cursor_run_id="cr", request_id="q"), bind=True, conversation=updated
    )
    assert store.bound_conversation("q") == "c"  # known at once, as bind_request's
    assert await started is None
    assert store.stats.writes == writes + 1
    assert (await store.get_run("r1")).request_id == "q"
    assert (await store.lookup_binding("q")).cursor_run_id == "cr"
    assert (await store.get_conversation("c")).updated_at_ms == 99
    with pytest.raises(BindingConflict):  # refused at once, nothing queued
        store.start_run(RunRecord("r2", "d", "preparing", started_at_ms=11, request_id="q"), bind=True)
    await store.flush()
    assert await store.get_run("r2") is None


async def test_a_run_start_whose_binding_the_store_refuses_fails_whole(store_location, conversation) -> None:
    store = await Store.open(store_location, binding_cache=1)
    try:
        for cid in ("a", "b"):
            store.upsert_conversation(conversation(cid))
        store.bind_request("q", "a")
        store.bind_request("other", "a")
        await store.flush()
        assert store.bound_conversation("q") is None  # pushed out: only the writer finds the conflict
        refused = store.start_run(RunRecord("r1", "b", "preparing", started_at_ms=10, request_id="q"), bind=True)
        with pytest.raises(WriteFailedError) as caught:
            await refused
        assert isinstance(caught.value.__cause__, BindingConflict)
        with pytest.raises(FlushError):
            await store.flush()
        assert await store.get_run("r1") is None  # its row went with its binding
        assert await store.lookup_conversation("q") == "a"
        assert await store.start_run(RunRecord("r1", "a", "preparing", started_at_ms=10, request_id="q"), bind=True) is None
    finally:
        await store.close()
