"""Property: whatever the batching, duplicates and restarts, seqs match a simple sequential model."""
from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from cursor_byok.store import CheckpointKind, ConversationRecord, EventKind, NewEvent, Store

CONVERSATIONS = ("a", "b", "c")

append = st.tuples(
    st.sampled_from(CONVERSATIONS),
    st.lists(st.sampled_from([f"e{i}" for i in range(12)]), min_size=0, max_size=4),
)
write = st.one_of(append, st.tuples(st.sampled_from(CONVERSATIONS), st.just(None)))  # None: checkpoint
rounds = st.lists(
    st.tuples(st.lists(write, min_size=1, max_size=12), st.booleans()),  # (writes in one tick, reopen after)
    min_size=1,
    max_size=6,
)


async def _check(path: Path, plan: list, max_batch_ops: int) -> None:
    events: dict[str, dict[str, int]] = {c: {} for c in CONVERSATIONS}
    checkpoints: dict[str, int] = dict.fromkeys(CONVERSATIONS, 0)
    store = await Store.open(path, max_batch_ops=max_batch_ops)
    try:
        for c in CONVERSATIONS:
            store.upsert_conversation(ConversationRecord(c, 1, 1))
        for writes, reopen in plan:
            futures, expected = [], []
            for conv, ids in writes:
                if ids is None:
                    futures.append(store.put_checkpoint(conv, b"s", kind=CheckpointKind.STEP))
                    checkpoints[conv] += 1
                    expected.append(("checkpoint", checkpoints[conv], len(events[conv])))
                    continue
                futures.append(store.append_events(conv, [NewEvent(i, EventKind.USER, b"") for i in ids]))
                outcome = []
                for event_id in ids:
                    duplicate = event_id in events[conv]
                    if not duplicate:
                        events[conv][event_id] = len(events[conv]) + 1
                    outcome.append((event_id, events[conv][event_id], duplicate))
                expected.append(("events", outcome))
            for future, want in zip(await asyncio.gather(*futures), expected):
                if want[0] == "checkpoint":
                    assert (future.seq, future.through_event_seq) == want[1:]
                else:
                    assert [(r.event_id, r.seq, r.duplicate) for r in future.results] == want[1]
            if reopen:
                await store.close()
                store = await Store.open(path, max_batch_ops=max_batch_ops)
        for conv in CONVERSATIONS:
            stored = [(e.event_id, e.seq) for e in await store.load_events(conv)]
            assert stored == sorted(events[conv].items(), key=lambda item: item[1])
    finally:
        await store.close()


@settings(max_examples=40, deadline=None)
@given(plan=rounds, max_batch_ops=st.sampled_from([1, 3, 2048]))
def test_seqs_match_sequential_model(plan: list, max_batch_ops: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_check(Path(tmp) / "state.db", plan, max_batch_ops))
