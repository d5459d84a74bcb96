"""The writer task: batching, commit-then-resolve, failure isolation, flush and close."""
from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from cursor_byok.store import (
    ConstraintViolation,
    EventKind,
    FlushError,
    NewEvent,
    RunRecord,
    Store,
    StoreClosedError,
    WriteFailedError,
)


def _event(event_id: str, payload: bytes = b"p") -> NewEvent:
    return NewEvent(event_id, EventKind.USER, payload)


async def test_concurrent_writes_share_few_transactions(store: Store, conversation) -> None:
    for i in range(50):
        store.upsert_conversation(conversation(f"c{i}"))
    await store.flush()
    before = store.stats.transactions

    async def writer(i: int) -> None:
        for step in range(10):
            await store.append_events(f"c{i}", [_event(f"e{step}")])

    await asyncio.gather(*(writer(i) for i in range(50)))
    committed = store.stats.transactions - before
    # 500 appends, each awaited before the next: one batch per "round" of 50 writers.
    assert committed <= 20, committed
    for i in range(50):
        assert [e.seq for e in await store.load_events(f"c{i}")] == list(range(1, 11))


async def test_batch_size_is_capped(store_location: Path | str, conversation) -> None:
    store = await Store.open(store_location, max_batch_ops=10)
    try:
        store.upsert_conversation(conversation("c"))
        futures = [store.append_events("c", [_event(f"e{i}")]) for i in range(95)]
        await asyncio.gather(*futures)
        assert store.stats.transactions == 10  # 96 writes in batches of at most 10
        assert [r.results[0].seq for r in (f.result() for f in futures)] == list(range(1, 96))
    finally:
        await store.close()


async def test_future_resolves_only_after_commit(store: Store, conversation, committed) -> None:
    seen_at_resolution: list[int] = []

    def count() -> int:
        return committed("SELECT COUNT(*) FROM history_events")[0][0]

    store.upsert_conversation(conversation("c"))
    future = store.append_events("c", [_event("e1"), _event("e2")])
    future.add_done_callback(lambda _: seen_at_resolution.append(count()))
    assert count() == 0  # enqueued, not yet written
    await future
    assert seen_at_resolution == [2]


async def test_one_failing_write_does_not_fail_its_neighbours(store: Store, conversation) -> None:
    await store.upsert_conversation(conversation("c"))
    await store.start_run(RunRecord("run-1", "c", "modeling", started_at_ms=1))

    # All of these land in one batch.
    ok_before = store.append_events("c", [_event("e1")])
    missing_conv = store.append_events("nope", [_event("x")])  # foreign key violation
    duplicate_run = store.start_run(RunRecord("run-1", "c", "modeling", started_at_ms=2))
    ok_after = store.append_events("c", [_event("e2")])
    checkpoint = store.put_checkpoint("c", b"state", kind="final")
    results = await asyncio.gather(ok_before, missing_conv, duplicate_run, ok_after, checkpoint,
                                   return_exceptions=True)

    assert results[0].results[0].seq == 1
    assert isinstance(results[1], WriteFailedError)
    assert isinstance(results[1].__cause__, (sqlite3.IntegrityError, ConstraintViolation))
    assert isinstance(results[2], WriteFailedError)
    assert results[3].results[0].seq == 2  # no gap left by the failed append
    assert results[4].state == b"state" and results[4].through_event_seq == 2
    assert store.stats.isolation_replays == 1
    assert [e.event_id for e in await store.load_events("c")] == ["e1", "e2"]
    assert await store.load_events("nope") == []

    with pytest.raises(FlushError) as caught:
        await store.flush()
    assert len(caught.value.errors) == 2
    await store.flush()  # reported once


async def test_fire_and_forget_errors_surface_on_flush(store: Store) -> None:
    store.append_events("never-created", [_event("e")])
    with pytest.raises(FlushError) as caught:
        await store.flush()
    assert "never-created" in str(caught.value)


async def test_flush_waits_for_everything_queued(store: Store, conversation, committed) -> None:
    store.upsert_conversation(conversation("c"))
    for i in range(200):
        store.append_events("c", [_event(f"e{i}")])
    await store.flush()
    assert committed("SELECT COUNT(*), MAX(seq) FROM history_events") == [(200, 200)]


async def test_close_commits_pending_writes(store_location: Path | str, conversation) -> None:
    store = await Store.open(store_location)
    store.upsert_conversation(conversation("c"))
    pending = store.append_events("c", [_event("e1")])
    await store.close()
    assert pending.done() and pending.result().results[0].seq == 1
    with pytest.raises(StoreClosedError):
        store.append_events("c", [_event("e2")])
    await store.close()  # idempotent

    reopened = await Store.open(store_location)
    try:
        assert [e.event_id for e in await reopened.load_events("c")] == ["e1"]
    finally:
        await reopened.close()


async def test_cancelling_a_waiter_does_not_cancel_the_write(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("c"))
    waiter = asyncio.ensure_future(store.append_events("c", [_event("e1")]))
    await asyncio.sleep(0)
    waiter.cancel()
    await store.flush()
    assert [e.event_id for e in await store.load_events("c")] == ["e1"]


async def test_invalid_arguments_are_rejected_before_queueing(store: Store) -> None:
    for bad_kind in ("", "Not A Kind", "user;drop", 7):
        with pytest.raises(ValueError):
            store.append_events("c", [NewEvent("e", bad_kind, b"")])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.append_events("c", [NewEvent("", EventKind.USER, b"")])
    with pytest.raises(TypeError):
        store.append_events("c", [NewEvent("e", EventKind.USER, "text")])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.finish_run("r", "exploded")
    with pytest.raises(ValueError):
        store.put_checkpoint("c", b"", kind="weekly")
    with pytest.raises(TypeError):
        store.put_checkpoint("c", "text", kind="final")  # type: ignore[arg-type]
    assert store.stats.batches == 0


async def test_injected_clock_stamps_defaults(store_location: Path | str, conversation) -> None:
    store = await Store.open(store_location, clock=lambda: 4242)
    try:
        store.upsert_conversation(conversation("c"))
        store.bind_request("r", "c")
        store.append_events("c", [_event("e")])
        checkpoint = await store.put_checkpoint("c", b"s", kind="step")
        assert checkpoint.created_at_ms == 4242
        assert (await store.load_events("c"))[0].created_at_ms == 4242
        assert (await store.lookup_binding("r")).created_at_ms == 4242
    finally:
        await store.close()


async def test_run_starts_in_one_instant_share_one_commit(store: Store, conversation) -> None:
    """What 200 runs starting at once write (conversation, binding, run, durable input) is handed to
    the writer as one list and committed as one transaction; every future resolves after it."""
    await store.flush()
    before = store.stats.transactions
    inputs = []
    for i in range(200):
        store.upsert_conversation(conversation(f"c{i}"))
        store.bind_request(f"r{i}", f"c{i}")
        store.start_run(RunRecord(f"run-{i}", f"c{i}", "preparing", started_at_ms=1))
        inputs.append(store.append_events(f"c{i}", [_event("user-1", b"x" * 12_000)]))
    results = await asyncio.gather(*inputs)
    assert store.stats.transactions - before == 1
    assert all(r.results[0].seq == 1 for r in results)
