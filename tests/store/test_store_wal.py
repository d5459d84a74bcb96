"""The WAL between checkpoints: the checkpoint thread copies it beside the writer, and the writer
checkpoints itself only when that left the WAL unable to start over."""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from cursor_byok.store import EventKind, NewEvent, Store
from cursor_byok.store.checkpointer import COMMITS_PER_CHECKPOINT, WAL_LIMIT_PAGES

pytestmark = pytest.mark.embedded_only("the WAL and its checkpointer thread are SQLite's")


async def test_a_checkpoint_that_copied_the_whole_wal_leaves_the_writer_alone(db_path: Path, conversation) -> None:
    """A checkpoint beside no commit copies all of a long WAL, so the next write starts it over: the
    writer has no checkpoint of its own to run (one would hold up the writes queued behind it)."""
    statements: list[tuple[str, str]] = []
    store = await Store.open(db_path, trace=lambda sql: statements.append((threading.current_thread().name, sql)))
    try:
        store.upsert_conversation(conversation("c"))
        await store.flush()
        payload = b"x" * (4096 * (WAL_LIMIT_PAGES // COMMITS_PER_CHECKPOINT + 4))  # the WAL past its limit
        for rounds in range(1, 4):
            # The last commit of each round wakes the checkpoint (the conversation's row was the first
            # round's first): no commit beside it.
            for n in range(COMMITS_PER_CHECKPOINT - (rounds == 1)):
                stored = store.append_events("c", [NewEvent(f"e{rounds}-{n}", EventKind.USER, payload)])
                store.hand_over_now()
                await stored
            for _ in range(200):  # the checkpoint runs on its thread, after the last commit
                if len(_checkpoints(statements)) >= rounds:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # time for the writer to run one, had it been asked
        await store.flush()
    finally:
        await store.close()
    checkpoints = _checkpoints(statements)
    assert checkpoints == [("store-checkpoints", "PRAGMA wal_checkpoint(PASSIVE)")] * 3


def _checkpoints(statements: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(thread.split(":")[0], sql) for thread, sql in statements if "wal_checkpoint" in sql]


async def test_the_stores_threads_carry_their_names_for_the_os(store: Store) -> None:
    """`top -H`, `ps -L` and a per-thread CPU account tell the store's threads apart (a thread left
    unnamed carries its process's name)."""
    wanted = {"store-writer", "store-reader", "store-checkpts"}
    for _ in range(200):  # each names itself once it runs
        names = {(task / "comm").read_text().strip() for task in Path("/proc/self/task").iterdir()}
        if wanted <= names:
            break
        await asyncio.sleep(0.01)
    assert wanted <= names
