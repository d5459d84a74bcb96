"""Conversations, the request ids bound to them, and their runs: the records that say which
conversation a request belongs to and what ran in it."""
from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from .core import StoreCore
from .errors import BindingConflict
from .ops import BatchContext, Row, RowWrite, Stage, Statement, WriteOp
from .records import BindingRecord, BindOutcome, ConversationRecord, ParentRef, RunOutcome, RunRecord

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

# Setting conversation_id on conflict lets the immutability trigger refuse a move instead of the
# update silently doing nothing.
UPSERT_BINDING = """
INSERT INTO request_bindings (request_id, conversation_id, cursor_run_id, created_at_ms)
VALUES (?, ?, ?, ?)
ON CONFLICT (request_id) DO UPDATE SET
    conversation_id = excluded.conversation_id,
    cursor_run_id = COALESCE(excluded.cursor_run_id, cursor_run_id)
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


class BindingIndex:
    """request_id → conversation_id for every binding written or loaded by this store.

    Conflicts are decided here, synchronously at enqueue time, so two concurrent binds of one
    request_id to different conversations can never both be accepted. Uncommitted bindings are
    reservations, dropped again if every write carrying them fails.
    """

    __slots__ = ("_bound", "_reserved")

    def __init__(self) -> None:
        self._bound: dict[str, str] = {}
        self._reserved: dict[str, list[Any]] = {}  # request_id → [conversation_id, pending writes]

    def __len__(self) -> int:
        return len(self._bound)

    def load(self, pairs: Iterable[tuple[str, str]]) -> None:
        self._bound.update(pairs)

    def get(self, request_id: str) -> str | None:
        bound = self._bound.get(request_id)
        if bound is not None:
            return bound
        reservation = self._reserved.get(request_id)
        return None if reservation is None else reservation[0]

    def reserve(self, request_id: str, conversation_id: str) -> bool:
        """Raise BindingConflict, or accept; True if this created a reservation."""
        existing = self.get(request_id)
        if existing is not None and existing != conversation_id:
            raise BindingConflict(request_id, existing, conversation_id)
        if request_id in self._bound:
            return False
        reservation = self._reserved.get(request_id)
        if reservation is None:
            self._reserved[request_id] = [conversation_id, 1]
        else:
            reservation[1] += 1
        return True

    def _release(self, request_id: str) -> None:
        reservation = self._reserved[request_id]
        reservation[1] -= 1
        if reservation[1] == 0:
            del self._reserved[request_id]

    def committed(self, request_id: str, conversation_id: str, reserved: bool) -> BindOutcome:
        outcome = BindOutcome.ALREADY_BOUND if request_id in self._bound else BindOutcome.BOUND
        self._bound[request_id] = conversation_id
        if reserved:
            self._release(request_id)
        return outcome

    def failed(self, request_id: str, reserved: bool) -> None:
        if reserved:
            self._release(request_id)


class BindRequest(WriteOp):
    __slots__ = ("_index", "_request_id", "_reserved", "_row")

    def __init__(self, index: BindingIndex, row: Row, reserved: bool) -> None:
        self._index = index
        self._row = row
        self._request_id: str = row[0]
        self._reserved = reserved

    def describe(self) -> str:
        return f"bind request {self._request_id} to {self._row[1]}"

    def plan(self, ctx: BatchContext, out: list[Statement]) -> Any:
        out.append((Stage.BINDINGS, UPSERT_BINDING, self._row))
        return None

    def committed(self, planned: Any) -> BindOutcome:
        return self._index.committed(self._request_id, self._row[1], self._reserved)

    def failed(self) -> None:
        self._index.failed(self._request_id, self._reserved)


class ConversationRecords(StoreCore):
    """Conversations, request bindings and runs (a mixin of `Store`)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._bindings = BindingIndex()

    async def _loaded(self) -> None:
        await super()._loaded()
        if self.schema_version >= 1:
            rows = await self._read("SELECT request_id, conversation_id FROM request_bindings", ())
            self._bindings.load((str(r[0]), str(r[1])) for r in rows)

    # -- writes ------------------------------------------------------------------------------
    def upsert_conversation(self, record: ConversationRecord) -> asyncio.Future[None]:
        """Insert or update a conversation. `created_at_ms` of an existing row is kept; its parent
        ref is immutable (a different one fails the write)."""
        parent = record.parent
        if parent is not None and not isinstance(parent, ParentRef):
            raise TypeError(f"parent must be a ParentRef or None, got {type(parent).__name__}")
        row = (
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
        return self._enqueue(
            RowWrite(f"upsert conversation {record.conversation_id}", Stage.CONVERSATIONS,
                     UPSERT_CONVERSATION, row)
        )

    def bind_request(
        self,
        request_id: str,
        conversation_id: str,
        cursor_run_id: str | None = None,
        *,
        created_at_ms: int | None = None,
    ) -> asyncio.Future[BindOutcome]:
        """Bind `request_id` to `conversation_id`.

        Raises BindingConflict right away (nothing queued) if the request_id is bound, or being
        bound, to another conversation. Binding it again to the same conversation is idempotent
        (a given cursor_run_id replaces the stored one) and resolves to ALREADY_BOUND.
        """
        self._check_open()
        if not request_id or not conversation_id:
            raise ValueError("request_id and conversation_id must be non-empty")
        reserved = self._bindings.reserve(request_id, conversation_id)
        row = (request_id, conversation_id, cursor_run_id,
               self._clock() if created_at_ms is None else created_at_ms)
        return self._enqueue(BindRequest(self._bindings, row, reserved))

    def bound_conversation(self, request_id: str) -> str | None:
        """The conversation a request_id is bound (or being bound) to, from memory."""
        return self._bindings.get(request_id)

    def start_run(self, record: RunRecord) -> asyncio.Future[None]:
        if record.outcome is not None or record.ended_at_ms is not None:
            raise ValueError("start_run takes an active run (outcome and ended_at_ms None)")
        row = (record.run_id, record.conversation_id, record.cursor_run_id, record.request_id,
               record.phase, record.started_at_ms)
        return self._enqueue(RowWrite(f"start run {record.run_id}", Stage.RUNS, INSERT_RUN, row))

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

    async def list_conversations(self, limit: int = 50, offset: int = 0) -> list[ConversationRecord]:
        """Most recently updated first."""
        rows = await self._read(
            f"{_CONVERSATION_SELECT} ORDER BY updated_at_ms DESC, conversation_id LIMIT ? OFFSET ?",
            (limit, offset),
        )
        return [_conversation(r) for r in rows]

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

    async def find_unfinished_runs(self) -> list[RunRecord]:
        """Runs without an outcome: after a crash these are the ones to mark
        INTERRUPTED_BY_CRASH (and resume from their conversation's latest checkpoint)."""
        rows = await self._read(f"{_RUN_SELECT} WHERE outcome IS NULL ORDER BY started_at_ms, run_id", ())
        return [_run(r) for r in rows]


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
