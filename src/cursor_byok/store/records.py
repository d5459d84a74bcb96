"""Typed records the store reads and writes.

Payloads (`EventRecord.payload`, `CheckpointRecord.state`, delivery payloads) are opaque bytes
encoded by the caller: the store never interprets them, so the conversation layer can change its
encodings without a migration.
"""
from __future__ import annotations

import enum
from typing import Any

import msgspec

__all__ = [
    "AppendResult",
    "BindOutcome",
    "BindingRecord",
    "CheckpointKind",
    "CheckpointRecord",
    "ConversationPage",
    "ConversationRecord",
    "DeliveryRecord",
    "DeliveryState",
    "EventAppend",
    "EventKind",
    "EventRecord",
    "NewEvent",
    "ParentRef",
    "RunOutcome",
    "RunRecord",
    "Synchronous",
    "TraceRecord",
    "UsageRecord",
    "UsageTotals",
]


class Synchronous(enum.StrEnum):
    """SQLite `synchronous` level for the writer connection (WAL mode in both cases).

    NORMAL: a commit is in the WAL (OS page cache) when its future resolves, so it survives a
    process crash or `kill -9`; only an OS crash or power loss can drop the last transactions.
    FULL: every commit is fsynced as well, which survives power loss at a per-transaction cost.
    """

    NORMAL = "NORMAL"
    FULL = "FULL"


class RunOutcome(enum.StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"
    INTERRUPTED_BY_CRASH = "interrupted_by_crash"


class EventKind(enum.StrEnum):
    """Well-known kinds of history events.

    The store treats a kind as an opaque label (like the payload): any lowercase identifier
    (`[a-z][a-z0-9_]*`, at most 64 characters) is accepted, so the history layer may use its own
    vocabulary without a migration. Members are strings, so `record.kind == EventKind.USER` works
    for kinds read back from the database.
    """

    USER = "user"
    RUNTIME = "runtime"
    REQUEST_CONTEXT = "request_context"
    ASSISTANT = "assistant"  # one whole assistant message (text, thinking, tool calls)
    TOOL_RESULTS = "tool_results"  # one tool message holding a batch's results
    ASSISTANT_TEXT = "assistant_text"
    ASSISTANT_THINKING = "assistant_thinking"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    COMPACTION = "compaction"
    INJECTION = "injection"
    BACKGROUND_COMPLETION = "background_completion"


class CheckpointKind(enum.StrEnum):
    STEP = "step"
    FINAL = "final"


class DeliveryState(enum.StrEnum):
    PENDING = "pending"
    CONSUMED = "consumed"


class BindOutcome(enum.StrEnum):
    BOUND = "bound"  # this call created the binding
    ALREADY_BOUND = "already_bound"  # the same request_id → same conversation existed already


class ParentRef(msgspec.Struct, frozen=True):
    """Persisted origin of a child conversation (the ParentConversationRef triple).

    All three parts are required; a partial triple cannot be constructed, and the table's CHECK
    constraint refuses one as well.
    """

    parent_conversation_id: str
    parent_run_id: str
    parent_tool_call_id: str

    def __post_init__(self) -> None:
        for name in ("parent_conversation_id", "parent_run_id", "parent_tool_call_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"ParentRef.{name} must be a non-empty string, got {value!r}")


class ConversationRecord(msgspec.Struct, frozen=True):
    conversation_id: str
    created_at_ms: int
    updated_at_ms: int
    parent: ParentRef | None = None
    model_id: str | None = None
    mode: str | None = None
    last_cursor_run_id: str | None = None
    title: str | None = None


class ConversationPage(msgspec.Struct, frozen=True):
    """One page of a conversation listing; `next` is the cursor of the page after it (None: last)."""

    conversations: list[ConversationRecord]
    next: str | None = None


class BindingRecord(msgspec.Struct, frozen=True):
    request_id: str
    conversation_id: str
    cursor_run_id: str | None
    created_at_ms: int


class RunRecord(msgspec.Struct, frozen=True):
    run_id: str
    conversation_id: str
    phase: str
    started_at_ms: int
    cursor_run_id: str | None = None
    request_id: str | None = None
    outcome: RunOutcome | None = None  # None while the run is active
    error_code: str | None = None
    error_message: str | None = None
    ended_at_ms: int | None = None


class NewEvent(msgspec.Struct, frozen=True):
    """An event to append. `event_id` is its idempotency key within the conversation."""

    event_id: str
    kind: EventKind | str
    payload: bytes
    run_id: str | None = None
    created_at_ms: int | None = None  # None: the store's clock at enqueue time


class EventRecord(msgspec.Struct, frozen=True):
    conversation_id: str
    seq: int
    event_id: str
    kind: str  # an EventKind value or a caller-defined kind
    payload: bytes
    created_at_ms: int
    run_id: str | None = None


class EventAppend(msgspec.Struct, frozen=True):
    """Outcome of one appended event; for a duplicate, `seq` is the seq it was first stored at."""

    event_id: str
    seq: int
    duplicate: bool


class AppendResult(msgspec.Struct, frozen=True):
    conversation_id: str
    results: tuple[EventAppend, ...]

    @property
    def appended(self) -> tuple[EventAppend, ...]:
        return tuple(r for r in self.results if not r.duplicate)

    @property
    def duplicates(self) -> tuple[str, ...]:
        return tuple(r.event_id for r in self.results if r.duplicate)


class CheckpointRecord(msgspec.Struct, frozen=True):
    """A serialized conversation state. `seq` numbers checkpoints per conversation (1, 2, …);
    `through_event_seq` is the last history event seq the state includes."""

    conversation_id: str
    seq: int
    through_event_seq: int
    kind: CheckpointKind
    state: bytes
    created_at_ms: int
    run_id: str | None = None


class TraceRecord(msgspec.Struct, frozen=True):
    trace_id: str
    route: str
    method: str
    path: str
    started_at_ms: int
    request_id: str | None = None
    conversation_id: str | None = None
    status: int | None = None
    bytes_in: int = 0
    bytes_out: int = 0
    duration_ms: int | None = None


class UsageRecord(msgspec.Struct, frozen=True):
    model_id: str
    provider: str
    created_at_ms: int
    run_id: str | None = None
    conversation_id: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    ttft_ms: int | None = None
    duration_ms: int | None = None
    # Since schema 6 the row is the run's observation record: what else it says about the run.
    trace_id: str | None = None
    outcome: str | None = None
    error_code: str | None = None
    calls: int = 0  # provider calls
    tool_calls: int = 0
    phases: str | None = None  # JSON: milliseconds spent in each lifecycle phase
    user_name: str | None = None  # the developer of a team server it ran for


class UsageTotals(msgspec.Struct, frozen=True):
    """Usage summed over the rows of one (provider, model_id)."""

    provider: str
    model_id: str
    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    duration_ms: int
    mean_ttft_ms: float | None


class DeliveryRecord(msgspec.Struct, frozen=True):
    conversation_id: str
    delivery_id: str
    state: DeliveryState
    created_at_ms: int
    payload: bytes | None = None  # None only for a completion consumed before it was enqueued
    consumed_at_ms: int | None = None


class ConversationRows(msgspec.Struct, frozen=True):
    """What a conversation's runtime loads: its record (None if it has none yet), its history
    events in order and its tool state."""

    record: ConversationRecord | None
    events: Any  # a list of EventRecords, or what the caller read the events into
    tool_state: bytes | None
