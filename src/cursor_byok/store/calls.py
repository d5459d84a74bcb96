"""Provider call records (one per call to a model provider), their retention, and the reads the
dashboard and `cursor-byok usage` make of them and of the runs' usage rows. Written off the hot
path (fire and forget)."""
from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import msgspec

from .core import StoreCore
from .ops import RowWrite, Stage


class CallRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One provider call. Times are milliseconds: `started_at_ms` wall clock, the rest from it."""

    trace_id: str
    seq: int  # the call's number within its trace
    model_id: str
    provider: str
    upstream_model: str
    purpose: str  # cycle | compaction | test
    started_at_ms: int
    duration_ms: int
    conversation_id: str | None = None
    run_id: str | None = None
    cursor_run_id: str | None = None
    request_id: str | None = None
    step: int = 0
    attempts: int = 0
    ttfb_ms: int | None = None  # response head
    first_event_ms: int | None = None
    ttft_ms: int | None = None  # first text, thinking or tool call
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    finish_reason: str | None = None
    http_status: int | None = None
    error_kind: str | None = None
    error_message: str | None = None
    provider_request_id: str | None = None
    tools: bytes | None = None  # JSON list of the tool calls it asked for, with their round trips
    request_body: bytes | None = None  # detailed mode only
    response_body: bytes | None = None
    user_name: str | None = None  # the developer of a team server it was made for


class UsageGroup(msgspec.Struct, frozen=True):
    """Provider calls summed over one group (a model, or a model on one day)."""

    group: str  # the day (YYYY-MM-DD, local time), the developer ("" for none), or "" when grouped by model only
    model_id: str
    calls: int
    errors: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    mean_ttft_ms: float | None


class ActivityBucket(msgspec.Struct, frozen=True):
    """Provider calls in one time bucket (for the dashboard's charts)."""

    start_ms: int
    calls: int
    errors: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    mean_ttft_ms: float | None


class ConversationSummary(msgspec.Struct, frozen=True):
    conversation_id: str
    updated_at_ms: int
    model_id: str | None
    turns: int
    first_user_payload: bytes | None  # the first user history event, as stored


_CALL_FIELDS = tuple(f.name for f in msgspec.structs.fields(CallRecord))
_CALL_COLUMNS = ", ".join(_CALL_FIELDS)
INSERT_CALL = (
    f"INSERT INTO provider_calls ({_CALL_COLUMNS}) VALUES ({', '.join('?' * len(_CALL_FIELDS))}) "
    "ON CONFLICT (trace_id, seq) DO UPDATE SET "
    + ", ".join(f"{name} = excluded.{name}" for name in _CALL_FIELDS if name not in ("trace_id", "seq"))
)

_SUMS = (
    "COUNT(*), COUNT(error_kind), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
    "COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(reasoning_tokens), 0), "
    "AVG(ttft_ms)"
)

class CallRecords(StoreCore):
    """Provider call records (a mixin of `Store`)."""

    def record_call(self, record: CallRecord) -> asyncio.Future[None]:
        row = tuple(getattr(record, name) for name in _CALL_FIELDS)
        return self._enqueue(RowWrite(f"record call {record.trace_id}/{record.seq}", Stage.CALLS, INSERT_CALL, row))

    async def list_calls(self, *, conversation_id: str | None = None, since_ms: int | None = None, limit: int = 1000) -> list[CallRecord]:
        """Oldest first: one conversation's calls, or all calls since `since_ms`."""
        where, params = _where(conversation_id=conversation_id, since_ms=since_ms)
        rows = await self._read(
            f"SELECT {_CALL_COLUMNS} FROM provider_calls {where} ORDER BY started_at_ms, trace_id, seq LIMIT ?", (*params, limit)
        )
        return [CallRecord(**dict(zip(_CALL_FIELDS, r))) for r in rows]

    async def get_call(self, trace_id: str, seq: int) -> CallRecord | None:
        rows = await self._read(f"SELECT {_CALL_COLUMNS} FROM provider_calls WHERE trace_id = ? AND seq = ?", (trace_id, seq))
        return CallRecord(**dict(zip(_CALL_FIELDS, rows[0]))) if rows else None

    async def usage_groups(self, *, since_ms: int | None, by_day: bool, by_user: bool = False) -> list[UsageGroup]:
        """Provider calls since `since_ms`, summed per model (and per local day with `by_day`, or
        per developer with `by_user`)."""
        day = "date(started_at_ms / 1000, 'unixepoch', 'localtime')" if by_day else "COALESCE(user_name, '')" if by_user else "''"
        where, params = _where(since_ms=since_ms)
        rows = await self._read(
            f"SELECT {day} AS day, model_id, {_SUMS} FROM provider_calls {where} GROUP BY day, model_id ORDER BY day, model_id",
            params,
        )
        return [UsageGroup(*r) for r in rows]

    async def activity(self, *, since_ms: int, bucket_ms: int) -> list[ActivityBucket]:
        """Provider calls since `since_ms` in buckets of `bucket_ms`, oldest first (empty buckets left out)."""
        rows = await self._read(
            "SELECT (started_at_ms / ?) * ? AS bucket, COUNT(*), COUNT(error_kind), "
            "SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens), AVG(ttft_ms) "
            "FROM provider_calls WHERE started_at_ms >= ? GROUP BY bucket ORDER BY bucket",
            (bucket_ms, bucket_ms, since_ms),
        )
        return [ActivityBucket(*r) for r in rows]

    async def conversation_page(self, *, before: tuple[int, str] | None, limit: int) -> list[ConversationSummary]:
        """Root conversations, most recently active first, after the keyset cursor `before`
        ((updated_at_ms, conversation_id) of the last one already shown)."""
        return await self._read_job(lambda conn: select_conversation_page(conn, before, limit))

    async def run_usage(self, conversation_id: str) -> dict[str, dict[str, Any]]:
        """The usage rows of one conversation's runs, by run id (outcome, phases, tokens)."""
        rows = await self._read(
            "SELECT run_id, trace_id, model_id, outcome, error_code, calls, tool_calls, phases, ttft_ms, duration_ms "
            "FROM usage WHERE conversation_id = ? AND run_id IS NOT NULL",
            (conversation_id,),
        )
        keys = ("trace_id", "model_id", "outcome", "error_code", "calls", "tool_calls", "phases", "ttft_ms", "duration_ms")
        return {r[0]: dict(zip(keys, r[1:])) for r in rows}


def _where(**bounds: Any) -> tuple[str, tuple[Any, ...]]:
    clauses = {"conversation_id": "conversation_id = ?", "since_ms": "started_at_ms >= ?"}
    used = [(clauses[k], v) for k, v in bounds.items() if v is not None]
    return ("WHERE " + " AND ".join(c for c, _ in used) if used else ""), tuple(v for _, v in used)


def select_conversation_page(conn: sqlite3.Connection, before: tuple[int, str] | None, limit: int) -> list[ConversationSummary]:
    # The order of the conversations_by_updated index, so a page is one range scan of it.
    keyset, params = "", ()
    if before is not None:
        keyset = "AND (updated_at_ms < ? OR (updated_at_ms = ? AND conversation_id > ?))"
        params = (before[0], before[0], before[1])
    rows = conn.execute(
        "SELECT conversation_id, updated_at_ms, model_id FROM conversations "
        f"WHERE parent_conversation_id IS NULL {keyset} "
        "ORDER BY updated_at_ms DESC, conversation_id LIMIT ?",
        (*params, limit),
    ).fetchall()
    out = []
    for conversation_id, updated, model_id in rows:
        turns = conn.execute("SELECT COUNT(*) FROM runs WHERE conversation_id = ?", (conversation_id,)).fetchone()[0]
        first = conn.execute(
            "SELECT payload FROM history_events WHERE conversation_id = ? AND kind = 'user' ORDER BY seq LIMIT 1",
            (conversation_id,),
        ).fetchone()
        out.append(ConversationSummary(conversation_id, updated, model_id, turns, first[0] if first else None))
    return out
