"""Deleting whole conversations: everything they own goes, sub-tasks included; history stays
append-only for everything else; a conversation with a run in progress is left alone."""
from __future__ import annotations

import pytest

from cursor_byok.store import (
    CheckpointKind,
    NewEvent,
    ParentRef,
    RunRecord,
    Store,
    UsageRecord,
    delete_conversations,
    prune_conversations,
)
from tests.store.conftest import Committed


async def populate(store: Store, conversation, cid: str, at_ms: int, *, parent: ParentRef | None = None, running: bool = False) -> None:
    store.upsert_conversation(conversation(cid, at_ms, parent=parent))
    store.bind_request(f"req-{cid}", cid, None)
    store.start_run(RunRecord(run_id=f"run-{cid}", conversation_id=cid, phase="modeling", started_at_ms=at_ms))
    if not running:
        store.finish_run(f"run-{cid}", "succeeded")
    await store.append_events(cid, [NewEvent(f"ev-{cid}", "user", b'{"kind":"user"}')])
    await store.put_checkpoint(cid, b"state", kind=CheckpointKind.FINAL, run_id=f"run-{cid}")
    store.record_usage(UsageRecord("m", "anthropic", at_ms, run_id=f"run-{cid}", conversation_id=cid, output_tokens=3))
    await store.flush()


def counts(committed: Committed, cid: str) -> dict[str, int]:
    return {
        table: committed(f"SELECT COUNT(*) FROM {table} WHERE conversation_id = ?", (cid,))[0][0]
        for table in ("conversations", "request_bindings", "runs", "history_events", "checkpoints", "usage")
    }


async def test_delete_takes_a_conversation_and_its_subtasks(store, store_location, committed, conversation) -> None:
    await populate(store, conversation, "root", 1_000)
    await populate(store, conversation, "child", 1_100, parent=ParentRef("root", "run-root", "call-1"))
    await populate(store, conversation, "other", 1_200)
    result = await delete_conversations(store_location, ["root"])
    assert (result.deleted, result.busy) == (["root", "child"], [])
    for cid in ("root", "child"):
        assert counts(committed, cid) == {"conversations": 0, "request_bindings": 0, "runs": 0, "history_events": 0, "checkpoints": 0, "usage": 1}
    assert counts(committed, "other")["history_events"] == 1
    assert await store.get_conversation("other") is not None


async def test_history_stays_append_only_outside_a_deletion(store, committed, conversation) -> None:
    await populate(store, conversation, "keep", 1_000)
    with pytest.raises(Exception, match="append-only"):  # sqlite3's or psycopg's integrity error
        committed("DELETE FROM history_events WHERE conversation_id = 'keep'")
    assert counts(committed, "keep")["history_events"] == 1


async def test_a_conversation_with_a_run_in_progress_is_left_alone(store, store_location, committed, conversation) -> None:
    await populate(store, conversation, "busy", 1_000, running=True)
    result = await delete_conversations(store_location, ["busy"])
    assert (result.deleted, result.busy) == ([], ["busy"])
    assert counts(committed, "busy")["history_events"] == 1


async def test_prune_takes_old_root_conversations_in_batches(store, store_location, conversation) -> None:
    for i in range(250):  # more than one batch; some with everything a conversation owns
        if i % 50 == 0:
            await populate(store, conversation, f"old-{i:03}", 1_000 + i)
        else:
            store.upsert_conversation(conversation(f"old-{i:03}", 1_000 + i))
    await populate(store, conversation, "new", 10_000)
    await populate(store, conversation, "old-child", 20_000, parent=ParentRef("old-000", "run-old-000", "c"))
    await store.flush()
    result = await prune_conversations(store_location, older_than_ms=5_000)
    assert len(result.deleted) == 251 and "old-child" in result.deleted and result.busy == []
    assert (await store.list_conversations(10)).conversations == [await store.get_conversation("new")]
