"""Conversations, the request ids bound to them, and their runs: the records that say which
conversation a request belongs to and what ran in it."""
from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Sequence
from typing import Any

from .bindings import DEFAULT_CAPACITY, SELECT_BOUND, BindingCache, BindRequest
from .core import StoreCore
from .errors import StoreError
from .ops import BatchContext, Row, RowWrite, Stage, Statement, WriteOp
from .records import BindingRecord, BindOutcome, ConversationPage, ConversationRecord, ParentRef, RunOutcome, RunRecord
from .stored_ids import StoredIds, read_snapshot

log = logging.getLogger("cursor_byok.store")

UPSERT_CONVERSATION = """
INSERT INTO conversations (conversation_id, parent_conversation_id, parent_run_id,
    parent_tool_call_id, model_id, mode, created_at_ms, updated_at_ms, last_cursor_run_id, title)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (conversation_id) DO UPDATE SET
    parent_conversation_id = excluded.parent_conversation_id,
    parent_run_id = excluded.parent_run_id,
    parent_tool_call_id = excluded.parent_tool_call_id,
    model_id = excluded.model_id,
    mode = excluded.mode,
    updated_at_ms = excluded.updated_at_ms,
    last_cursor_run_id = excluded.last_cursor_run_id,
    title = excluded.title
"""

INSERT_RUN = """
INSERT INTO runs (run_id, conversation_id, cursor_run_id, request_id, phase, started_at_ms)
VALUES (?, ?, ?, ?, ?, ?)
"""

UPDATE_RUN_PHASE = "UPDATE runs SET phase = ? WHERE run_id = ? AND outcome IS NULL"

# One row per conversation, replaced whole (an opaque state the conversation layer encodes).
UPSERT_TOOL_STATE = """
INSERT INTO conversation_tool_state (conversation_id, state, updated_at_ms) VALUES (?, ?, ?)
ON CONFLICT (conversation_id) DO UPDATE SET
    state = excluded.state,
    updated_at_ms = excluded.updated_at_ms
"""

# The first outcome wins: a run that already ended keeps its outcome.
FINISH_RUN = """
UPDATE runs SET outcome = ?, error_code = ?, error_message = ?, ended_at_ms = ?
WHERE run_id = ? AND outcome IS NULL
"""


