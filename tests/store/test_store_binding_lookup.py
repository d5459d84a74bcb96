"""A request id's binding is looked up in the caller's own step: every turn comes on a fresh request
id that memory cannot vouch for, and a hop to the reader thread and back for each one is time
on the path to the provider. Memory here is without the store's snapshot of stored ids (as before
it is in: held so, not raced; with it a fresh id costs no read at all, test_store_stored_ids.py)."""
from __future__ import annotations

from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from cursor_byok.store import Store
from tests.harness.stored_ids import snapshots_cannot_tell

# The loop reads the binding itself on the embedded store; a PostgreSQL read is a network round trip
# and always goes to the reader thread.
pytestmark = pytest.mark.embedded_only("the event loop reads bindings itself on SQLite only")


def answered_at_once(lookup: Coroutine[Any, Any, str | None]) -> str | None:
    """The lookup's answer, if it has one without waiting for anything (else the test fails)."""
    with pytest.raises(StopIteration) as done:
        lookup.send(None)
    return done.value.value


async def test_a_fresh_request_id_is_answered_in_the_callers_step(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshots_cannot_tell(monkeypatch)
    assert answered_at_once(store.lookup_conversation("r-fresh")) is None


async def test_a_stored_binding_memory_let_go_is_answered_in_the_callers_step(
    db_path: Path, conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshots_cannot_tell(monkeypatch)
    store = await Store.open(db_path, binding_cache=1)
    try:
        store.upsert_conversation(conversation("a"))
        for n in range(3):
            store.bind_request(f"r{n}", "a")
        await store.flush()
        assert store.bound_conversation("r0") is None
        assert answered_at_once(store.lookup_conversation("r0")) == "a"
        assert store.bound_conversation("r0") == "a"  # cached
    finally:
        await store.close()

    store = await Store.open(db_path)
    try:
        assert answered_at_once(store.lookup_conversation("r1")) == "a"
        assert answered_at_once(store.lookup_conversation("r-never")) is None
    finally:
        await store.close()
