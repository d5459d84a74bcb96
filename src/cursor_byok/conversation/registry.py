"""conversation_id → live runtime; request_id → binding (a reverse index, never an identity).

The bindings held here are a cache of the store's for the streams in use: `binding` misses for an
older request id, and the caller looks it up in the store.

A request_id is strongly bound to one conversation. It may recur inside that conversation (retries,
queued turns, a new Cursor run = a new transport generation); bound to a different conversation it is
a protocol conflict and nothing is routed.
"""
from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar


class BindingConflict(Exception):
    """request_id is already bound to another conversation."""

    def __init__(self, request_id: str, bound_to: str, requested: str) -> None:
        super().__init__(
            f"request id {request_id!r} is bound to conversation {bound_to!r}, not {requested!r}"
        )
        self.request_id = request_id
        self.bound_to = bound_to
        self.requested = requested


class BindKind(str, enum.Enum):
    NEW = "new"  # first sight of this request_id
    SAME = "same"  # same conversation, same Cursor run: idempotent
    NEW_GENERATION = "new_generation"  # same conversation, a new Cursor run on the same request_id


@dataclass(slots=True)
class Binding:
    request_id: str
    conversation_id: str
    cursor_run_id: str


R = TypeVar("R")


class Registry(Generic[R]):
    def __init__(self, make_runtime: Callable[[str], R]) -> None:
        self._make_runtime = make_runtime
        self._runtimes: dict[str, R] = {}
        self._bindings: dict[str, Binding] = {}

    # -- bindings -------------------------------------------------------------------------------
    def binding(self, request_id: str) -> Binding | None:
        return self._bindings.get(request_id)

    def bind(self, request_id: str, conversation_id: str, cursor_run_id: str) -> tuple[Binding, BindKind]:
        """Bind (or re-confirm) request_id → conversation_id. Raises BindingConflict, binding nothing."""
        current = self._bindings.get(request_id)
        if current is None:
            b = Binding(request_id, conversation_id, cursor_run_id)
            self._bindings[request_id] = b
            return b, BindKind.NEW
        if current.conversation_id != conversation_id:
            raise BindingConflict(request_id, current.conversation_id, conversation_id)
        if cursor_run_id and cursor_run_id != current.cursor_run_id:
            current.cursor_run_id = cursor_run_id
            return current, BindKind.NEW_GENERATION
        return current, BindKind.SAME

    def forget(self, request_id: str) -> None:
        """The request id's stream is gone: keep its binding in the store only, so the bindings held
        here are those of streams in use, not of every turn ever seen."""
        self._bindings.pop(request_id, None)

    # -- runtimes -------------------------------------------------------------------------------
    def runtime(self, conversation_id: str) -> R | None:
        return self._runtimes.get(conversation_id)

    def ensure_runtime(self, conversation_id: str) -> R:
        rt = self._runtimes.get(conversation_id)
        if rt is None:
            rt = self._make_runtime(conversation_id)
            self._runtimes[conversation_id] = rt
        return rt

    def evict(self, conversation_id: str) -> None:
        self._runtimes.pop(conversation_id, None)

    def runtimes(self) -> list[R]:
        return list(self._runtimes.values())

    def __len__(self) -> int:
        return len(self._runtimes)
