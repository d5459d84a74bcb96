"""conversation_id → live runtime; request_id → binding (a reverse index, never an identity).

`binding` is the one place a request id's binding is looked up. The registry holds the bindings of
the streams in use; any other comes from the store (`BindingSource`), which keeps only a bounded
cache in memory: `binding` answers from memory, and `resolve`, which the gateway awaits before it
routes an append, reads the store's table on a miss.

A request_id is strongly bound to one conversation. It may recur inside that conversation (retries,
queued turns, a new Cursor run = a new transport generation); bound to a different conversation it is
a protocol conflict and nothing is routed.
"""
from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import msgspec


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


class Binding(msgspec.Struct):
    request_id: str
    conversation_id: str
    cursor_run_id: str


class BindingSource(Protocol):
    """The stored bindings (cursor_byok.store.Store)."""

    def bound_conversation(self, request_id: str) -> str | None: ...

    async def lookup_conversation(self, request_id: str) -> str | None: ...


R = TypeVar("R")


class Registry(Generic[R]):
    def __init__(self, make_runtime: Callable[[str], R], stored: BindingSource | None = None) -> None:
        self._make_runtime = make_runtime
        self._stored = stored
        self._runtimes: dict[str, R] = {}
        self._bindings: dict[str, Binding] = {}  # the streams in use

    # -- bindings -------------------------------------------------------------------------------
    def binding(self, request_id: str) -> Binding | None:
        """From memory: a stream's binding, or one the store holds in memory (being written, or
        recently used or resolved)."""
        live = self._bindings.get(request_id)
        if live is not None or self._stored is None:
            return live
        conversation_id = self._stored.bound_conversation(request_id)
        return None if conversation_id is None else Binding(request_id, conversation_id, "")

    async def resolve(self, request_id: str) -> None:
        """Make the binding of `request_id` known to `binding` (an indexed read when memory lacks
        it). The store caches what it read, and `binding` finds it in the same step of the event
        loop as the caller's next checks, so nothing can push it out between the two."""
        if self._stored is not None and self.binding(request_id) is None:
            await self._stored.lookup_conversation(request_id)

    def bind(self, request_id: str, conversation_id: str, cursor_run_id: str) -> tuple[Binding, BindKind]:
        """Bind (or re-confirm) request_id → conversation_id. Raises BindingConflict, binding nothing."""
        current = self._bindings.get(request_id)
        if current is None:  # not a stream in use: only the store may know it
            stored = self._stored.bound_conversation(request_id) if self._stored is not None else None
            if stored is not None and stored != conversation_id:
                raise BindingConflict(request_id, stored, conversation_id)
            b = Binding(request_id, conversation_id, cursor_run_id)
            self._bindings[request_id] = b
            return b, BindKind.NEW
        if current.conversation_id != conversation_id:
            raise BindingConflict(request_id, current.conversation_id, conversation_id)
        if cursor_run_id and cursor_run_id != current.cursor_run_id:
            current.cursor_run_id = cursor_run_id
            return current, BindKind.NEW_GENERATION
        return current, BindKind.SAME

    def bound_streams(self) -> int:
        """How many bindings the registry itself holds (one per stream in use)."""
        return len(self._bindings)

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
