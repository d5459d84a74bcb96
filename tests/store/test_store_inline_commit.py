"""A write someone is about to wait on commits at once, on the loop, when the writer is idle: no
hand-over to the writer thread and back. Never at another process's pace (its write lock sends the
write to the thread, which waits for it), and starts queued in one instant still share commits."""
from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from cursor_byok.store import EventKind, NewEvent, RunRecord, Store, WriteFailedError
from cursor_byok.store.connection import WAL_KEEP_BYTES
from tests.harness.stored_ids import snapshots_cannot_tell


def _event(event_id: str, payload: bytes = b"p") -> NewEvent:
    return NewEvent(event_id, EventKind.USER, payload)


async def test_an_awaited_write_commits_in_the_same_step_when_the_writer_is_idle(store: Store, conversation, raw_db) -> None:
    store.upsert_conversation(conversation("c"))
    await store.flush()
    store.record_append("r1", "", 0, b"the append")
    stored = store.append_events("c", [_event("user-1", b"the turn")])
    store.hand_over_now()
    assert stored.done() and stored.result().results[0].seq == 1
    observer = raw_db()
    assert observer.execute("SELECT count(*) FROM history_events").fetchone()[0] == 1
    assert observer.execute("SELECT count(*) FROM inbound_appends").fetchone()[0] == 1  # the same commit


async def test_another_process_lock_sends_the_write_to_the_thread_and_never_blocks_the_loop(store: Store, conversation, db_path: Path) -> None:
    store.upsert_conversation(conversation("c"))
    await store.flush()
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    ticks = 0
    ticks_while_locked: list[int] = []

    def release() -> None:
        ticks_while_locked.append(ticks)
        holder.execute("ROLLBACK")

    threading.Timer(0.3, release).start()
    try:
        stored = store.append_events("c", [_event("user-1")])
        store.hand_over_now()
        assert not stored.done()
        while not stored.done():
            ticks += 1
            await asyncio.sleep(0.01)
        assert stored.result().results[0].seq == 1
    finally:
        holder.close()
    assert ticks_while_locked and ticks_while_locked[0] > 0  # the loop ran while the lock was held


async def test_starts_in_passes_of_their_own_all_commit_on_the_idle_loop(store: Store, conversation, raw_db) -> None:
    """However soon after the loop's previous commit: while the writer thread is idle a hop to it
    and back costs more CPU than the commit itself, in both threads."""
    raw_db()  # SQLite only: the loop commits nothing on PostgreSQL
    store.upsert_conversation(conversation("c"))
    await store.flush()
    before = store.stats.loop_commits
    for n in range(5):
        store.record_append("r", "", n, b"the append")
        stored = store.append_events("c", [_event(f"user-{n}")])
        store.hand_over_now()
        assert stored.done(), f"start {n} went to the writer thread"
        await asyncio.sleep(0)  # the next start comes in a later pass of the loop
    assert store.stats.loop_commits - before == 5


async def test_awaited_run_starts_in_one_instant_still_share_commits(store: Store, conversation) -> None:
    await store.flush()
    before = store.stats.transactions
    inputs = []
    for i in range(200):
        store.upsert_conversation(conversation(f"c{i}"))
        store.bind_request(f"r{i}", f"c{i}")
        store.start_run(RunRecord(f"run-{i}", f"c{i}", "preparing", started_at_ms=1))
        inputs.append(store.append_events(f"c{i}", [_event("user-1", b"x" * 12_000)]))
        store.hand_over_now()
    results = await asyncio.gather(*inputs)
    assert store.stats.transactions - before < 20
    assert all(r.results[0].seq == 1 for r in results)


