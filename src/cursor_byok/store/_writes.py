"""Queued writes and how a batch of them becomes one transaction.

Every public write method of `Store` builds one `WriteOp`. The writer task takes a batch of ops,
probes the little database state the batch depends on (the last seq of each touched conversation,
which event ids already exist), lets each op `plan` its rows against a batch-local view of that
state, and executes the rows grouped by table. Tables are visited in foreign-key order (parents
first) and rows for one table keep their queue order, so grouping changes nothing a caller can see:
the whole batch commits or none of it does.
"""
from __future__ import annotations

import abc
import asyncio
import enum
from collections.abc import Iterable
from typing import Any

from .errors import BindingConflict
from .records import (
    AppendResult,
    BindOutcome,
    CheckpointKind,
    CheckpointRecord,
    EventAppend,
    NewEvent,
)


class Stage(enum.IntEnum):
    """Order in which a batch's rows are executed: referenced tables before referencing ones."""

    CONVERSATIONS = 0
    BINDINGS = 1
    RUNS = 2
    EVENTS = 3
    CHECKPOINTS = 4
    DELIVERIES = 5
    BLOBS = 6
    TRACES = 7
    USAGE = 8


Row = tuple[Any, ...]
Statement = tuple[Stage, str, Row]

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

# One row per conversation, replaced whole (an opaque state the conversation layer encodes).
UPSERT_TOOL_STATE = """
INSERT INTO conversation_tool_state (conversation_id, state, updated_at_ms) VALUES (?, ?, ?)
ON CONFLICT (conversation_id) DO UPDATE SET
    state = excluded.state,
    updated_at_ms = excluded.updated_at_ms
"""

UPDATE_RUN_PHASE = "UPDATE runs SET phase = ? WHERE run_id = ? AND outcome IS NULL"

# The first outcome wins: a run that already ended keeps its outcome.
FINISH_RUN = """
UPDATE runs SET outcome = ?, error_code = ?, error_message = ?, ended_at_ms = ?
WHERE run_id = ? AND outcome IS NULL
"""

INSERT_EVENT = """
INSERT INTO history_events (conversation_id, seq, event_id, kind, run_id, payload, created_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?)
"""

INSERT_CHECKPOINT = """
INSERT INTO checkpoints (conversation_id, seq, through_event_seq, run_id, kind, state,
    created_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?)
"""

# Idempotent; a stored copy whose bytes differ (corruption) is repaired by the new put.
PUT_BLOB = """
INSERT INTO blobs (blob_id, data, created_at_ms) VALUES (?, ?, ?)
ON CONFLICT (blob_id) DO UPDATE SET data = excluded.data WHERE data IS NOT excluded.data
"""

UPSERT_TRACE = """
INSERT INTO traces (trace_id, request_id, conversation_id, route, method, path, status,
    bytes_in, bytes_out, started_at_ms, duration_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (trace_id) DO UPDATE SET
    request_id = COALESCE(excluded.request_id, request_id),
    conversation_id = COALESCE(excluded.conversation_id, conversation_id),
    status = COALESCE(excluded.status, status),
    bytes_in = excluded.bytes_in,
    bytes_out = excluded.bytes_out,
    duration_ms = COALESCE(excluded.duration_ms, duration_ms)
"""

INSERT_USAGE = """
INSERT INTO usage (run_id, conversation_id, model_id, provider, input_tokens, output_tokens,
    cache_read_tokens, cache_write_tokens, reasoning_tokens, ttft_ms, duration_ms, created_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""

# A completion consumed before it was enqueued (awaited directly) stays consumed when the
# notification arrives later; that is the dedup.
ENQUEUE_DELIVERY = """
INSERT INTO background_deliveries (conversation_id, delivery_id, payload, state, created_at_ms)
VALUES (?, ?, ?, 'pending', ?)
ON CONFLICT (conversation_id, delivery_id) DO UPDATE SET
    payload = COALESCE(payload, excluded.payload)
"""

CONSUME_DELIVERY = """
INSERT INTO background_deliveries (conversation_id, delivery_id, payload, state, created_at_ms,
    consumed_at_ms)
VALUES (?, ?, NULL, 'consumed', ?, ?)
ON CONFLICT (conversation_id, delivery_id) DO UPDATE SET
    state = 'consumed', consumed_at_ms = excluded.consumed_at_ms
WHERE state = 'pending'
"""

PROBE_SEQS = """
SELECT j.value,
       (SELECT COALESCE(MAX(seq), 0) FROM history_events WHERE conversation_id = j.value),
       (SELECT COALESCE(MAX(seq), 0) FROM checkpoints WHERE conversation_id = j.value)
