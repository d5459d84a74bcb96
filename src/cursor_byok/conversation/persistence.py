"""What one conversation's runtime reads from and writes to the store (none: memory only).

Writes are fire-and-forget unless the caller must not go on before they are durable (the turn's
input before the model sees it). Reads happen once per runtime life, when its history loads.
"""
from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import Any

import msgspec

from ..instance import is_damage
from ..protocol import ConnectError, agent_pb2 as pb, enum_name
from ..store import ConversationRecord, NewEvent, ParentRef, RunRecord, StoreError
from .active_run import ActiveRun, now_ms
from .history import HistoryEntry, StoredEntries
from .identity import ParentConversationRef
from .output import OutputStream
from .run_errors import storage_error
from .state import Outcome
from .tool_calls import ToolState, decode_tool_state, encode_tool_state


class StoredConversation(msgspec.Struct, frozen=True):
    entries: StoredEntries
    parent: ParentConversationRef | None
    tool_state: ToolState | None


_NOTHING_STORED = StoredConversation(StoredEntries(), None, None)


class ConversationRecords:
    def __init__(self, conversation_id: str, store: Any) -> None:
        self.conversation_id = conversation_id
        self.store = store  # cursor_byok.store.Store, or None for a memory-only runtime
        self.stopping = False  # the server stops: streams ending now were cut, their input is kept
        self._last_append: asyncio.Future[Any] | None = None  # the newest history write not known durable
        self._has_row = False  # the conversation's row is stored or queued (its history refers to it)
        self._run_records: Callable[[], None] | None = None  # a started run's records, not yet queued

    async def load(self) -> StoredConversation:
        """Everything a runtime needs from the store; a failed read is `unavailable` (retry)."""
        store = self.store
        if store is None:
            return _NOTHING_STORED
        try:
            # Read into one buffer as the rows come (see StoredEntries), not an object per entry.
            rows = await store.load_conversation(self.conversation_id, StoredEntries)
        except (StoreError, sqlite3.Error, OSError) as exc:
            if is_damage(exc):  # retrying never helps
                raise storage_error("could not read this conversation's history", exc, store.path) from exc
            raise ConnectError("unavailable", f"could not read this conversation's history ({exc}); try again") from exc
        self._has_row = rows.record is not None
        parent = None
        if rows.record is not None and rows.record.parent is not None:
            p = rows.record.parent
            parent = ParentConversationRef(p.parent_conversation_id, p.parent_run_id, p.parent_tool_call_id)
        tool_state = decode_tool_state(rows.tool_state) if rows.tool_state is not None else None
        return StoredConversation(rows.events, parent, tool_state)

    def load_now(self) -> StoredConversation | None:
        """What `load` would return, when that is known at once (no store, or a conversation the
        store holds nothing of); None: `load` it."""
        store = self.store
        if store is None or store.holds_nothing_of(self.conversation_id):
            return _NOTHING_STORED
        return None

    def append(self, entries: list[HistoryEntry], *, awaited: bool = False) -> asyncio.Future[Any] | None:
        """Queue the entries (await the future for durability); None when there is nothing to do.
        `awaited`: something waits for them soon: they go to the writer at once (with whatever was
        queued before them), not after the callbacks queued ahead of the usual hand-over."""
        if self.store is None or not entries:
            return None
        stored = self._last_append = self.store.append_events(self.conversation_id, [_event(e) for e in entries])
        if awaited:
            self.store.hand_over_now()
        self._queue_run_records()  # after the input: they are not on its way to the model
        return stored

    async def history_durable(self) -> None:
        """Wait until every history write queued so far has committed (the store commits in queue
        order: the newest one's commit is everyone's); raises if it failed."""
        pending = self._last_append
        if pending is None:
            return
        if not pending.done():
            self.store.hand_over_now()
        await pending
        if self._last_append is pending:
            self._last_append = None

    async def append_durably(self, entries: list[HistoryEntry]) -> None:
        future = self.append(entries)
        if future is not None:
            await future

    async def put_checkpoint(self, run: ActiveRun, state: pb.ConversationStateStructure, kind: str, seed: bytes = b"") -> None:
        """`seed`: fields of our own stored ahead of the state's (never sent: see `RootSeed`)."""
        if self.store is not None:
            self._queue_run_records()
            await self.store.put_checkpoint(self.conversation_id, seed + state.SerializeToString(), kind=kind, run_id=run.run_id)

    async def last_checkpoint(self) -> bytes | None:
        """The last checkpoint stored (as `put_checkpoint` stored it); None when there is none or
        it cannot be read now (what it serves is then built afresh)."""
        if self.store is None:
            return None
        try:
            record = await self.store.latest_checkpoint(self.conversation_id)
        except (StoreError, sqlite3.Error, OSError):
            return None
        return None if record is None else record.state

    def put_tool_state(self, state: ToolState) -> asyncio.Future[Any] | None:
        """Queue the state (await the future for durability); None without a store."""
        if self.store is None:
            return None
        self._queue_run_records()
        return self.store.put_tool_state(self.conversation_id, encode_tool_state(state))

    def inputs_applied(self, output: OutputStream) -> None:
        """The stream has ended: its journaled input has had its effect (queued before this)."""
        if self.store is not None and not self.stopping:
            self.store.forget_appends(output.request_id, output.cursor_run_id)

    def inputs_settled(self, output: OutputStream) -> None:
        """The stream's input through `settled_seqno` has had its durable effect (queued before this)."""
        if self.store is not None:
            self.store.settle_appends(output.request_id, output.cursor_run_id, output.settled_seqno)

    def run_started(self, run: ActiveRun, parent: ParentConversationRef | None, phase: str) -> None:
        """The run's records: the conversation's row, the request's binding, the run's row. Only a
        new conversation's row is queued now (the input refers to it); the rest is queued after the
        run's first write (its input), as one write, `later`: committed with the next commit, off the
        model's path.
        A crash before then loses only these records: the journal resumes the run, which binds its
        request again."""
        store = self.store
        if store is None:
            return
        rr = run.run_request
        now = now_ms()
        record = ConversationRecord(
            conversation_id=self.conversation_id,
            created_at_ms=now,
            updated_at_ms=now,
            parent=ParentRef(parent.parent_conversation_id, parent.parent_run_id, parent.parent_tool_call_id) if parent else None,
            model_id=rr.requested_model.model_id or rr.model_details.model_id,
            mode=enum_name(pb.AgentMode, run.mode),
            last_cursor_run_id=run.cursor_run_id or None,
        )
        started = RunRecord(
            run_id=run.run_id,
            conversation_id=self.conversation_id,
            phase=phase,
            started_at_ms=run.started_ms,
            cursor_run_id=run.cursor_run_id or None,
            request_id=run.request_id,
        )
        later = self._has_row
        if not later:
            store.upsert_conversation(record)
            self._has_row = True
        self._queue_run_records()  # an earlier run's, if it wrote nothing

        def queue() -> None:
            store.start_run(started, bind=True, conversation=record if later else None, later=True)

        self._run_records = queue

    def _queue_run_records(self) -> None:
        queue, self._run_records = self._run_records, None
        if queue is not None:
            queue()

    def run_finished(self, run: ActiveRun, outcome: Outcome, error: ConnectError | None) -> None:
        if self.store is not None:
            self._queue_run_records()
            self.store.finish_run(
                run.run_id,
                outcome.value,
                error_code=error.code if error else None,
                error_message=error.message if error else None,
            )


def _event(entry: HistoryEntry) -> NewEvent:
    return NewEvent(event_id=entry.event_id, kind=entry.kind._value_, payload=entry.stored_bytes(), run_id=entry.run_id)
