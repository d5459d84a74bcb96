"""Persistence: SQLite (WAL) on the standard sqlite3 module, or PostgreSQL on psycopg 3 (postgres/),
one group-committing writer thread per store.

    store = await Store.open(data_dir / "state.db")       # or Store.open("postgresql://…")
    store.upsert_conversation(ConversationRecord(...))          # fire and forget
    result = await store.append_events(conversation_id, events)  # durable once awaited
    await store.close()
"""
from __future__ import annotations

from .calls import ActivityBucket, CallRecord, ConversationSummary, UsageGroup
from .core import is_postgres_url
from .developers import DeveloperRecord
from .errors import (
    BindingConflict,
    ConstraintViolation,
    DatabaseError,
    FlushError,
    MigrationError,
    SchemaTooNewError,
    StoreClosedError,
    StoreError,
    WriteFailedError,
)
from .inbound import InboundAppend, InboundStream, QuarantinedStream
from .maintenance import Deletion, delete_conversations, prune_conversations
from .migrations import MIGRATIONS, SCHEMA_VERSION, Migration
from .records import (
    AppendResult,
    BindingRecord,
    BindOutcome,
    CheckpointKind,
    CheckpointRecord,
    ConversationPage,
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
from .retention import Retained, keep_retention
from .salvage import NothingToSalvage, Salvage, salvage_database
from .store import Store, StoreStats
from .upkeep import DatabaseStats, backup_database, database_stats, vacuum_database

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "ActivityBucket",
    "CallRecord",
    "ConversationSummary",
    "UsageGroup",
    "AppendResult",
    "BindOutcome",
    "BindingConflict",
    "BindingRecord",
    "CheckpointKind",
    "CheckpointRecord",
    "ConstraintViolation",
    "DatabaseError",
    "DatabaseStats",
    "DeveloperRecord",
    "ConversationPage",
    "ConversationRecord",
    "ConversationRows",
    "Deletion",
    "DeliveryRecord",
    "DeliveryState",
    "EventAppend",
    "EventKind",
    "EventRecord",
    "FlushError",
    "InboundAppend",
    "InboundStream",
    "QuarantinedStream",
    "Migration",
    "MigrationError",
    "NothingToSalvage",
    "NewEvent",
    "ParentRef",
    "Retained",
    "RunOutcome",
    "RunRecord",
    "Salvage",
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
    "backup_database",
    "database_stats",
    "delete_conversations",
    "is_postgres_url",
    "keep_retention",
    "salvage_database",
    "prune_conversations",
    "vacuum_database",
]
