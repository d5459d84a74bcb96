"""Provider call records: written and read back, summed by model and day, bucketed for charts,
pruned by age and by count; conversation pages by keyset cursor."""
from __future__ import annotations

from cursor_byok.store import CallRecord, ConversationRecord, Retained, RunRecord, Store


def call(trace: str, seq: int, at_ms: int, model: str = "m", **fields: object) -> CallRecord:
    return CallRecord(trace_id=trace, seq=seq, model_id=model, provider="anthropic", upstream_model="claude", purpose="cycle",
                      started_at_ms=at_ms, duration_ms=10, **fields)


async def test_calls_round_trip_and_sum_by_model_and_bucket(store: Store) -> None:
    store.record_call(call("t1", 1, 1_000, conversation_id="c", input_tokens=100, output_tokens=5, cache_read_tokens=40, ttft_ms=20, tools=b"[]"))
    store.record_call(call("t1", 2, 2_000, conversation_id="c", input_tokens=200, output_tokens=7, ttft_ms=40, error_kind="overloaded"))
    store.record_call(call("t2", 1, 3_700_000, model="n", input_tokens=1))
    await store.flush()
    got = await store.list_calls(conversation_id="c")
    assert [(c.seq, c.input_tokens, c.tools) for c in got] == [(1, 100, b"[]"), (2, 200, None)]
    assert await store.get_call("t1", 2) == got[1]
    groups = {g.model_id: g for g in await store.usage_groups(since_ms=None, by_day=False)}
    assert (groups["m"].calls, groups["m"].errors, groups["m"].input_tokens, groups["m"].mean_ttft_ms) == (2, 1, 300, 30.0)
    assert [g.model_id for g in await store.usage_groups(since_ms=3_000_000, by_day=False)] == ["n"]
    assert all(len(g.group) == 10 for g in await store.usage_groups(since_ms=None, by_day=True))  # YYYY-MM-DD
    buckets = await store.activity(since_ms=0, bucket_ms=3_600_000)
    assert [(b.start_ms, b.calls, b.errors) for b in buckets] == [(0, 2, 1), (3_600_000, 1, 0)]


async def test_retention_prunes_call_records_by_age(store: Store, committed) -> None:
    for i in range(5):
        store.record_call(call(f"t{i}", 1, i * 1000))
    await store.flush()
    assert await store.apply_retention({Retained.CALLS: 2500}, 4000) == {Retained.CALLS: 2}
    assert [t for (t,) in committed("SELECT trace_id FROM provider_calls ORDER BY trace_id")] == ["t2", "t3", "t4"]


async def test_conversation_pages_follow_the_cursor(store: Store) -> None:
    for i in range(5):
        store.upsert_conversation(ConversationRecord(f"c{i}", created_at_ms=i, updated_at_ms=100 + i // 2, model_id="m"))
    store.start_run(RunRecord("r", "c4", "modeling", 1))
    await store.flush()
    seen, before = [], None
    while page := await store.conversation_page(before=before, limit=2):
        seen += [c.conversation_id for c in page]
        before = (page[-1].updated_at_ms, page[-1].conversation_id)
    assert seen == ["c4", "c2", "c3", "c0", "c1"]  # newest activity first, ties by id; each once
    [first] = await store.conversation_page(before=None, limit=1)
    assert (first.turns, first.first_user_payload) == (1, None)
