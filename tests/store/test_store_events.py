"""History events: idempotent by event_id, gap-free per-conversation seqs, across restarts."""
from __future__ import annotations

import asyncio
import enum
from pathlib import Path

from cursor_byok.store import EventKind, NewEvent, Store


def _ev(event_id: str, kind: EventKind = EventKind.USER, payload: bytes | None = None, **kw) -> NewEvent:
    return NewEvent(event_id, kind, payload if payload is not None else event_id.encode(), **kw)


async def test_duplicate_event_id_is_reported_and_not_stored(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("c"))
    first = await store.append_events("c", [_ev("m1"), _ev("m2")])
    assert [(r.event_id, r.seq, r.duplicate) for r in first.results] == [("m1", 1, False), ("m2", 2, False)]

    again = await store.append_events("c", [_ev("m2", payload=b"retry"), _ev("m3"), _ev("m3")])
    assert [(r.event_id, r.seq, r.duplicate) for r in again.results] == [
        ("m2", 2, True), ("m3", 3, False), ("m3", 3, True),
    ]
    assert again.duplicates == ("m2", "m3")
    assert [r.event_id for r in again.appended] == ["m3"]
    events = await store.load_events("c")
    assert [(e.seq, e.event_id, e.payload) for e in events] == [(1, "m1", b"m1"), (2, "m2", b"m2"), (3, "m3", b"m3")]


async def test_duplicates_within_one_batch(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("c"))
    a = store.append_events("c", [_ev("x")])
    b = store.append_events("c", [_ev("x"), _ev("y")])
    ra, rb = await asyncio.gather(a, b)
    assert store.stats.transactions == 1
    assert ra.results[0].seq == 1 and not ra.results[0].duplicate
    assert [(r.seq, r.duplicate) for r in rb.results] == [(1, True), (2, False)]


async def test_same_event_id_in_different_conversations_is_not_a_duplicate(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("a"))
    store.upsert_conversation(conversation("b"))
    ra = store.append_events("a", [_ev("same"), _ev("a2")])
    rb = store.append_events("b", [_ev("same")])
    ra2 = store.append_events("a", [_ev("a3")])
    ra, rb, ra2 = await asyncio.gather(ra, rb, ra2)
    assert [r.seq for r in ra.results] == [1, 2]
    assert [(r.seq, r.duplicate) for r in rb.results] == [(1, False)]
    assert ra2.results[0].seq == 3


async def test_seq_continues_after_restart(store_location: Path | str, conversation) -> None:
    store = await Store.open(store_location)
    store.upsert_conversation(conversation("c"))
    for i in range(5):
        store.append_events("c", [_ev(f"e{i}", run_id="run-1", created_at_ms=100 + i)])
    await store.close()

    store = await Store.open(store_location)
    try:
        result = await store.append_events("c", [_ev("e4"), _ev("e5"), _ev("e6")])
        assert [(r.seq, r.duplicate) for r in result.results] == [(5, True), (6, False), (7, False)]
        assert await store.last_event_seq("c") == 7
        tail = await store.load_events("c", after_seq=4)
        assert [(e.seq, e.event_id) for e in tail] == [(5, "e4"), (6, "e5"), (7, "e6")]
        first = (await store.load_events("c", limit=1))[0]
        assert (first.run_id, first.created_at_ms, first.kind) == ("run-1", 100, EventKind.USER)
    finally:
        await store.close()


async def test_event_kinds_round_trip_including_caller_defined_ones(store: Store, conversation) -> None:
    class HistoryKind(str, enum.Enum):  # how another layer may spell its own kinds
        TOOL_RESULTS = "tool_results"

    store.upsert_conversation(conversation("c"))
    kinds: list[object] = [*EventKind, "assistant", HistoryKind.TOOL_RESULTS]
    await store.append_events("c", [_ev(f"k{i}", kind) for i, kind in enumerate(kinds)])  # type: ignore[arg-type]
    stored = [e.kind for e in await store.load_events("c")]
    assert stored == [*(k.value for k in EventKind), "assistant", "tool_results"]
    assert all(type(k) is str for k in stored)
    assert stored[0] == EventKind.USER


async def test_history_is_append_only(store: Store, conversation, raw_db) -> None:
    await store.upsert_conversation(conversation("c"))
    await store.append_events("c", [_ev("e1")])
    conn = raw_db()
    for sql in ("UPDATE history_events SET payload = x'00'", "DELETE FROM history_events",
                "INSERT INTO history_events VALUES ('c', 5, 'gap', 'user', NULL, x'00', 0)"):
        try:
            conn.execute(sql)
        except Exception as exc:  # noqa: BLE001 - any refusal will do, the assert below decides
            assert "append-only" in str(exc) or "seq" in str(exc)
        else:
            raise AssertionError(f"{sql!r} was accepted")


async def test_new_events_are_inserted_without_looking_their_ids_up_first(store_location: Path | str, conversation) -> None:
    """A new event's insert is its own check (its id is unique in its conversation): an append of new
    events runs no lookup of their ids; a repeat still comes back a duplicate, with its stored seq."""
    statements: list[str] = []
    store = await Store.open(store_location, trace=statements.append)
    try:
        store.upsert_conversation(conversation("c"))
        await store.append_events("c", [_ev("m1")])
        del statements[:]
        fresh = await store.append_events("c", [_ev("m2"), _ev("m3")])
        assert [(r.seq, r.duplicate) for r in fresh.results] == [(2, False), (3, False)]
        assert [s for s in statements if "JOIN history_events" in s] == []
        again = await store.append_events("c", [_ev("m3"), _ev("m4")])
        assert [(r.seq, r.duplicate) for r in again.results] == [(3, True), (4, False)]
        assert [(e.seq, e.event_id) for e in await store.load_events("c")] == [(1, "m1"), (2, "m2"), (3, "m3"), (4, "m4")]
    finally:
        await store.close()