async def test_the_wal_stays_bounded_with_sqlites_own_checkpoint_off(store: Store, conversation, db_path: Path) -> None:
    """SQLite's own checkpoint is off (it would run inside a COMMIT): checkpoints run on their own
    thread, after the loop's commits as after the writer thread's, and the WAL starts over even under
    a flood of commits that leaves a checkpoint beside them no quiet moment (the writer runs one
    between two transactions when the WAL stays long)."""
    store.upsert_conversation(conversation("c"))
    await store.flush()
    wal = db_path.with_name(db_path.name + "-wal")
    bound = 2 * WAL_KEEP_BYTES
    flood = 3 * bound // 10_000
    for n in range(flood):  # ~3 pages each, 3 bounds in all: a WAL never checkpointed would hold it all
        stored = store.append_events("c", [_event(f"e{n}", bytes([n % 251]) * 10_000)])
        store.hand_over_now()
        await stored
    assert wal.stat().st_size < bound

    spaced_before = db_path.stat().st_size
    loop_commits = store.stats.loop_commits
    # Each write after a pause, the store idle: the loop's, unless the thread holds the connection
    # (checkpointing) at that instant. However they split, their pages reach the database file
    # while the WAL stays bounded; without a checkpoint for the loop's commits they never would.
    written = 0
    while db_path.stat().st_size - spaced_before < 1_500_000 and written < 400:
        await asyncio.sleep(0.025)
        stored = store.append_events("c", [_event(f"s{written}", bytes([written % 251]) * 30_000)])
        store.hand_over_now()
        await stored
        written += 1
    assert db_path.stat().st_size - spaced_before >= 1_500_000, f"nothing checkpointed after {written} spaced commits"
    assert store.stats.loop_commits - loop_commits >= written // 2  # most were the loop's
    assert wal.stat().st_size < bound
    await store.flush()
    assert [e.seq for e in await store.load_events("c")][-1] == flood + written


async def test_while_a_store_thread_is_busy_the_write_goes_to_the_writer_thread(
    store: Store, conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop would let go of the interpreter lock at every SQLite call, and a busy store thread
    could keep it meanwhile: the loop uses SQLite itself only when both threads are idle. (The
    snapshot of stored ids held at "cannot tell", as before it is in, so the fresh id is read.)"""
    snapshots_cannot_tell(monkeypatch)
    store.upsert_conversation(conversation("c"))
    await store.flush()
    reading = asyncio.create_task(store.get_conversation("c"))
    await asyncio.sleep(0)  # the read is on the reader thread, its answer not yet taken
    stored = store.append_events("c", [_event("user-1")])
    store.hand_over_now()
    assert not stored.done()
    assert (await stored).results[0].seq == 1
    assert (await reading) is not None
    handed = store.upsert_conversation(conversation("d"))  # on the writer thread now
    assert await store.lookup_conversation("r-fresh") is None  # answered by the reader thread
    await handed


async def test_a_loop_commit_is_its_transaction_alone(db_path: Path, conversation) -> None:
    """No statement around the loop's commit: the connection never waits for another process's lock
    (the writer thread waits for one itself) and never checkpoints in a COMMIT (checkpoints run on
    their own thread), so nothing is switched off and on again around each commit on a start's path."""
    statements: list[str] = []
    store = await Store.open(db_path, trace=statements.append)
    try:
        store.upsert_conversation(conversation("c"))
        await store.flush()
        del statements[:]
        stored = store.append_events("c", [_event("user-1")])
        store.hand_over_now()
        assert stored.done()
        loop_commit = list(statements)
    finally:
        await store.close()
    assert loop_commit[0] == "BEGIN IMMEDIATE" and loop_commit[-1] == "COMMIT", loop_commit
    assert not [sql for sql in loop_commit if sql.startswith("PRAGMA")]


async def test_the_writer_thread_gives_up_on_a_lock_held_past_its_busy_timeout(db_path: Path, conversation) -> None:
    store = await Store.open(db_path, busy_timeout_ms=300)
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    try:
        store.upsert_conversation(conversation("c"))
        await store.flush()
        holder.execute("BEGIN IMMEDIATE")
        started = asyncio.get_running_loop().time()
        stored = store.append_events("c", [_event("user-1")])
        with pytest.raises(WriteFailedError, match="locked"):
            await asyncio.wait_for(stored, 10)
        assert asyncio.get_running_loop().time() - started >= 0.3  # it waited its busy timeout first
        holder.execute("ROLLBACK")
        assert (await store.append_events("c", [_event("user-2")])).results[0].seq == 1
    finally:
        holder.close()
        await store.close()
