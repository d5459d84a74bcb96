"""A turn start's transaction reads nothing the store already knows: a new conversation's first
seq (the loop found no row of it) and whether its fresh request id is bound elsewhere (the loop
found no binding of it). Each probe is a statement in the writer's transaction per start."""
from __future__ import annotations

from pathlib import Path

import pytest

from cursor_byok.store import EventKind, NewEvent, RunRecord, Store
from tests.harness.stored_ids import snapshots_cannot_tell

# The loop knows these answers only from the reads it makes itself, on the embedded store; on a
# shared PostgreSQL database another server may write the same rows, so its writer probes them.
pytestmark = pytest.mark.embedded_only("the event loop reads the database itself on SQLite only")


async def test_a_new_conversations_start_on_a_fresh_request_id_probes_nothing(
    db_path: Path, conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop's own reads find nothing (the snapshot of stored ids held at "cannot tell", as
    before it is in: with it the loop knows so without a read, test_store_stored_ids.py)."""
    snapshots_cannot_tell(monkeypatch)
    statements: list[str] = []
    store = await Store.open(db_path, trace=statements.append)
    try:
        await store.flush()
        del statements[:]
        assert await store.lookup_conversation("r-fresh") is None  # the gateway's resolve
        assert store.holds_nothing_of("c-new")  # the runtime's load
        store.upsert_conversation(conversation("c-new"))
        store.record_append("r-fresh", "", 0, b"the run request")
        stored = store.append_events("c-new", [NewEvent("user-1", EventKind.USER, b"the turn")])
        store.hand_over_now()
        store.bind_request("r-fresh", "c-new", later=True)
        store.start_run(RunRecord("run-1", "c-new", "preparing", started_at_ms=1), later=True)
        assert (await stored).results[0].seq == 1
        await store.flush()
        written = [s for s in statements if not s.startswith("SELECT 1 FROM conversations") and "request_bindings WHERE" not in s]
        assert not [s for s in written if "json_each" in s], written
        assert (await store.append_events("c-new", [NewEvent("agent-1", EventKind.ASSISTANT, b"x")])).results[0].seq == 2
        assert store.bound_conversation("r-fresh") == "c-new"
    finally:
        await store.close()


async def test_a_binding_stored_by_another_process_after_the_lookup_is_still_refused(db_path: Path, conversation, raw_db) -> None:
    """The loop's 'not bound' holds only until something else binds the request id: a binding
    committed since (here by another connection) is probed and the bind refused, as before."""
    store = await Store.open(db_path)
    try:
        store.upsert_conversation(conversation("a"))
        store.upsert_conversation(conversation("b"))
        await store.flush()
        assert await store.lookup_conversation("r1") is None
        other = raw_db()
        other.execute("INSERT INTO request_bindings (request_id, conversation_id, created_at_ms) VALUES ('r1', 'a', 1)")
        with pytest.raises(Exception, match="bound"):
            await store.bind_request("r1", "b")
    finally:
        await store.close()
