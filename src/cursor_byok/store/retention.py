"""Retention of what is not conversation history: finished run records, request traces, usage rows and
provider call records older than an age are deleted, a small batch at a time, through the store's writer.

History itself (conversations, their events, checkpoints and request bindings) is never removed here;
`conversations delete|prune` does that, whole conversations at a time. Each batch is one indexed read
of the oldest rows' rowids and one write deleting those rowids, with a pause between batches, so
pruning a year's backlog never holds the writer for long while turns are being written.
"""
from __future__ import annotations

import asyncio
import enum
import logging
import sqlite3
from collections.abc import Mapping

import msgspec

from .core import StoreCore, now_ms
from .errors import StoreError
from .ops import RowWrite, Stage

log = logging.getLogger("cursor_byok.store")

BATCH_ROWS = 500
BATCH_PAUSE_SECONDS = 0.05


class Retained(enum.StrEnum):
    """The kinds of records a retention age applies to."""

    RUNS = "runs"
    TRACES = "traces"
    USAGE = "usage"
    CALLS = "calls"


class _Rule(msgspec.Struct, frozen=True):
    table: str
    age_column: str
    condition: str = "TRUE"  # which rows may go at all

    def oldest(self) -> str:
        # Each runs on an index of age_column (partial, where condition): the oldest rows first.
        return (f"SELECT rowid FROM {self.table} WHERE {self.condition} AND {self.age_column} < ? "
                f"ORDER BY {self.age_column} LIMIT ?")

    def delete(self) -> str:
        return f"DELETE FROM {self.table} WHERE rowid IN (SELECT value FROM json_each(?))"


RULES = {
    Retained.RUNS: _Rule("runs", "ended_at_ms", "outcome IS NOT NULL"),  # a run in progress stays
    Retained.TRACES: _Rule("traces", "started_at_ms"),
    Retained.USAGE: _Rule("usage", "created_at_ms"),
    Retained.CALLS: _Rule("provider_calls", "started_at_ms"),
}


class RetentionRecords(StoreCore):
    """Deleting records past their retention age (a mixin of `Store`)."""

    async def prune_older(self, kind: Retained | str, older_than_ms: int, *, batch: int = BATCH_ROWS,
                          pause: float = BATCH_PAUSE_SECONDS) -> int:
        """Delete `kind`'s records older than `older_than_ms` (epoch ms), `batch` rows per write and
        `pause` seconds between writes; returns how many went."""
        rule = RULES[Retained(kind)]
        deleted = 0
        while True:
            rowids = [r[0] for r in await self._read(rule.oldest(), (older_than_ms, batch))]
            if rowids:
                ids = msgspec.json.encode(rowids).decode()
                await self._enqueue(RowWrite(f"delete {len(rowids)} old {rule.table} rows", Stage.RETENTION, rule.delete(), (ids,)))
                deleted += len(rowids)
            if len(rowids) < batch:
                return deleted
            await asyncio.sleep(pause)

    async def apply_retention(self, ages_ms: Mapping[str, int], now_ms: int) -> dict[Retained, int]:
        """Prune every kind (a `Retained` value) with a positive age (0 keeps it forever); returns
        how many records went per kind."""
        pruned = {}
        for kind, age in ages_ms.items():
            if age > 0:
                pruned[Retained(kind)] = await self.prune_older(kind, now_ms - age)
        if any(pruned.values()):
            log.info("retention: deleted old records", extra={k.value: n for k, n in pruned.items()})
        return pruned


async def keep_retention(store: RetentionRecords, ages_ms: Mapping[str, int], *, first_after: float, every: float) -> None:
    """Apply the retention ages `first_after` seconds from now and every `every` seconds after that,
    until cancelled. A failed pass is logged and tried again at the next one."""
    if not any(age > 0 for age in ages_ms.values()):
        return
    await asyncio.sleep(first_after)
    while True:
        try:
            await store.apply_retention(ages_ms, now_ms())
        except (StoreError, sqlite3.Error) as exc:
            log.warning("retention pass failed; trying again later: %s", exc)
        await asyncio.sleep(every)
