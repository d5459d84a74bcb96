"""The store: one SQLite database in WAL mode, one writer thread, one reader thread (core.py), with
the write and read methods of each record family (conversations.py, history.py, deliveries.py,
activity.py, calls.py, inbound.py, developers.py) and retention (retention.py)."""
from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from .activity import ActivityRecords, select_traces, select_usage
from .calls import CallRecords
from .conversations import ConversationRecords, select_bindings, select_conversation, select_runs, select_tool_state
from .core import StoreStats
from .deliveries import DeliveryRecords, select_deliveries
from .developers import DeveloperRecords
from .history import HistoryRecords, select_checkpoints, select_events
from .inbound import InboundRecords
from .ops import UNLIMITED
from .records import ConversationRows
from .retention import RetentionRecords

__all__ = ["EventReader", "Store", "StoreStats"]

EventReader = Callable[[Iterator[tuple[int, str, str, "str | None", bytes]]], Any]
"""What reads a conversation's events from their rows (seq, event_id, kind, run_id, payload), as
the cursor yields them."""


class Store(
    ConversationRecords, HistoryRecords, DeliveryRecords, ActivityRecords, CallRecords, InboundRecords, RetentionRecords,
    DeveloperRecords,
):
    """See core.py. Create with `await Store.open(path)`; end with `await close()`."""

    async def load_conversation(self, conversation_id: str, events: EventReader | None = None) -> ConversationRows:
        """A conversation's record, events and tool state from one snapshot, in one read (a run
        start of a conversation this process has not seen yet waits for it). `events(rows)`: what
        the events are read into (default: a list of EventRecords), from the rows as they are read,
        so the rows are never all held at once beside what they are made into."""
        self._check_open()
        return await self._read_job(lambda conn: _load(conn, conversation_id, events))

    def holds_nothing_of(self, conversation_id: str) -> bool:
        """True: nothing of this conversation is committed (a new one: `load_conversation` would
        find nothing), answered on the loop at once. False: it may have something, or that cannot
        be told without waiting (then read it). Exact: its events and tool state cannot outlive its
        row (foreign keys), which is known never stored (`StoredIds`) or read while no write is being
        committed. True also tells the writer its seqs start at zero (no probe for them in its first
        transaction) when its thread is idle."""
        if self._stored_conversations.absent(conversation_id):
            if not self._threads_idle():
                return True  # the writer reads its seqs (the thread may be planning a batch now)
        elif self._read_now(_HAS_CONVERSATION, (conversation_id,)) != []:
            return False
        if self._writer is not None:
            self._writer.counts_from_zero(conversation_id)
        return True

    async def export_conversation(
        self, conversation_id: str, *, events_after: int = 0, events_limit: int | None = None
    ) -> dict[str, Any] | None:
        """Everything stored about one conversation as JSON-able builtins (bytes as base64),
        read from one consistent snapshot. None if the conversation does not exist. The history
        events may be limited to a window (after a seq, at most a number); `next_after` is then
        the seq to continue after, or None when the window reaches the end."""
        self._check_open()
        export = await self._read_job(lambda conn: self._export(conn, conversation_id, events_after, events_limit))
        return None if export is None else msgspec.to_builtins(export)

    def _export(self, conn: sqlite3.Connection, conversation_id: str, after: int, limit: int | None) -> dict[str, Any] | None:
        conn.execute("BEGIN")
        try:
            conversation = select_conversation(conn, conversation_id)
            if conversation is None:
                return None
            events = select_events(conn, conversation_id, after, None if limit is None else limit + 1)
            more = limit is not None and len(events) > limit
            if more:
                del events[limit:]
            return {
                "schema_version": self.schema_version,
                "conversation": conversation,
                "bindings": select_bindings(conn, conversation_id),
                "runs": select_runs(conn, conversation_id),
                "events": events,
                "next_after": events[-1].seq if more else None,
                "checkpoints": select_checkpoints(conn, conversation_id),
                "deliveries": select_deliveries(conn, conversation_id, pending_only=False),
                "usage": select_usage(conn, conversation_id=conversation_id),
                "traces": select_traces(conn, conversation_id, UNLIMITED),
            }
        finally:
            conn.execute("COMMIT")


_HAS_CONVERSATION = "SELECT 1 FROM conversations WHERE conversation_id = ?"
_LOAD_EVENTS = "SELECT seq, event_id, kind, run_id, payload FROM history_events WHERE conversation_id = ? ORDER BY seq"


def _load(conn: sqlite3.Connection, conversation_id: str, read: EventReader | None) -> ConversationRows:
    conn.execute("BEGIN")
    try:
        if read is None:
            events: Any = select_events(conn, conversation_id)
        else:
            events = read(conn.execute(_LOAD_EVENTS, (conversation_id,)))
        return ConversationRows(select_conversation(conn, conversation_id), events, select_tool_state(conn, conversation_id))
    finally:
        conn.execute("COMMIT")
