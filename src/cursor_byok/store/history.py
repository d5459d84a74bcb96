"""A conversation's history: events (append-only, gap-free seqs per conversation) and its newest
checkpoint (a serialized state, numbered per conversation).

Only the newest checkpoint is kept: each one is the conversation's whole state, so keeping every
one would store the conversation again per turn (its size growing with the square of its turns).
An older checkpoint is superseded by the next; the events stay the record of what happened."""
from __future__ import annotations

import asyncio
import enum
import re
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from .core import StoreCore
from .ops import UNLIMITED, BatchContext, Stage, Statement, WriteOp, require_bytes
from .records import AppendResult, CheckpointKind, CheckpointRecord, EventAppend, EventKind, EventRecord, NewEvent

_EVENT_KIND = re.compile(r"[a-z][a-z0-9_]{0,63}")
_WELL_KNOWN_KINDS = frozenset(kind.value for kind in EventKind)  # valid: no pattern to match


INSERT_EVENT = """
INSERT INTO history_events (conversation_id, seq, event_id, kind, run_id, payload, created_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?)
"""

INSERT_CHECKPOINT = """
INSERT INTO checkpoints (conversation_id, seq, through_event_seq, run_id, kind, state,
    created_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?)
"""

# Runs after the insert of checkpoint `seq` (the gap-free trigger reads the highest seq, which stays).
DROP_SUPERSEDED_CHECKPOINTS = "DELETE FROM checkpoints WHERE conversation_id = ? AND seq < ?"


class AppendEvents(WriteOp):
    __slots__ = ("_conversation_id", "_created_at_ms", "_events")

    def __init__(
        self, conversation_id: str, events: tuple[NewEvent, ...], created_at_ms: int
    ) -> None:
        self._conversation_id = conversation_id
        self._events = events
        self._created_at_ms = created_at_ms

    def describe(self) -> str:
        return f"append {len(self._events)} event(s) to {self._conversation_id}"

    def seq_conversations(self) -> Iterable[str]:
        return (self._conversation_id,)

    def event_keys(self) -> Iterable[tuple[str, str]]:
        return [(self._conversation_id, event.event_id) for event in self._events]

    def plan(self, ctx: BatchContext, out: list[Statement]) -> AppendResult:
        conversation_id = self._conversation_id
        results: list[EventAppend] = []
        for event in self._events:
            stored = ctx.stored_event_seq(conversation_id, event.event_id)
            if stored is not None:
                results.append(EventAppend(event.event_id, stored, True))
                continue
            seq = ctx.assign_event_seq(conversation_id, event.event_id)
            created = event.created_at_ms if event.created_at_ms is not None else self._created_at_ms
            out.append(
                (
                    Stage.EVENTS,
                    INSERT_EVENT,
                    (conversation_id, seq, event.event_id, event.kind, event.run_id,
                     event.payload, created),
                )
            )
            results.append(EventAppend(event.event_id, seq, False))
        return AppendResult(conversation_id, tuple(results))


class PutCheckpoint(WriteOp):
    __slots__ = (
        "_conversation_id", "_created_at_ms", "_kind", "_run_id", "_state", "_through_event_seq",
    )

    def __init__(
        self,
        conversation_id: str,
        state: bytes,
        kind: CheckpointKind,
        run_id: str | None,
        through_event_seq: int | None,
        created_at_ms: int,
    ) -> None:
        self._conversation_id = conversation_id
        self._state = state
        self._kind = kind
        self._run_id = run_id
        self._through_event_seq = through_event_seq
        self._created_at_ms = created_at_ms

    def describe(self) -> str:
        return f"put {self._kind.value} checkpoint of {self._conversation_id}"

    def seq_conversations(self) -> Iterable[str]:
        return (self._conversation_id,)

    def plan(self, ctx: BatchContext, out: list[Statement]) -> CheckpointRecord:
        conversation_id = self._conversation_id
        last_event = ctx.last_event_seq(conversation_id)
        through = last_event if self._through_event_seq is None else self._through_event_seq
        if through > last_event:
            raise ValueError(
                f"checkpoint claims events through seq {through}, but {conversation_id} has "
                f"{last_event} event(s) (in queue order)"
            )
        seq = ctx.assign_checkpoint_seq(conversation_id)
        out.append(
            (
                Stage.CHECKPOINTS,
                INSERT_CHECKPOINT,
                (conversation_id, seq, through, self._run_id, self._kind.value, self._state,
                 self._created_at_ms),
            )
        )
        out.append((Stage.SUPERSEDED, DROP_SUPERSEDED_CHECKPOINTS, (conversation_id, seq)))
        return CheckpointRecord(
            conversation_id=conversation_id,
            seq=seq,
            through_event_seq=through,
            kind=self._kind,
            state=self._state,
            created_at_ms=self._created_at_ms,
            run_id=self._run_id,
        )


