"""What the server did: request traces and model usage. Written off the hot path (fire and forget),
read by the CLI and `doctor`."""
from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

from .core import StoreCore
from .ops import RowWrite, Stage
from .records import TraceRecord, UsageRecord, UsageTotals

UPSERT_TRACE = """
INSERT INTO traces (trace_id, request_id, conversation_id, route, method, path, status,
    bytes_in, bytes_out, started_at_ms, duration_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (trace_id) DO UPDATE SET
    request_id = COALESCE(excluded.request_id, traces.request_id),
    conversation_id = COALESCE(excluded.conversation_id, traces.conversation_id),
    status = COALESCE(excluded.status, traces.status),
    bytes_in = excluded.bytes_in,
    bytes_out = excluded.bytes_out,
    duration_ms = COALESCE(excluded.duration_ms, traces.duration_ms)
"""

INSERT_USAGE = """
INSERT INTO usage (run_id, conversation_id, model_id, provider, input_tokens, output_tokens,
    cache_read_tokens, cache_write_tokens, reasoning_tokens, ttft_ms, duration_ms, created_at_ms,
    trace_id, outcome, error_code, calls, tool_calls, phases, user_name)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""


class ActivityRecords(StoreCore):
    """Traces and usage (a mixin of `Store`)."""

    def record_trace(self, record: TraceRecord) -> asyncio.Future[None]:
        """Insert a trace, or update the end-of-request fields of an existing one."""
        row = (record.trace_id, record.request_id, record.conversation_id, record.route,
               record.method, record.path, record.status, record.bytes_in, record.bytes_out,
               record.started_at_ms, record.duration_ms)
        return self._enqueue(
            RowWrite(f"record trace {record.trace_id}", Stage.TRACES, UPSERT_TRACE, row)
        )

    def record_usage(self, record: UsageRecord) -> asyncio.Future[None]:
        row = (record.run_id, record.conversation_id, record.model_id, record.provider,
               record.input_tokens, record.output_tokens, record.cache_read_tokens,
               record.cache_write_tokens, record.reasoning_tokens, record.ttft_ms,
               record.duration_ms, record.created_at_ms, record.trace_id, record.outcome,
               record.error_code, record.calls, record.tool_calls, record.phases, record.user_name)
        return self._enqueue(
            RowWrite(f"record usage of {record.model_id}", Stage.USAGE, INSERT_USAGE, row)
        )

    async def list_traces(
        self, *, conversation_id: str | None = None, limit: int = 100
    ) -> list[TraceRecord]:
        """Most recent first."""
        return await self._read_job(lambda conn: select_traces(conn, conversation_id, limit))

    async def usage_summary(
        self,
        *,
        conversation_id: str | None = None,
        run_id: str | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
    ) -> list[UsageTotals]:
        """Usage totals per (provider, model_id), filtered by the given bounds
        (`since_ms` inclusive, `until_ms` exclusive)."""
        return await self._read_job(
            lambda conn: select_usage(conn, conversation_id=conversation_id, run_id=run_id,
                                      since_ms=since_ms, until_ms=until_ms)
        )

    async def usage_by_run(self, conversation_id: str, limit: int = 1000) -> dict[str, UsageTotals]:
        """Token usage summed per run of one conversation (newest runs first, at most `limit`)."""
        rows = await self._read(
            "SELECT run_id, MAX(provider), MAX(model_id), COUNT(*), SUM(input_tokens), SUM(output_tokens), "
            "SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(reasoning_tokens), "
            "COALESCE(SUM(duration_ms), 0), AVG(ttft_ms) FROM usage "
            "WHERE conversation_id = ? AND run_id IS NOT NULL GROUP BY run_id "
            "ORDER BY MAX(created_at_ms) DESC LIMIT ?",
            (conversation_id, limit),
        )
        return {str(r[0]): UsageTotals(*r[1:]) for r in rows}


def select_traces(conn: sqlite3.Connection, conversation_id: str | None, limit: int) -> list[TraceRecord]:
    where, params = ("WHERE conversation_id = ?", [conversation_id]) if conversation_id else ("", [])
    rows = conn.execute(
        "SELECT trace_id, route, method, path, started_at_ms, request_id, conversation_id, "
        f"status, bytes_in, bytes_out, duration_ms FROM traces {where} "
        "ORDER BY started_at_ms DESC, trace_id LIMIT ?",
        (*params, limit),
    )
    return [TraceRecord(*r) for r in rows]


def select_usage(
    conn: sqlite3.Connection,
    *,
    conversation_id: str | None = None,
    run_id: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> list[UsageTotals]:
    clauses: list[str] = []
    params: list[Any] = []
    for clause, value in (
        ("conversation_id = ?", conversation_id),
        ("run_id = ?", run_id),
        ("created_at_ms >= ?", since_ms),
        ("created_at_ms < ?", until_ms),
    ):
        if value is not None:
            clauses.append(clause)
            params.append(value)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(
        "SELECT provider, model_id, COUNT(*), SUM(input_tokens), SUM(output_tokens), "
        "SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(reasoning_tokens), "
        f"COALESCE(SUM(duration_ms), 0), AVG(ttft_ms) FROM usage {where} "
        "GROUP BY provider, model_id ORDER BY provider, model_id",
        tuple(params),
    )
    return [UsageTotals(*r) for r in rows]
