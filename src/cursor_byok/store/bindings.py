"""Request bindings (request_id → conversation_id) without holding them all: the table is the truth,
looked up by its primary key; memory holds the bindings being written and a bounded cache of the
most recently used ones.

A binding never moves, so a cached one never goes stale. A conflict is refused at enqueue time when
memory knows the request id (a binding being written is always known, so two concurrent binds of one
request id to different conversations can never both be accepted), and otherwise by the writer,
which reads the stored binding of every request id its batch binds before planning it, unless the
loop found none (`unbound`: by its own read, or knowing the id was never stored nor queued,
stored_ids.py; only this process binds, so nothing can have bound it since but the bind that takes
that answer; the table's trigger still refuses a move).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .errors import BindingConflict
from .ops import BatchContext, Row, Stage, Statement, WriteOp
from .records import BindOutcome

# Setting conversation_id on conflict lets the immutability trigger refuse a move instead of the
# update silently doing nothing (the writer's probe refuses it first).
UPSERT_BINDING = """
INSERT INTO request_bindings (request_id, conversation_id, cursor_run_id, created_at_ms)
VALUES (?, ?, ?, ?)
ON CONFLICT (request_id) DO UPDATE SET
    conversation_id = excluded.conversation_id,
    cursor_run_id = COALESCE(excluded.cursor_run_id, request_bindings.cursor_run_id)
"""

SELECT_BOUND = "SELECT conversation_id FROM request_bindings WHERE request_id = ?"

# Enough for every request id in use at once many times over; ~200 bytes each.
DEFAULT_CAPACITY = 4096


class BindingCache:
    """The bindings being written (each until its last pending write commits or fails) and, up to
    `capacity`, the most recently used committed or looked-up ones."""

    __slots__ = ("_recent", "_reserved", "_unbound", "capacity", "commits")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("the binding cache needs room for at least one binding")
        self.capacity = capacity
        self.commits = 0  # bindings committed so far: tells a lookup whether one may have passed it by
        self._recent: OrderedDict[str, str] = OrderedDict()
        self._reserved: dict[str, list[Any]] = {}  # request_id → [conversation_id, pending writes]
        self._unbound: OrderedDict[str, bool] = OrderedDict()  # read as not stored, not bound since

    def __len__(self) -> int:
        return len(self._recent) + len(self._reserved)

    def get(self, request_id: str) -> str | None:
        reservation = self._reserved.get(request_id)
        if reservation is not None:
            return reservation[0]
        bound = self._recent.get(request_id)
        if bound is not None:
            self._recent.move_to_end(request_id)
        return bound

    def remember(self, request_id: str, conversation_id: str) -> None:
        self._recent[request_id] = conversation_id
        self._recent.move_to_end(request_id)
        while len(self._recent) > self.capacity:
            self._recent.popitem(last=False)

    def unbound(self, request_id: str) -> None:
        """The store holds no binding of `request_id`, as read while nothing was being committed."""
        self._unbound[request_id] = True
        while len(self._unbound) > self.capacity:
            self._unbound.popitem(last=False)

    def take_unbound(self, request_id: str) -> bool:
        """Whether `request_id` was read as not stored (said once: the bind that takes it stores it)."""
        return self._unbound.pop(request_id, False)

    def reserve(self, request_id: str, conversation_id: str) -> None:
        """Raise BindingConflict if memory knows another binding; else hold this one until its
        write is done."""
        known = self.get(request_id)
        if known is not None and known != conversation_id:
            raise BindingConflict(request_id, known, conversation_id)
        reservation = self._reserved.get(request_id)
        if reservation is None:
            self._reserved[request_id] = [conversation_id, 1]
        else:
            reservation[1] += 1

    def _release(self, request_id: str) -> None:
        reservation = self._reserved[request_id]
        reservation[1] -= 1
        if reservation[1] == 0:
            del self._reserved[request_id]

    def committed(self, request_id: str, conversation_id: str) -> None:
        self.commits += 1
        self.remember(request_id, conversation_id)
        self._release(request_id)

    def failed(self, request_id: str) -> None:
        self._release(request_id)


class BindRequest(WriteOp):
    __slots__ = ("_cache", "_probe", "_request_id", "_row")

    def __init__(self, cache: BindingCache, row: Row, *, probe: bool = True) -> None:
        """`probe` False: the request id is known not to be stored (`BindingCache.take_unbound`)."""
        self._cache = cache
        self._row = row
        self._request_id: str = row[0]
        self._probe = probe

    def describe(self) -> str:
        return f"bind request {self._request_id} to {self._row[1]}"

    def binding_keys(self) -> tuple[str, ...]:
        return (self._request_id,) if self._probe else ()

    def plan(self, ctx: BatchContext, out: list[Statement]) -> BindOutcome:
        conversation_id = self._row[1]
        stored = ctx.bound_conversation(self._request_id)
        if stored is not None and stored != conversation_id:
            raise BindingConflict(self._request_id, stored, conversation_id)
        ctx.bind(self._request_id, conversation_id)
        out.append((Stage.BINDINGS, UPSERT_BINDING, self._row))
        return BindOutcome.BOUND if stored is None else BindOutcome.ALREADY_BOUND

    def committed(self, planned: Any) -> BindOutcome:
        self._cache.committed(self._request_id, self._row[1])
        return planned

    def failed(self) -> None:
        self._cache.failed(self._request_id)
