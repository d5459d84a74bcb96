"""What a conversation's runtime loads when it starts: record, events and tool state in one read."""
from __future__ import annotations

from cursor_byok.store import ConversationRows, NewEvent, ParentRef, Store


async def test_a_conversation_loads_with_its_record_events_and_tool_state(db_path, conversation) -> None:
    store = await Store.open(db_path)
    record = conversation("c", parent=ParentRef("root", "run-1", "call-1"))
    store.upsert_conversation(record)
    store.append_events("c", [NewEvent(event_id="e1", kind="user", payload=b"one"), NewEvent(event_id="e2", kind="assistant", payload=b"two")])
    await store.put_tool_state("c", b"state")
    await store.close()

    store = await Store.open(db_path)
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