class HistoryRecords(StoreCore):
    """History events and checkpoints (a mixin of `Store`)."""

    # -- writes ------------------------------------------------------------------------------
    def append_events(
        self, conversation_id: str, events: Iterable[NewEvent]
    ) -> asyncio.Future[AppendResult]:
        """Append events to a conversation's history, in order.

        Seqs are assigned at commit time in queue order: gap-free per conversation, continuing
        after the highest stored seq across restarts. An event whose event_id is already stored
        (or appears earlier in the same call) is not stored again and is reported as a duplicate.
        """
        checked = []
        for event in events:
            kind = event.kind
            if kind.__class__ is not str:
                # Store the plain value: str() of a (str, Enum) member would be "Cls.MEMBER".
                kind = kind.value if isinstance(kind, enum.Enum) else kind
            if not isinstance(kind, str) or (kind not in _WELL_KNOWN_KINDS and not _EVENT_KIND.fullmatch(kind)):
                raise ValueError(f"event kind must be a lowercase identifier, got {kind!r}")
            payload = require_bytes("event payload", event.payload)
            if not isinstance(event.event_id, str) or not event.event_id:
                raise ValueError("event_id must be a non-empty string")
            if kind is not event.kind or payload is not event.payload:
                event = msgspec.structs.replace(event, kind=kind, payload=payload)
            checked.append(event)
        return self._enqueue(AppendEvents(conversation_id, tuple(checked), self._clock()))

    def put_checkpoint(
        self,
        conversation_id: str,
        state: bytes,
        *,
        kind: CheckpointKind | str,
        run_id: str | None = None,
        through_event_seq: int | None = None,
        created_at_ms: int | None = None,
    ) -> asyncio.Future[CheckpointRecord]:
        """Store a serialized conversation state as the conversation's next checkpoint, which
        replaces the one before.

        `through_event_seq` defaults to the last event seq appended before this call (queue
        order); an explicit value beyond that fails the write.
        """
        op = PutCheckpoint(
            conversation_id,
            require_bytes("checkpoint state", state),
            CheckpointKind(kind),
            run_id,
            through_event_seq,
            self._clock() if created_at_ms is None else created_at_ms,
        )
        return self._enqueue(op)

    # -- reads -------------------------------------------------------------------------------
    async def load_events(
        self, conversation_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        return await self._read_job(lambda conn: select_events(conn, conversation_id, after_seq, limit))

    async def last_event_seq(self, conversation_id: str) -> int:
        rows = await self._read(
            "SELECT COALESCE(MAX(seq), 0) FROM history_events WHERE conversation_id = ?",
            (conversation_id,),
        )
        return int(rows[0][0])

    async def latest_checkpoint(self, conversation_id: str) -> CheckpointRecord | None:
        rows = await self._read(
            f"{_CHECKPOINT_SELECT} WHERE conversation_id = ? ORDER BY seq DESC LIMIT 1",
            (conversation_id,),
        )
        return _checkpoint(rows[0]) if rows else None


_EVENT_SELECT = (
    "SELECT conversation_id, seq, event_id, kind, payload, created_at_ms, run_id "
    "FROM history_events"
)
_CHECKPOINT_SELECT = (
    "SELECT conversation_id, seq, through_event_seq, kind, state, created_at_ms, run_id "
    "FROM checkpoints"
)


def select_events(conn: sqlite3.Connection, conversation_id: str, after_seq: int = 0, limit: int | None = None) -> list[EventRecord]:
    rows = conn.execute(
        f"{_EVENT_SELECT} WHERE conversation_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (conversation_id, after_seq, UNLIMITED if limit is None else limit),
    )
    return [EventRecord(conversation_id=r[0], seq=r[1], event_id=r[2], kind=r[3], payload=r[4],
                        created_at_ms=r[5], run_id=r[6]) for r in rows]


def select_checkpoints(conn: sqlite3.Connection, conversation_id: str) -> list[CheckpointRecord]:
    rows = conn.execute(f"{_CHECKPOINT_SELECT} WHERE conversation_id = ? ORDER BY seq", (conversation_id,))
    return [_checkpoint(r) for r in rows]


def _checkpoint(row: Sequence[Any]) -> CheckpointRecord:
    return CheckpointRecord(
        conversation_id=row[0],
        seq=row[1],
        through_event_seq=row[2],
        kind=CheckpointKind(row[3]),
        state=row[4],
        created_at_ms=row[5],
        run_id=row[6],
    )
