"""Persistence: SQLite (WAL) on the standard sqlite3 module, one group-committing writer thread per
database.

    store = await Store.open(data_dir / "state.db")
    store.upsert_conversation(ConversationRecord(...))          # fire and forget
    result = await store.append_events(conversation_id, events)  # durable once awaited
    await store.close()
"""
from __future__ import annotations

from .errors import (
    BindingConflict,
    BlobCorruptError,
    FlushError,
    MigrationError,
    SchemaTooNewError,
    StoreClosedError,
    StoreError,
    WriteFailedError,
)
from .maintenance import Deletion, delete_conversations, prune_conversations
from .migrations import MIGRATIONS, SCHEMA_VERSION, Migration
from .records import (
    AppendResult,
    BindingRecord,
    BindOutcome,
    CheckpointKind,
    CheckpointRecord,
    ConversationRecord,
    ConversationRows,
    DeliveryRecord,
    DeliveryState,
    EventAppend,
    EventKind,
    EventRecord,
    NewEvent,
    ParentRef,
    RunOutcome,
    RunRecord,
    Synchronous,
    TraceRecord,
    UsageRecord,
    UsageTotals,
)
from .store import Store, StoreStats, blob_id_of

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "AppendResult",
    "BindOutcome",
    "BindingConflict",
    "BindingRecord",
    "BlobCorruptError",
    "CheckpointKind",
    "CheckpointRecord",
    "ConversationRecord",
    "ConversationRows",
    "Deletion",
    "DeliveryRecord",
    "DeliveryState",
    "EventAppend",
    "EventKind",
    "EventRecord",
    "FlushError",
    "Migration",
    "MigrationError",
    "NewEvent",
    "ParentRef",
    "RunOutcome",
    "RunRecord",
    "SchemaTooNewError",
    "Store",
    "StoreClosedError",
    "StoreError",
    "StoreStats",
    "Synchronous",
    "TraceRecord",
    "UsageRecord",
    "UsageTotals",
    "WriteFailedError",
    "blob_id_of",
    "delete_conversations",
    "prune_conversations",
]
