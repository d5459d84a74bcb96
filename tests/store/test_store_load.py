"""What a conversation's runtime loads when it starts: record, events and tool state in one read."""
from __future__ import annotations

import asyncio

import pytest

from cursor_byok.store import ConversationRows, EventKind, NewEvent, ParentRef, Store
from tests.harness.stored_ids import snapshots_cannot_tell, snapshots_taken


async def test_a_conversation_loads_with_its_record_events_and_tool_state(store_location, conversation) -> None:
    store = await Store.open(store_location)
    record = conversation("c", parent=ParentRef("root", "run-1", "call-1"))
    store.upsert_conversation(record)
    store.append_events("c", [NewEvent(event_id="e1", kind="user", payload=b"one"), NewEvent(event_id="e2", kind="assistant", payload=b"two")])
    await store.put_tool_state("c", b"state")
    await store.close()

    store = await Store.open(store_location)
    try:
        rows = await store.load_conversation("c")
        assert rows.record == record and rows.tool_state == b"state"
        assert [(e.seq, e.event_id, e.payload) for e in rows.events] == [(1, "e1", b"one"), (2, "e2", b"two")]
        assert await store.load_conversation("new") == ConversationRows(None, [], None)
        # Read into what the caller makes of the rows as they are read (no record per row in between).
        made = await store.load_conversation("c", list)
        assert made.events == [(1, "e1", "user", None, b"one"), (2, "e2", "assistant", None, b"two")]
        assert made.record == record and made.tool_state == b"state"
    finally:
        await store.close()


@pytest.mark.embedded_only("the event loop reads the database itself on SQLite only")
async def test_a_conversation_stored_nowhere_is_told_at_once(store: Store, conversation) -> None:
    """A new conversation's start need not wait for the reader thread to learn it has no history,
    even while a write is being committed (it was never stored nor queued); one with a committed
    row, or queued, is read as before."""
    with pytest.MonkeyPatch.context() as held:  # before the snapshot of stored ids is in: read on the idle loop
        snapshots_cannot_tell(held)
        assert store.holds_nothing_of("new")
    await snapshots_taken(store)  # the store knows which conversations it holds
    store.upsert_conversation(conversation("old"))
    store.hand_over_now()  # committed on the loop: nothing in flight after it
    store.append_events("old", [NewEvent("e1", EventKind.USER, b"{}")])
    store.upsert_conversation(conversation("queued"))
    await asyncio.sleep(0)  # handed to the writer thread, not yet delivered back
    assert store.holds_nothing_of("new")
    assert not store.holds_nothing_of("queued")  # cannot tell without waiting
    await store.flush()
    assert not store.holds_nothing_of("old")
    assert store.holds_nothing_of("new")
    rows = await store.load_conversation("new")
    assert rows.record is None and rows.events == [] and rows.tool_state is None