FROM json_each(?) AS j
"""

PROBE_EVENT_IDS = """
SELECT h.conversation_id, h.event_id, h.seq
FROM json_each(?) AS j
JOIN history_events AS h
  ON h.conversation_id = json_extract(j.value, '$[0]')
 AND h.event_id = json_extract(j.value, '$[1]')
"""


class Probe:
    """Database state read at the start of a batch's transaction."""

    __slots__ = ("existing_events", "seqs")

    def __init__(
        self, seqs: dict[str, tuple[int, int]], existing_events: dict[tuple[str, str], int]
    ) -> None:
        self.seqs = seqs  # conversation → (last event seq, last checkpoint seq)
        self.existing_events = existing_events  # (conversation, event_id) → stored seq


class BatchContext:
    """A batch's view of per-conversation counters. Merged into the writer's cache only after
    COMMIT, so a rolled-back batch leaves the cache as it was."""

    __slots__ = ("_cache", "_counters", "_new_events", "_probe")

    def __init__(self, cache: dict[str, tuple[int, int]], probe: Probe) -> None:
        self._cache = cache
        self._probe = probe
        self._counters: dict[str, list[int]] = {}
        self._new_events: dict[tuple[str, str], int] = {}

    def _counter(self, conversation_id: str) -> list[int]:
        counter = self._counters.get(conversation_id)
        if counter is None:
            base = self._cache.get(conversation_id)
            if base is None:
                base = self._probe.seqs[conversation_id]
            counter = [base[0], base[1]]
            self._counters[conversation_id] = counter
        return counter

    def stored_event_seq(self, conversation_id: str, event_id: str) -> int | None:
        key = (conversation_id, event_id)
        seq = self._new_events.get(key)
        return seq if seq is not None else self._probe.existing_events.get(key)

    def assign_event_seq(self, conversation_id: str, event_id: str) -> int:
        counter = self._counter(conversation_id)
        counter[0] += 1
        self._new_events[(conversation_id, event_id)] = counter[0]
        return counter[0]

    def last_event_seq(self, conversation_id: str) -> int:
        return self._counter(conversation_id)[0]

    def assign_checkpoint_seq(self, conversation_id: str) -> int:
        counter = self._counter(conversation_id)
        counter[1] += 1
        return counter[1]

    def commit_into(self, cache: dict[str, tuple[int, int]]) -> None:
        for conversation_id, (events, checkpoints) in self._counters.items():
            cache[conversation_id] = (events, checkpoints)


class WriteOp(abc.ABC):
    """One queued write. `plan` appends its rows and returns the value its future resolves to;
    it must raise before touching `ctx` or `out` if the write is invalid."""

    __slots__ = ("future",)

    future: asyncio.Future[Any]

    @abc.abstractmethod
    def describe(self) -> str: ...

    def seq_conversations(self) -> Iterable[str]:
        return ()

    def event_keys(self) -> Iterable[tuple[str, str]]:
        return ()

    @abc.abstractmethod
    def plan(self, ctx: BatchContext, out: list[Statement]) -> Any: ...

    def committed(self, planned: Any) -> Any:
        return planned

    def failed(self) -> None:
        return None


class Barrier(WriteOp):
    """Writes nothing; resolves once every write queued before it has committed or failed."""

    __slots__ = ()

    def describe(self) -> str:
        return "flush"

    def plan(self, ctx: BatchContext, out: list[Statement]) -> Any:
        return None


class RowWrite(WriteOp):
    """A write of one row whose result is known when it is enqueued."""

    __slots__ = ("_description", "_result", "_row", "_sql", "_stage")

    def __init__(
        self, description: str, stage: Stage, sql: str, row: Row, result: Any = None
    ) -> None:
        self._description = description
        self._stage = stage
        self._sql = sql
        self._row = row
        self._result = result

    def describe(self) -> str:
        return self._description

    def plan(self, ctx: BatchContext, out: list[Statement]) -> Any:
        out.append((self._stage, self._sql, self._row))
        return self._result


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
        return CheckpointRecord(
            conversation_id=conversation_id,
            seq=seq,
            through_event_seq=through,
            kind=self._kind,
            state=self._state,
            created_at_ms=self._created_at_ms,
            run_id=self._run_id,
        )


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


def group_statements(statements: list[Statement]) -> list[tuple[str, list[Row]]]:
    """Group rows by table in foreign-key order; consecutive rows of one SQL share executemany."""
    stages: list[list[tuple[str, list[Row]]]] = [[] for _ in Stage]
    for stage, sql, row in statements:
        groups = stages[stage]
        if groups and groups[-1][0] is sql:
            groups[-1][1].append(row)
        else:
            groups.append((sql, [row]))
    return [group for groups in stages for group in groups]
