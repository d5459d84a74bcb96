"""Conversations, their immutable ParentRef triple, and the JSON export."""
from __future__ import annotations

import base64
import json
import sqlite3

import pytest

from cursor_byok.store import (
    CheckpointKind,
    ConversationRecord,
    EventKind,
    FlushError,
    NewEvent,
    ParentRef,
    RunRecord,
    Store,
    UsageRecord,
    WriteFailedError,
)

PARENT = ParentRef("parent-conv", "parent-run", "tool-call-7")


async def test_parent_triple_round_trips_exactly(store_location, conversation) -> None:
    store = await Store.open(store_location)
    child = conversation("child", parent=PARENT, model_id="byok-sonnet", mode="agent", title="Sub")
    store.upsert_conversation(conversation("root"))
    store.upsert_conversation(child)
    await store.close()

    store = await Store.open(store_location)
    try:
        assert await store.get_conversation("child") == child
        root = await store.get_conversation("root")
        assert root is not None and root.parent is None
        assert await store.get_conversation("missing") is None
    finally:
        await store.close()


@pytest.mark.parametrize("missing", ["parent_conversation_id", "parent_run_id", "parent_tool_call_id"])
def test_partial_parent_triple_cannot_be_built(missing: str) -> None:
    parts = {"parent_conversation_id": "p", "parent_run_id": "r", "parent_tool_call_id": "t"}
    for empty in (None, ""):
        with pytest.raises(ValueError, match=missing):
            ParentRef(**{**parts, missing: empty})


async def test_partial_parent_triple_is_refused_by_the_table(store: Store, raw_db) -> None:
    await store.flush()
    with pytest.raises(sqlite3.IntegrityError):
        raw_db().execute(
            "INSERT INTO conversations (conversation_id, parent_conversation_id, parent_run_id, "
            "created_at_ms, updated_at_ms) VALUES ('x', 'p', 'r', 0, 0)"
        )


async def test_upsert_updates_fields_but_parent_is_immutable(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("c", at_ms=10, parent=PARENT, title="old"))
    await store.upsert_conversation(conversation("c", at_ms=20, parent=PARENT, title="new", model_id="m"))
    stored = await store.get_conversation("c")
    assert (stored.created_at_ms, stored.updated_at_ms, stored.title, stored.model_id) == (10, 20, "new", "m")

    for other in (ParentRef("elsewhere", "parent-run", "tool-call-7"), None):
        with pytest.raises(WriteFailedError, match="immutable"):
            await store.upsert_conversation(conversation("c", at_ms=30, parent=other))
    with pytest.raises(FlushError):
        await store.flush()
    assert (await store.get_conversation("c")).parent == PARENT


async def test_list_conversations_most_recent_first(store: Store) -> None:
    for i, updated in enumerate([5, 30, 10, 20]):
        store.upsert_conversation(ConversationRecord(f"c{i}", 1, updated))
    await store.flush()
    page = await store.list_conversations()
    assert [c.conversation_id for c in page.conversations] == ["c1", "c3", "c2", "c0"] and page.next is None


async def test_list_pages_follow_each_other_by_cursor_ties_included(store: Store) -> None:
    """Every conversation exactly once, in order, however the pages fall across equal times; a
    conversation updated meanwhile moves to the front, it is not shown twice on later pages."""
    updated = [7, 3, 7, 7, 1, 3, 9, 7, 3, 5]
    for i, at in enumerate(updated):
        store.upsert_conversation(ConversationRecord(f"c{i}", 1, at))
    await store.flush()
    expected = [f"c{i}" for i in sorted(range(len(updated)), key=lambda i: (-updated[i], f"c{i}"))]
    for size in (1, 2, 3, 4, 10, 11):
        seen, after = [], None
        while True:
            page = await store.list_conversations(size, after)
            assert len(page.conversations) <= size
            seen += [c.conversation_id for c in page.conversations]
            if page.next is None:
                break
            after = page.next
        assert seen == expected, size
    first = await store.list_conversations(3)
    store.upsert_conversation(ConversationRecord(expected[5], 1, 100))  # bumped while listing
    await store.flush()
    rest = await store.list_conversations(100, first.next)
    assert [c.conversation_id for c in rest.conversations] == [c for c in expected[3:] if c != expected[5]]
    with pytest.raises(ValueError, match="not a page cursor"):
        await store.list_conversations(3, "yesterday")


