"""request_id → conversation_id bindings: idempotent for one conversation, a conflict for another."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cursor_byok.store import BindingConflict, BindOutcome, FlushError, Store, WriteFailedError


async def _rows(store: Store, request_id: str) -> int:
    exported = await store.export_conversation("a")
    return sum(1 for b in exported["bindings"] if b["request_id"] == request_id) if exported else 0


async def test_rebinding_to_the_same_conversation_is_idempotent(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("a"))
    assert await store.bind_request("r1", "a", "cursor-run-1", created_at_ms=10) is BindOutcome.BOUND
    assert await store.bind_request("r1", "a", created_at_ms=20) is BindOutcome.ALREADY_BOUND
    binding = await store.lookup_binding("r1")
    assert binding is not None
    assert (binding.conversation_id, binding.cursor_run_id, binding.created_at_ms) == ("a", "cursor-run-1", 10)
    # A retry carrying a new Cursor run id records it.
    assert await store.bind_request("r1", "a", "cursor-run-2") is BindOutcome.ALREADY_BOUND
    assert (await store.lookup_binding("r1")).cursor_run_id == "cursor-run-2"
    assert await _rows(store, "r1") == 1


async def test_binding_to_another_conversation_conflicts_and_writes_nothing(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("a"))
    store.upsert_conversation(conversation("b"))
    await store.bind_request("r1", "a")
    with pytest.raises(BindingConflict) as caught:
        store.bind_request("r1", "b")
    assert (caught.value.request_id, caught.value.bound_conversation_id,
            caught.value.requested_conversation_id) == ("r1", "a", "b")
    await store.flush()
    assert (await store.lookup_binding("r1")).conversation_id == "a"
    assert store.bound_conversation("r1") == "a"


async def test_concurrent_binds_cannot_both_succeed(store: Store, conversation) -> None:
    for cid in ("a", "b", "c", "d"):
        store.upsert_conversation(conversation(cid))
    await store.flush()

    # Both in the same tick, before either is committed.
    first = store.bind_request("r1", "a")
    with pytest.raises(BindingConflict):
        store.bind_request("r1", "b")
    assert await first is BindOutcome.BOUND

    async def attempt(cid: str) -> object:
        await asyncio.sleep(0)
        try:
            return await store.bind_request("r2", cid)
        except BindingConflict as exc:
            return exc

    outcomes = await asyncio.gather(*(attempt(cid) for cid in ("a", "b", "c", "d", "a", "b")))
    winners = {o for o in outcomes if isinstance(o, BindOutcome)}
    conflicts = [o for o in outcomes if isinstance(o, BindingConflict)]
    winner = (await store.lookup_binding("r2")).conversation_id
    assert winners <= {BindOutcome.BOUND, BindOutcome.ALREADY_BOUND}
    assert sum(1 for o in outcomes if o is BindOutcome.BOUND) == 1
    assert all(c.bound_conversation_id == winner for c in conflicts)
    # Every accepted attempt named the winning conversation.
    accepted = [cid for cid, o in zip("abcdab", outcomes) if isinstance(o, BindOutcome)]
    assert set(accepted) == {winner}


async def test_bindings_survive_restart_and_still_conflict(store_location: Path | str, conversation) -> None:
    store = await Store.open(store_location)
    store.upsert_conversation(conversation("a"))
    store.upsert_conversation(conversation("b"))
    store.bind_request("r1", "a")
    await store.close()

    store = await Store.open(store_location)
    try:
        assert store.bound_conversation("r1") is None  # nothing is loaded at start
        assert await store.lookup_conversation("r1") == "a"
        assert await store.lookup_conversation("r-unknown") is None
        assert store.bound_conversation("r1") == "a"  # the lookup is cached
        with pytest.raises(BindingConflict):
            store.bind_request("r1", "b")  # detected synchronously from the cache
        assert await store.bind_request("r1", "a") is BindOutcome.ALREADY_BOUND
    finally:
        await store.close()


async def test_a_binding_memory_no_longer_holds_still_conflicts(store_location: Path | str, conversation) -> None:
    store = await Store.open(store_location, binding_cache=2)
    try:
        for cid in ("a", "b"):
            store.upsert_conversation(conversation(cid))
        for n in range(5):
            store.bind_request(f"r{n}", "a")
        await store.flush()
        assert store.bound_conversation("r0") is None  # pushed out by the later ones
        # Accepted in memory, refused by the writer against the stored binding: nothing moves.
        refused = store.bind_request("r0", "b")
        with pytest.raises(WriteFailedError) as caught:
            await refused
        assert isinstance(caught.value.__cause__, BindingConflict)
        assert caught.value.__cause__.bound_conversation_id == "a"
        with pytest.raises(FlushError):
            await store.flush()
        assert (await store.lookup_binding("r0")).conversation_id == "a"
        assert await store.lookup_conversation("r0") == "a"
        # Found again from the table, it conflicts at once.
        with pytest.raises(BindingConflict):
            store.bind_request("r0", "b")
        assert await store.bind_request("r0", "a") is BindOutcome.ALREADY_BOUND
    finally:
        await store.close()


async def test_memory_holds_a_bounded_number_of_bindings(store_location: Path | str, conversation) -> None:
    store = await Store.open(store_location, binding_cache=8)
    try:
        store.upsert_conversation(conversation("a"))
        for n in range(100):
            store.bind_request(f"r{n}", "a")
        assert store.bound_conversation("r0") == "a"  # being written: always known
        await store.flush()
        assert sum(store.bound_conversation(f"r{n}") is not None for n in range(100)) == 8
        assert [await store.lookup_conversation(f"r{n}") for n in range(100)] == ["a"] * 100
        assert sum(store.bound_conversation(f"r{n}") is not None for n in range(100)) == 8
    finally:
        await store.close()


async def test_a_binding_being_written_is_visible_to_lookups(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("a"))
    store.upsert_conversation(conversation("b"))
    await store.flush()
    pending = store.bind_request("r1", "a")
    assert not pending.done()
    assert await store.lookup_conversation("r1") == "a"
    with pytest.raises(BindingConflict):
        store.bind_request("r1", "b")
    assert await pending is BindOutcome.BOUND


async def test_failed_bind_releases_its_reservation(store: Store, conversation) -> None:
    doomed = store.bind_request("r1", "missing-conversation")  # foreign key violation
    with pytest.raises(WriteFailedError):
        await doomed
    with pytest.raises(FlushError):
        await store.flush()
    assert store.bound_conversation("r1") is None
    await store.upsert_conversation(conversation("a"))
    assert await store.bind_request("r1", "a") is BindOutcome.BOUND
