"""A new turn's fresh request id and new conversation are known not stored without a read: the
embedded store holds the ids stored when it opened and those it queued since (`StoredIds`). Every
other id is read as before, so what an earlier process stored is still found."""
from __future__ import annotations

from pathlib import Path

import pytest

from cursor_byok.store import Store, stored_ids
from cursor_byok.store.stored_ids import StoredIds
from tests.harness.stored_ids import snapshots_taken

pytestmark = pytest.mark.embedded_only("only this process writes an embedded store's ids")


async def reopened_with_bindings(db_path: Path, conversation, request_ids: list[str]) -> tuple[Store, list[str]]:
    """A store that an earlier process left with conversation "a" bound to `request_ids`, opened
    again with its statements traced, once its snapshots are taken."""
    store = await Store.open(db_path)
    try:
        store.upsert_conversation(conversation("a"))
        for request_id in request_ids:
            store.bind_request(request_id, "a")
        await store.flush()
    finally:
        await store.close()
    statements: list[str] = []
    store = await Store.open(db_path, trace=statements.append)
    await snapshots_taken(store)
    return store, statements


def reads(statements: list[str]) -> list[str]:
    return [s for s in statements if s.startswith("SELECT") and ("request_bindings" in s or "FROM conversations" in s)]


async def test_a_fresh_request_id_and_a_new_conversation_cost_no_read(db_path: Path) -> None:
    statements: list[str] = []
    store = await Store.open(db_path, trace=statements.append)
    try:
        await snapshots_taken(store)
        del statements[:]
        assert await store.lookup_conversation("r-fresh") is None
        assert store.holds_nothing_of("c-new")
        assert reads(statements) == []
    finally:
        await store.close()


async def test_ids_an_earlier_process_stored_are_read_and_found(db_path: Path, conversation) -> None:
    store, statements = await reopened_with_bindings(db_path, conversation, ["r-a"])
    try:
        del statements[:]
        assert await store.lookup_conversation("r-a") == "a"
        assert not store.holds_nothing_of("a")
        assert len(reads(statements)) == 2
    finally:
        await store.close()


async def test_past_the_limit_a_new_snapshot_is_taken_and_nothing_is_missed(
    db_path: Path, conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stored_ids, "SINCE_LIMIT", 3)
    store = await Store.open(db_path, binding_cache=1)
    try:
        store.upsert_conversation(conversation("a"))
        for n in range(10):
            store.bind_request(f"r{n}", "a")
        await store.flush()
        await snapshots_taken(store)  # taken again (after a flush) as the ids passed the limit
        assert store._stored_requests.ready
        for n in range(10):
            assert await store.lookup_conversation(f"r{n}") == "a"
        assert await store.lookup_conversation("r-fresh") is None
    finally:
        await store.close()


def test_stored_ids_answer_absent_only_for_ids_neither_stored_nor_queued() -> None:
    ids = StoredIds()
    assert not ids.absent("x")  # no snapshot yet: maybe
    ids.queued("q")
    ids.loaded(stored_ids.array("q", sorted([hash("s")])))
    assert not ids.absent("s") and not ids.absent("q")
    assert ids.absent("x")
    unkept = StoredIds(kept=False)
    assert not any(unkept.queued(str(n)) for n in range(stored_ids.SINCE_LIMIT + 2))
    assert not unkept.absent("x")


async def test_past_the_cap_no_ids_are_kept_and_every_id_is_read(
    db_path: Path, conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stored_ids, "SNAPSHOT_CAP", 2)
    store, statements = await reopened_with_bindings(db_path, conversation, ["r0", "r1", "r2"])
    try:
        assert not store._stored_requests.ready  # three bindings: past the cap
        store.bind_request("r-new", "a")  # and nothing queued is kept either
        await store.flush()
        del statements[:]
        assert await store.lookup_conversation("r-fresh") is None
        assert await store.lookup_conversation("r-new") == "a"
        # The fresh id is read (the bound one is in the binding memory), and nothing was kept.
        assert reads(statements) == ["SELECT conversation_id FROM request_bindings WHERE request_id = 'r-fresh'"]
        assert not store._stored_requests.absent("r-fresh") and not store._stored_requests._since
    finally:
        await store.close()
