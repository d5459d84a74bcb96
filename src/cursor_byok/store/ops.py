"""Queued writes and how a batch of them becomes one transaction.

Every public write method of `Store` builds one `WriteOp` (the record families define theirs next
to their SQL). The writer thread takes a batch of ops,
probes the little database state the batch depends on (the last seq of each touched conversation,
the stored bindings of the request ids it binds, and, only when an insert found an event id stored
already, which of its event ids exist), lets each op `plan` its rows against a batch-local view of that
state, and executes the rows grouped by table. Tables are visited in foreign-key order (parents
first) and rows for one table keep their queue order, so grouping changes nothing a caller can see:
the whole batch commits or none of it does.
"""
from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterable
from operator import itemgetter
from typing import Any, ClassVar


class Stage(enum.IntEnum):
    """Order in which a batch's rows are executed: referenced tables before referencing ones."""

    CONVERSATIONS = 0
    BINDINGS = 1
    RUNS = 2
    EVENTS = 3
    CHECKPOINTS = 4
    SUPERSEDED = 5  # after every checkpoint insert: a batch's inserts and its drops each share one executemany
    DELIVERIES = 6
    TRACES = 7
    USAGE = 8
    CALLS = 9
    INBOUND = 10
    RETENTION = 11
    DEVELOPERS = 12


# A LIMIT that limits nothing, in a form both backends take (SQLite's -1 is an error in PostgreSQL).
UNLIMITED = 2**62

Row = tuple[Any, ...]
Statement = tuple[Stage, str, Row]

PROBE_SEQS = """
SELECT j.value,
       (SELECT COALESCE(MAX(seq), 0) FROM history_events WHERE conversation_id = j.value),
       (SELECT COALESCE(MAX(seq), 0) FROM checkpoints WHERE conversation_id = j.value)
FROM json_each(?) AS j
"""

PROBE_BINDINGS = """
SELECT b.request_id, b.conversation_id
FROM json_each(?) AS j
JOIN request_bindings AS b ON b.request_id = j.value
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

    __slots__ = ("bindings", "existing_events", "seqs")

    def __init__(
        self,
        seqs: dict[str, tuple[int, int]],
        existing_events: dict[tuple[str, str], int],
        bindings: dict[str, str] | None = None,
    ) -> None:
        self.seqs = seqs  # conversation → (last event seq, last checkpoint seq)
        self.existing_events = existing_events  # (conversation, event_id) → stored seq
        self.bindings = bindings or {}  # request_id → the conversation it is stored bound to


class BatchContext:
    """A batch's view of per-conversation counters. Merged into the writer's cache only after
    COMMIT, so a rolled-back batch leaves the cache as it was."""

    __slots__ = ("_bindings", "_cache", "_counters", "_new_events", "_probe")

    def __init__(self, cache: dict[str, tuple[int, int]], probe: Probe) -> None:
        self._cache = cache
        self._probe = probe
        self._counters: dict[str, list[int]] = {}
        self._new_events: dict[tuple[str, str], int] = {}
        self._bindings: dict[str, str] = {}  # bound earlier in this batch

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

    def bound_conversation(self, request_id: str) -> str | None:
        bound = self._bindings.get(request_id)
        return bound if bound is not None else self._probe.bindings.get(request_id)

    def bind(self, request_id: str, conversation_id: str) -> None:
        self._bindings[request_id] = conversation_id

    def commit_into(self, cache: dict[str, tuple[int, int]]) -> None:
        """Merge the batch's counters into the writer's cache, most recently used last."""
        for conversation_id, (events, checkpoints) in self._counters.items():
            cache.pop(conversation_id, None)
            cache[conversation_id] = (events, checkpoints)


# The methods by which an op names what a batch probes for it.
PROBED_KEYS = ("seq_conversations", "event_keys", "binding_keys")


class WriteOp:
    """One queued write. `plan` appends its rows and returns the value its future resolves to;
    it must raise before touching `ctx` or `out` if the write is invalid.

    A plain base class, not an ABC: the writer asks each op of every batch `isinstance(op,
    Barrier)`, which an ABC answers through a Python-level `__instancecheck__`. A subclass that
    does not define `describe` and `plan` is refused when it is defined."""

    __slots__ = ("future",)

    future: asyncio.Future[Any]
    # Whether the class names any key a batch may probe for (defines one of `PROBED_KEYS`): the
    # writer asks only those ops, a start's plain rows cost it no call.
    keyed: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        missing = [name for name in ("describe", "plan") if getattr(cls, name) is getattr(WriteOp, name)]
        if missing:
            raise TypeError(f"{cls.__name__} must define {' and '.join(missing)}")
        cls.keyed = any(getattr(cls, name) is not getattr(WriteOp, name) for name in PROBED_KEYS)

    def describe(self) -> str:
        raise NotImplementedError  # never reached: every subclass defines it (checked above)

    def seq_conversations(self) -> Iterable[str]:
        return ()

    def event_keys(self) -> Iterable[tuple[str, str]]:
        return ()

    def binding_keys(self) -> Iterable[str]:
        return ()

    def plan(self, ctx: BatchContext, out: list[Statement]) -> Any:
        raise NotImplementedError  # never reached: every subclass defines it (checked above)

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


def group_statements(statements: list[Statement]) -> list[tuple[str, list[Row]]]:
    """Group rows by table in foreign-key order; consecutive rows of one SQL share executemany.
    Sorts `statements` in place (stably: rows of one table keep their queue order)."""
    statements.sort(key=_stage)
    groups: list[tuple[str, list[Row]]] = []
    last_stage: Stage | None = None
    last_sql: str | None = None
    rows: list[Row] = []
    for stage, sql, row in statements:
        if sql is last_sql and stage is last_stage:
            rows.append(row)
        else:
            last_stage, last_sql, rows = stage, sql, [row]
            groups.append((sql, rows))
    return groups


_stage = itemgetter(0)


def require_bytes(name: str, value: object) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name} must be bytes, got {type(value).__name__}")
    return bytes(value)
