"""Checkpoints: per-conversation seqs, the event seq they cover, only the newest kept, resume after
restart."""
from __future__ import annotations

import asyncio

import pytest

from cursor_byok.store import CheckpointKind, EventKind, FlushError, NewEvent, Store, WriteFailedError


def _ev(event_id: str) -> NewEvent:
    return NewEvent(event_id, EventKind.ASSISTANT_TEXT, event_id.encode())


async def test_checkpoint_covers_the_events_queued_before_it(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("c"))
    store.append_events("c", [_ev("e1"), _ev("e2")])
    step = store.put_checkpoint("c", b"s1", kind=CheckpointKind.STEP, run_id="r", created_at_ms=5)
    store.append_events("c", [_ev("e3")])
    final = store.put_checkpoint("c", b"s2", kind="final", run_id="r")
    step, final = await asyncio.gather(step, final)
    assert (step.seq, step.through_event_seq, step.kind) == (1, 2, CheckpointKind.STEP)
    assert (final.seq, final.through_event_seq, final.kind) == (2, 3, CheckpointKind.FINAL)
    assert await store.latest_checkpoint("c") == final
    exported = await store.export_conversation("c")
    assert [c["seq"] for c in exported["checkpoints"]] == [2]  # the newest replaced the step
    assert await store.latest_checkpoint("other") is None


async def test_resume_from_latest_checkpoint_after_restart(store_location, conversation) -> None:
    store = await Store.open(store_location)
    store.upsert_conversation(conversation("c"))
    store.append_events("c", [_ev("e1"), _ev("e2")])
    store.put_checkpoint("c", b"state@2", kind="step")
    store.append_events("c", [_ev("e3"), _ev("e4")])  # after the last checkpoint
    await store.close()

    store = await Store.open(store_location)
    try:
        checkpoint = await store.latest_checkpoint("c")
        assert (checkpoint.state, checkpoint.through_event_seq) == (b"state@2", 2)
        tail = await store.load_events("c", after_seq=checkpoint.through_event_seq)
        assert [e.event_id for e in tail] == ["e3", "e4"]
        nxt = await store.put_checkpoint("c", b"state@4", kind="final")
        assert (nxt.seq, nxt.through_event_seq) == (2, 4)
    finally:
        await store.close()


async def test_checkpoint_claiming_unwritten_events_fails_alone(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("c"))
    store.append_events("c", [_ev("e1")])
    bad = store.put_checkpoint("c", b"x", kind="step", through_event_seq=9)
    good = store.put_checkpoint("c", b"y", kind="step", through_event_seq=1)
    with pytest.raises(WriteFailedError, match="through seq 9"):
        await bad
    assert (await good).seq == 1  # the refused one took no seq
    with pytest.raises(FlushError):
        await store.flush()