async def test_export_is_json_able_and_complete(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("c", parent=PARENT))
    store.bind_request("req", "c", "cursor-run")
    store.start_run(RunRecord("run", "c", "modeling", started_at_ms=2, cursor_run_id="cursor-run", request_id="req"))
    store.append_events("c", [NewEvent("e1", EventKind.USER, b"\x00\xffhello", run_id="run")])
    store.put_checkpoint("c", b"state-bytes", kind=CheckpointKind.FINAL, run_id="run")
    store.enqueue_delivery("c", "bg-1", b"done")
    store.record_usage(UsageRecord("m", "anthropic", 3, run_id="run", conversation_id="c", input_tokens=7))
    await store.flush()

    exported = await store.export_conversation("c")
    assert json.loads(json.dumps(exported)) == exported
    assert exported["conversation"]["parent"] == {
        "parent_conversation_id": "parent-conv", "parent_run_id": "parent-run",
        "parent_tool_call_id": "tool-call-7",
    }
    assert [b["request_id"] for b in exported["bindings"]] == ["req"]
    assert [r["run_id"] for r in exported["runs"]] == ["run"]
    assert base64.b64decode(exported["events"][0]["payload"]) == b"\x00\xffhello"
    assert exported["checkpoints"][0]["kind"] == "final"
    assert base64.b64decode(exported["checkpoints"][0]["state"]) == b"state-bytes"
    assert exported["deliveries"][0]["state"] == "pending"
    assert exported["usage"][0]["input_tokens"] == 7
    assert await store.export_conversation("missing") is None


async def test_ids_by_prefix_and_usage_by_run(store, conversation) -> None:
    for cid in ("abc-1", "abc-2", "abd-1", "ab"):
        store.upsert_conversation(conversation(cid))
    store.record_usage(UsageRecord("byok-a", "anthropic", 10, run_id="r1", conversation_id="abc-1", input_tokens=5, output_tokens=1))
    store.record_usage(UsageRecord("byok-a", "anthropic", 20, run_id="r1", conversation_id="abc-1", input_tokens=7, output_tokens=2))
    store.record_usage(UsageRecord("byok-a", "anthropic", 30, run_id="r2", conversation_id="abc-1", input_tokens=1, output_tokens=1, ttft_ms=40))
    await store.flush()
    assert await store.find_conversation_ids("abc") == ["abc-1", "abc-2"]
    assert await store.find_conversation_ids("abc-2") == ["abc-2"]
    assert await store.find_conversation_ids("ab", limit=10) == ["ab", "abc-1", "abc-2", "abd-1"]
    assert await store.find_conversation_ids("zz") == [] and await store.find_conversation_ids("") == []
    usage = await store.usage_by_run("abc-1")
    assert list(usage) == ["r2", "r1"]
    assert (usage["r1"].input_tokens, usage["r1"].output_tokens, usage["r1"].calls) == (12, 3, 2)
    assert usage["r2"].mean_ttft_ms == 40


async def test_ids_by_prefix_are_an_index_range(store, raw_db) -> None:
    await store.flush()
    plan = " ".join(str(row) for row in raw_db().execute(
        "EXPLAIN QUERY PLAN SELECT conversation_id FROM conversations WHERE conversation_id >= ? AND conversation_id < ?",
        ("abc", "abd")))
    assert "USING" in plan and "INDEX" in plan  # a range scan, not a full table scan
