"""What the dashboard's API and `cursor-byok usage` show, read from the store: usage by model or day,
the overview's series, pages of conversations and one conversation's runs and calls. Costs come from
the prices in the config as it is now."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..config import Config
from ..prompting import user_query
from ..store import CallRecord, UsageGroup
from .costs import cache_hit_rate, cost

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
PAGE = 50  # conversations per page unless asked
MAX_PAGE = 200
_TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def user_text(message: Mapping[str, Any]) -> str:
    """The user's own words in a stored user message (without the prompt around them)."""
    return user_query(" ".join(p.get("text", "") for p in message.get("parts") or [] if p.get("type") == "text"))


def _payload_user_text(payload: bytes | None) -> str:
    if payload is None:
        return ""
    try:
        entry = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        return ""
    return user_text(entry.get("message") or {}) if isinstance(entry, dict) else ""


def priced(config: Config, model_id: str, tokens: Mapping[str, Any]) -> float | None:
    model = config.model(model_id)
    return cost(
        model.price if model is not None else None,
        input_tokens=tokens["input_tokens"], output_tokens=tokens["output_tokens"],
        cache_read_tokens=tokens["cache_read_tokens"], cache_write_tokens=tokens["cache_write_tokens"],
    )


def _sum_costs(costs: Sequence[float | None]) -> float | None:
    known = [c for c in costs if c is not None]
    return sum(known) if known else None


def usage_row(group: UsageGroup, config: Config) -> dict[str, Any]:
    row = msgspec.structs.asdict(group)
    row["cache_hit_rate"] = cache_hit_rate(group.input_tokens, group.cache_read_tokens)
    row["cost"] = priced(config, group.model_id, row)
    return row


def totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The rows summed: calls, errors, tokens, cache-hit rate and cost (None when nothing is priced)."""
    out: dict[str, Any] = {k: sum(r[k] for r in rows) for k in ("calls", "errors", *_TOKENS)}
    out["cache_hit_rate"] = cache_hit_rate(out["input_tokens"], out["cache_read_tokens"])
    out["cost"] = _sum_costs([r["cost"] for r in rows])
    timed = [(r["mean_ttft_ms"], r["calls"]) for r in rows if r.get("mean_ttft_ms") is not None]
    out["mean_ttft_ms"] = sum(t * n for t, n in timed) / sum(n for _, n in timed) if timed else None
    return out


async def usage(store: Any, config: Config, *, since_ms: int | None, by: str) -> list[dict[str, Any]]:
    """Calls, tokens, cache hits and cost per model (`by="model"`), per day and model (`"day"`) or
    per developer and model (`"user"`, a team server's)."""
    return [usage_row(g, config) for g in await store.usage_groups(since_ms=since_ms, by_day=by == "day", by_user=by == "user")]


async def overview(store: Any, config: Config, *, now_ms: int, hours: int) -> dict[str, Any]:
    """Totals of the last `hours` and their series over time (hourly up to two days, else daily),
    every bucket present so the charts have a point for each."""
    bucket = HOUR_MS if hours <= 48 else DAY_MS
    since = (now_ms - hours * HOUR_MS) // bucket * bucket
    rows = await usage(store, config, since_ms=since, by="model")
    found = {b.start_ms: b for b in await store.activity(since_ms=since, bucket_ms=bucket)}
    series = []
    for start in range(since, now_ms + 1, bucket):
        b = found.get(start)
        series.append({
            "t": start,
            "calls": b.calls if b else 0,
            "errors": b.errors if b else 0,
            "input_tokens": b.input_tokens if b else 0,
            "output_tokens": b.output_tokens if b else 0,
            "cache_hit_rate": cache_hit_rate(b.input_tokens, b.cache_read_tokens) if b else None,
            "ttft_ms": b.mean_ttft_ms if b else None,
        })
    return {"hours": hours, "bucket_ms": bucket, "totals": totals(rows), "models": rows, "series": series}


def encode_cursor(updated_at_ms: int, conversation_id: str) -> str:
    return f"{updated_at_ms}.{conversation_id}"


def decode_cursor(cursor: str) -> tuple[int, str]:
    """The keyset position a page cursor names; ValueError for one this API did not give out."""
    updated, _, conversation_id = cursor.partition(".")
    if not (updated.isdigit() and conversation_id):
        raise ValueError("cursor: not one this API gave out (use the `next` of the previous page)")
    return int(updated), conversation_id


async def conversations(store: Any, *, cursor: str | None, limit: int) -> dict[str, Any]:
    """One page of root conversations, most recently active first; `next` continues after it."""
    before = decode_cursor(cursor) if cursor else None
    page = await store.conversation_page(before=before, limit=limit + 1)
    items = [
        {
            "conversation_id": c.conversation_id,
            "first_message": _payload_user_text(c.first_user_payload)[:300],
            "model_id": c.model_id,
            "turns": c.turns,
            "last_activity_ms": c.updated_at_ms,
        }
        for c in page[:limit]
    ]
    last = page[limit - 1] if len(page) > limit else None
    return {"items": items, "next": encode_cursor(last.updated_at_ms, last.conversation_id) if last else None}


def call_view(call: CallRecord, config: Config) -> dict[str, Any]:
    view = msgspec.structs.asdict(call)
    del view["request_body"], view["response_body"]
    view["has_bodies"] = call.request_body is not None or call.response_body is not None
    view["tools"] = msgspec.json.decode(call.tools) if call.tools else []
    view["cost"] = priced(config, call.model_id, view)
    return view


async def conversation(store: Any, config: Config, conversation_id: str) -> dict[str, Any] | None:
    """One conversation: its runs (turns) in order with outcome, phases, timings, error and cost,
    each with its provider calls and their tool calls."""
    record = await store.get_conversation(conversation_id)
    if record is None:
        return None
    usage_rows = await store.run_usage(conversation_id)
    calls = [call_view(c, config) for c in await store.list_calls(conversation_id=conversation_id)]
    prompts: dict[str, str] = {}
    after = 0
    while page := await store.load_events(conversation_id, after, 500):
        for event in page:
            if event.kind == "user" and event.run_id and event.run_id not in prompts:
                prompts[event.run_id] = _payload_user_text(event.payload)[:2000]
        after = page[-1].seq
    runs = []
    for run in await store.list_runs(conversation_id):
        row = usage_rows.get(run.run_id, {})
        own = [c for c in calls if c["run_id"] == run.run_id]
        runs.append({
            "run_id": run.run_id,
            "cursor_run_id": run.cursor_run_id,
            "request_id": run.request_id,
            "trace_id": row.get("trace_id"),
            "user_message": prompts.get(run.run_id, ""),
            "started_at_ms": run.started_at_ms,
            "ended_at_ms": run.ended_at_ms,
            "outcome": run.outcome,
            "error_code": run.error_code,
            "error_message": run.error_message,
            "model_id": row.get("model_id"),
            "ttft_ms": row.get("ttft_ms"),
            "duration_ms": row.get("duration_ms"),
            "phases": msgspec.json.decode(row["phases"]) if row.get("phases") else {},
            "tokens": {k: sum(c[k] for c in own) for k in _TOKENS},
            "cost": _sum_costs([c["cost"] for c in own]),
            "calls": own,
        })
    return {
        "conversation_id": conversation_id,
        "model_id": record.model_id,
        "created_at_ms": record.created_at_ms,
        "updated_at_ms": record.updated_at_ms,
        "parent_conversation_id": record.parent.parent_conversation_id if record.parent else None,
        "tokens": {k: sum(c[k] for c in calls) for k in _TOKENS},
        "cost": _sum_costs([c["cost"] for c in calls]),
        "runs": runs,
    }