class ConversationRecords(StoreCore):
    """Conversations, request bindings and runs (a mixin of `Store`)."""

    def __init__(self, *, binding_cache: int = DEFAULT_CAPACITY, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._bindings = BindingCache(binding_cache)
        # The request ids bound and the conversations stored, known without a read (stored_ids.py):
        # the embedded store's only, which this process alone writes.
        embedded = self.path is not None and self._writer is not None
        self._stored_requests = StoredIds(kept=embedded)
        self._stored_conversations = StoredIds(kept=embedded)
        self._snapshots: set[asyncio.Task[None]] = set()  # being taken
        if embedded:
            self._take_snapshot(self._stored_requests, _REQUEST_IDS, flushed=False)
            self._take_snapshot(self._stored_conversations, _CONVERSATION_IDS, flushed=False)

    async def close(self) -> None:
        await super().close()
        await asyncio.gather(*self._snapshots, return_exceptions=True)  # their threads end with them

    def _queued(self, ids: StoredIds, stored_id: str, sql: str) -> None:
        if ids.queued(stored_id):
            self._take_snapshot(ids, sql)

    def _take_snapshot(self, ids: StoredIds, sql: str, *, flushed: bool = True) -> None:
        task = self._loop.create_task(self._snapshot(ids, sql, flushed))
        self._snapshots.add(task)
        task.add_done_callback(self._snapshots.discard)

    async def _snapshot(self, ids: StoredIds, sql: str, flushed: bool) -> None:
        """Read the ids `ids` holds a snapshot of; `flushed`: once everything queued so far has
        committed (a new snapshot's: `StoredIds.queued`)."""
        assert self.path is not None  # the embedded store's only
        try:
            if flushed:
                await self.flush()
            ids.loaded(await asyncio.to_thread(read_snapshot, self.path, sql))
        except (StoreError, sqlite3.Error) as exc:  # meanwhile every id not queued since is "maybe"
            if not self._closing:
                log.warning("no snapshot of stored ids (%s): %s", sql, exc)

    # -- writes ------------------------------------------------------------------------------
    def upsert_conversation(self, record: ConversationRecord) -> asyncio.Future[None]:
        """Insert or update a conversation. `created_at_ms` of an existing row is kept; its parent
        ref is immutable (a different one fails the write)."""
        row = self._conversation_row(record)
        return self._enqueue(RowWrite(f"upsert conversation {record.conversation_id}", Stage.CONVERSATIONS, UPSERT_CONVERSATION, row))

    def _conversation_row(self, record: ConversationRecord) -> Row:
        parent = record.parent
        if parent is not None and not isinstance(parent, ParentRef):
            raise TypeError(f"parent must be a ParentRef or None, got {type(parent).__name__}")
        self._queued(self._stored_conversations, record.conversation_id, _CONVERSATION_IDS)
        return (
            record.conversation_id,
            parent.parent_conversation_id if parent else None,
            parent.parent_run_id if parent else None,
            parent.parent_tool_call_id if parent else None,
            record.model_id,
            record.mode,
            record.created_at_ms,
            record.updated_at_ms,
            record.last_cursor_run_id,
            record.title,
        )

    def bind_request(
        self,
        request_id: str,
        conversation_id: str,
        cursor_run_id: str | None = None,
        *,
        created_at_ms: int | None = None,
        later: bool = False,
    ) -> asyncio.Future[BindOutcome]:
        """Bind `request_id` to `conversation_id`.

        Raises BindingConflict right away (nothing queued) if the request_id is being bound, or
        is known in memory to be bound, to another conversation; a stored binding memory no longer
        holds fails the write instead (WriteFailedError caused by BindingConflict). Binding it again
        to the same conversation is idempotent (a given cursor_run_id replaces the stored one) and
        resolves to ALREADY_BOUND. `later`: see `StoreCore._enqueue` (memory knows the binding at
        once either way).
        """
        return self._enqueue(self._bind_op(request_id, conversation_id, cursor_run_id, created_at_ms), later=later)

    def _bind_op(self, request_id: str | None, conversation_id: str, cursor_run_id: str | None, created_at_ms: int | None) -> BindRequest:
        self._check_writable()
        if not request_id or not conversation_id:
            raise ValueError("request_id and conversation_id must be non-empty")
        bindings = self._bindings
        bindings.reserve(request_id, conversation_id)
        self._queued(self._stored_requests, request_id, _REQUEST_IDS)
        row = (request_id, conversation_id, cursor_run_id, self._clock() if created_at_ms is None else created_at_ms)
        return BindRequest(bindings, row, probe=not bindings.take_unbound(request_id))

    def bound_conversation(self, request_id: str) -> str | None:
        """The conversation a request_id is bound (or being bound) to, if memory holds it: the
        bindings being written and the most recently used ones. None may mean "not looked up";
        `lookup_conversation` asks the database."""
        return self._bindings.get(request_id)

    async def lookup_conversation(self, request_id: str) -> str | None:
        """The conversation `request_id` is bound (or being bound) to: from memory; None without a
        read for an id never bound (a fresh request id: `StoredIds`); else one primary-key read
        whose answer is cached: made on the loop at once when it can be (exact: a binding being
        written is in memory, and none can be queued while it runs), else on the reader thread
        (exact when the caller gets it: a binding committed while the read ran is found in memory)."""
        bindings = self._bindings
        found = bindings.get(request_id)
        if found is not None:
            return found
        if self._stored_requests.absent(request_id):
            bindings.unbound(request_id)
            return None
        rows = self._read_now(SELECT_BOUND, (request_id,))
        if rows is not None:
            if not rows:
                bindings.unbound(request_id)
                return None
            bindings.remember(request_id, rows[0][0])
            return str(rows[0][0])
        while True:
            found = bindings.get(request_id)
            if found is not None:
                return found
            commits = bindings.commits
            rows = await self._read(SELECT_BOUND, (request_id,))
            if rows:
                bindings.remember(request_id, rows[0][0])
                return str(rows[0][0])
            found = bindings.get(request_id)  # bound since the read began
            # One committed after the read began and already pushed out of the cache by as many
            # others would be missed: read again (only under a flood of binds).
            if found is not None or bindings.commits - commits < bindings.capacity:
                return found

    def start_run(
        self, record: RunRecord, *, bind: bool = False, conversation: ConversationRecord | None = None, later: bool = False
    ) -> asyncio.Future[None]:
        """Store an active run's row. `bind`: and bind its request id to its conversation (as
        `bind_request` does, refused at once on a conflict memory knows); `conversation`: and upsert
        that conversation's row (as `upsert_conversation` does). A run start's records are then one
        write, committed or failed together. `later`: see `StoreCore._enqueue`."""
        if record.outcome is not None or record.ended_at_ms is not None:
            raise ValueError("start_run takes an active run (outcome and ended_at_ms None)")
        row = (record.run_id, record.conversation_id, record.cursor_run_id, record.request_id,
               record.phase, record.started_at_ms)
        description = f"start run {record.run_id}"
        if not bind and conversation is None:
            return self._enqueue(RowWrite(description, Stage.RUNS, INSERT_RUN, row), later=later)
        upsert = None if conversation is None else self._conversation_row(conversation)
        binding = self._bind_op(record.request_id, record.conversation_id, record.cursor_run_id, None) if bind else None
        return self._enqueue(StartRun(description, row, binding, upsert), later=later)

    def update_run_phase(self, run_id: str, phase: str) -> asyncio.Future[None]:
        """Record the phase of an active run; a no-op once the run has finished."""
        return self._enqueue(
            RowWrite(f"update phase of run {run_id}", Stage.RUNS, UPDATE_RUN_PHASE, (phase, run_id))
        )

    def finish_run(
        self,
        run_id: str,
        outcome: RunOutcome | str,
        *,
        ended_at_ms: int | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> asyncio.Future[None]:
        """Set a run's outcome. The first outcome wins; finishing an ended run is a no-op."""
        outcome = RunOutcome(outcome)
        ended = self._clock() if ended_at_ms is None else ended_at_ms
        row = (outcome.value, error_code, error_message, ended, run_id)
        return self._enqueue(RowWrite(f"finish run {run_id}", Stage.RUNS, FINISH_RUN, row))

    def put_tool_state(self, conversation_id: str, state: bytes) -> asyncio.Future[None]:
        """Replace the conversation's tool state (opaque bytes; the conversation must exist)."""
        if not isinstance(state, (bytes, bytearray, memoryview)):
            raise TypeError(f"tool state must be bytes, got {type(state).__name__}")
        row = (conversation_id, bytes(state), self._clock())
        return self._enqueue(
            RowWrite(f"put tool state of {conversation_id}", Stage.CHECKPOINTS, UPSERT_TOOL_STATE, row)
        )

    # -- reads -------------------------------------------------------------------------------
    async def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        return await self._read_job(lambda conn: select_conversation(conn, conversation_id))

    async def list_conversations(self, limit: int = 50, after: str | None = None) -> ConversationPage:
        """Most recently updated first, `limit` at a time: pass a page's `next` as `after` for the
        one that follows (a keyset cursor: every page is one index range, however deep)."""
        if limit < 1:
            raise ValueError("a page holds at least one conversation")
        order = "ORDER BY updated_at_ms DESC, conversation_id LIMIT ?"
        if after is None:
            rows = await self._read(f"{_CONVERSATION_SELECT} {order}", (limit + 1,))
        else:
            at, conversation_id = parse_cursor(after)
            rows = await self._read(
                f"{_CONVERSATION_SELECT} WHERE updated_at_ms <= ? AND (updated_at_ms < ? OR conversation_id > ?) {order}",
                (at, at, conversation_id, limit + 1),
            )
        records = [_conversation(r) for r in rows[:limit]]
        last = records[-1] if len(rows) > limit else None
        return ConversationPage(records, None if last is None else f"{last.updated_at_ms}.{last.conversation_id}")

    async def find_conversation_ids(self, prefix: str, limit: int = 2) -> list[str]:
        """Ids starting with `prefix`, in order, at most `limit` (a primary-key range scan)."""
        if not prefix:
            return []
        # Every string with the prefix sorts in [prefix, prefix with its last character bumped).
        upper = prefix[:-1] + chr(min(ord(prefix[-1]) + 1, 0x10FFFF))
        rows = await self._read(
            "SELECT conversation_id FROM conversations WHERE conversation_id >= ? AND conversation_id < ? "
            "ORDER BY conversation_id LIMIT ?",
            (prefix, upper, limit),
        )
        return [str(r[0]) for r in rows]

    async def get_tool_state(self, conversation_id: str) -> bytes | None:
        return await self._read_job(lambda conn: select_tool_state(conn, conversation_id))

    async def lookup_binding(self, request_id: str) -> BindingRecord | None:
        rows = await self._read(f"{_BINDING_SELECT} WHERE request_id = ?", (request_id,))
        return BindingRecord(*rows[0]) if rows else None

    async def get_run(self, run_id: str) -> RunRecord | None:
        rows = await self._read(f"{_RUN_SELECT} WHERE run_id = ?", (run_id,))
        return _run(rows[0]) if rows else None

    async def list_runs(self, conversation_id: str) -> list[RunRecord]:
        return await self._read_job(lambda conn: select_runs(conn, conversation_id))

    async def find_unfinished_runs(self, conversation_id: str | None = None) -> list[RunRecord]:
        """Runs without an outcome (of one conversation, when given: a range of its runs' index):
        after a crash these are the ones to mark INTERRUPTED_BY_CRASH (and resume from their
        conversation's latest checkpoint)."""
        if conversation_id is None:
            rows = await self._read(f"{_RUN_SELECT} WHERE outcome IS NULL ORDER BY started_at_ms, run_id", ())
        else:
            rows = await self._read(
                f"{_RUN_SELECT} WHERE conversation_id = ? AND outcome IS NULL ORDER BY started_at_ms, run_id", (conversation_id,)
            )
        return [_run(r) for r in rows]


_REQUEST_IDS = "SELECT request_id FROM request_bindings"
_CONVERSATION_IDS = "SELECT conversation_id FROM conversations"
_CONVERSATION_SELECT = (
    "SELECT conversation_id, created_at_ms, updated_at_ms, parent_conversation_id, "
    "parent_run_id, parent_tool_call_id, model_id, mode, last_cursor_run_id, title "
    "FROM conversations"
)
_BINDING_SELECT = "SELECT request_id, conversation_id, cursor_run_id, created_at_ms FROM request_bindings"
_RUN_SELECT = (
    "SELECT run_id, conversation_id, phase, started_at_ms, cursor_run_id, request_id, outcome, "
    "error_code, error_message, ended_at_ms FROM runs"
)


class StartRun(WriteOp):
    """A run's start records as one write: its request's binding, its conversation's row, its row."""

    __slots__ = ("_binding", "_conversation", "_description", "_run")

    def __init__(self, description: str, run: Row, binding: BindRequest | None, conversation: Row | None) -> None:
        self._description = description
        self._run = run
        self._binding = binding
        self._conversation = conversation

    def describe(self) -> str:
        return self._description

    def binding_keys(self) -> tuple[str, ...]:
        return () if self._binding is None else self._binding.binding_keys()

    def plan(self, ctx: BatchContext, out: list[Statement]) -> BindOutcome | None:
        # The binding first: a conflict refuses the write before any row of it is out.
        outcome = None if self._binding is None else self._binding.plan(ctx, out)
        if self._conversation is not None:
            out.append((Stage.CONVERSATIONS, UPSERT_CONVERSATION, self._conversation))
        out.append((Stage.RUNS, INSERT_RUN, self._run))
        return outcome

    def committed(self, planned: Any) -> None:
        if self._binding is not None:
            self._binding.committed(planned)

    def failed(self) -> None:
        if self._binding is not None:
            self._binding.failed()


def parse_cursor(cursor: str) -> tuple[int, str]:
    at, _, conversation_id = cursor.partition(".")
    if not at.isdigit() or not conversation_id:
        raise ValueError(f"{cursor!r} is not a page cursor (give the `next` of the page before)")
    return int(at), conversation_id


def select_conversation(conn: sqlite3.Connection, conversation_id: str) -> ConversationRecord | None:
    row = conn.execute(f"{_CONVERSATION_SELECT} WHERE conversation_id = ?", (conversation_id,)).fetchone()
    return _conversation(row) if row is not None else None


def select_tool_state(conn: sqlite3.Connection, conversation_id: str) -> bytes | None:
    row = conn.execute("SELECT state FROM conversation_tool_state WHERE conversation_id = ?", (conversation_id,)).fetchone()
    return bytes(row[0]) if row else None


def select_bindings(conn: sqlite3.Connection, conversation_id: str) -> list[BindingRecord]:
    rows = conn.execute(
        f"{_BINDING_SELECT} WHERE conversation_id = ? ORDER BY created_at_ms, request_id", (conversation_id,)
    )
    return [BindingRecord(*r) for r in rows]


def select_runs(conn: sqlite3.Connection, conversation_id: str) -> list[RunRecord]:
    rows = conn.execute(f"{_RUN_SELECT} WHERE conversation_id = ? ORDER BY started_at_ms, run_id", (conversation_id,))
    return [_run(r) for r in rows]


def _conversation(row: Sequence[Any]) -> ConversationRecord:
    parent = None
    if row[3] is not None:
        parent = ParentRef(row[3], row[4], row[5])
    return ConversationRecord(
        conversation_id=row[0],
        created_at_ms=row[1],
        updated_at_ms=row[2],
        parent=parent,
        model_id=row[6],
        mode=row[7],
        last_cursor_run_id=row[8],
        title=row[9],
    )


def _run(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        run_id=row[0],
        conversation_id=row[1],
        phase=row[2],
        started_at_ms=row[3],
        cursor_run_id=row[4],
        request_id=row[5],
        outcome=None if row[6] is None else RunOutcome(row[6]),
        error_code=row[7],
        error_message=row[8],
        ended_at_ms=row[9],
    )
