"""Traces, usage, and background deliveries (at-least-once with dedup)."""
from __future__ import annotations

from cursor_byok.store import DeliveryState, Store, TraceRecord, UsageRecord


async def test_trace_insert_then_completion_update(store: Store) -> None:
    store.record_trace(TraceRecord("t1", "local_byok", "POST", "/agent.v1.AgentService/RunSSE",
                                   started_at_ms=100, request_id="q1", bytes_in=10))
    store.record_trace(TraceRecord("t2", "upstream", "GET", "/models", started_at_ms=200))
    await store.record_trace(TraceRecord("t1", "local_byok", "POST", "/agent.v1.AgentService/RunSSE",
                                         started_at_ms=100, conversation_id="c", status=200,
                                         bytes_in=10, bytes_out=4096, duration_ms=1500))
    traces = await store.list_traces()
    assert [t.trace_id for t in traces] == ["t2", "t1"]
    t1 = traces[1]
    assert (t1.request_id, t1.conversation_id, t1.status, t1.bytes_out, t1.duration_ms) == ("q1", "c", 200, 4096, 1500)
    assert [t.trace_id for t in await store.list_traces(conversation_id="c")] == ["t1"]


async def test_usage_summary_groups_and_filters(store: Store) -> None:
    rows = [
        UsageRecord("sonnet", "anthropic", 10, run_id="r1", conversation_id="a", input_tokens=100,
                    output_tokens=10, cache_read_tokens=50, ttft_ms=200, duration_ms=1000),
        UsageRecord("sonnet", "anthropic", 20, run_id="r2", conversation_id="b", input_tokens=300,
                    output_tokens=30, cache_write_tokens=7, ttft_ms=400, duration_ms=3000),
        UsageRecord("gpt", "openai-responses", 30, run_id="r3", conversation_id="a", input_tokens=1,
                    reasoning_tokens=5),
    ]
    for row in rows:
        store.record_usage(row)
    await store.flush()
    totals = {(t.provider, t.model_id): t for t in await store.usage_summary()}
    sonnet = totals[("anthropic", "sonnet")]
    assert (sonnet.calls, sonnet.input_tokens, sonnet.output_tokens, sonnet.cache_read_tokens,
            sonnet.cache_write_tokens, sonnet.duration_ms, sonnet.mean_ttft_ms) == (2, 400, 40, 50, 7, 4000, 300.0)
    gpt = totals[("openai-responses", "gpt")]
    assert (gpt.calls, gpt.reasoning_tokens, gpt.duration_ms, gpt.mean_ttft_ms) == (1, 5, 0, None)
    assert [t.input_tokens for t in await store.usage_summary(conversation_id="a")] == [100, 1]
    assert [t.model_id for t in await store.usage_summary(since_ms=15, until_ms=30)] == ["sonnet"]
    assert [t.calls for t in await store.usage_summary(run_id="r3")] == [1]
    assert await store.usage_summary(conversation_id="nobody") == []


async def test_delivery_is_deduplicated_and_consumed_once(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("parent"))
    store.enqueue_delivery("parent", "task-1", b"first", created_at_ms=1)
    store.enqueue_delivery("parent", "task-1", b"redelivered", created_at_ms=2)
    store.enqueue_delivery("parent", "task-2", b"second", created_at_ms=3)
    await store.flush()
    pending = await store.pending_deliveries("parent")
    assert [(d.delivery_id, d.payload, d.state) for d in pending] == [
        ("task-1", b"first", DeliveryState.PENDING), ("task-2", b"second", DeliveryState.PENDING),
    ]
    await store.consume_delivery("parent", "task-1", consumed_at_ms=10)
    await store.consume_delivery("parent", "task-1", consumed_at_ms=20)  # idempotent
    store.enqueue_delivery("parent", "task-1", b"late redelivery")
    await store.flush()
    assert [d.delivery_id for d in await store.pending_deliveries("parent")] == ["task-2"]
    exported = await store.export_conversation("parent")
    task1 = next(d for d in exported["deliveries"] if d["delivery_id"] == "task-1")
    assert (task1["state"], task1["consumed_at_ms"]) == ("consumed", 10)


async def test_consumed_before_enqueued_stays_consumed(store: Store, conversation) -> None:
    store.upsert_conversation(conversation("parent"))
    store.consume_delivery("parent", "task-9", consumed_at_ms=5)  # awaited directly by the parent
    store.enqueue_delivery("parent", "task-9", b"notification arrives later")
    await store.flush()
    assert await store.pending_deliveries("parent") == []
