"""Versioned schema migrations.

The one description of the schema for both backends: the statements are SQLite's DDL, and the
PostgreSQL backend derives its own from them (postgres/schema.py), so a migration is written once.
Each migration is a numbered list of SQL statements applied in ONE transaction and recorded in
`schema_version`; a failed step rolls back its whole migration. Applied migrations are never edited:
a schema change is a new entry at the end of `MIGRATIONS`. A database whose highest version is
above the last known one was written by a newer release and is refused.
"""
from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

import msgspec

from .errors import MigrationError, SchemaTooNewError

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "VERSION_TABLE", "Migration", "apply_migrations", "check_sequence"]


class Migration(msgspec.Struct, frozen=True):
    version: int
    name: str
    statements: tuple[str, ...]


_CORE = Migration(
    1,
    "conversation state: conversations, bindings, runs, history, checkpoints, blobs",
    (
        """
        CREATE TABLE conversations (
            conversation_id        TEXT PRIMARY KEY NOT NULL,
            parent_conversation_id TEXT,
            parent_run_id          TEXT,
            parent_tool_call_id    TEXT,
            model_id               TEXT,
            mode                   TEXT,
            created_at_ms          INTEGER NOT NULL,
            updated_at_ms          INTEGER NOT NULL,
            last_cursor_run_id     TEXT,
            title                  TEXT,
            CHECK ((parent_conversation_id IS NULL AND parent_run_id IS NULL
                    AND parent_tool_call_id IS NULL)
                OR (parent_conversation_id IS NOT NULL AND parent_run_id IS NOT NULL
                    AND parent_tool_call_id IS NOT NULL))
        ) STRICT
        """,
        "CREATE INDEX conversations_by_updated ON conversations(updated_at_ms DESC, conversation_id)",
        """
        CREATE INDEX conversations_by_parent ON conversations(parent_conversation_id)
            WHERE parent_conversation_id IS NOT NULL
        """,
        # The parent triple is the immutable origin of a child conversation.
        """
        CREATE TRIGGER conversations_parent_immutable
        BEFORE UPDATE OF parent_conversation_id, parent_run_id, parent_tool_call_id ON conversations
        WHEN NEW.parent_conversation_id IS NOT OLD.parent_conversation_id
          OR NEW.parent_run_id IS NOT OLD.parent_run_id
          OR NEW.parent_tool_call_id IS NOT OLD.parent_tool_call_id
        BEGIN SELECT RAISE(ABORT, 'conversation parent ref is immutable'); END
        """,
        """
        CREATE TABLE request_bindings (
            request_id      TEXT PRIMARY KEY NOT NULL,
            conversation_id TEXT NOT NULL REFERENCES conversations(conversation_id),
            cursor_run_id   TEXT,
            created_at_ms   INTEGER NOT NULL
        ) STRICT
        """,
        "CREATE INDEX request_bindings_by_conversation ON request_bindings(conversation_id)",
        # Second line of defence behind the store's in-memory index: a binding never moves.
        """
        CREATE TRIGGER request_bindings_immutable
        BEFORE UPDATE OF conversation_id ON request_bindings
        WHEN NEW.conversation_id IS NOT OLD.conversation_id
        BEGIN SELECT RAISE(ABORT, 'request_id is bound to another conversation'); END
        """,
        """
        CREATE TABLE runs (
            run_id          TEXT PRIMARY KEY NOT NULL,
            conversation_id TEXT NOT NULL REFERENCES conversations(conversation_id),
            cursor_run_id   TEXT,
            request_id      TEXT,
            phase           TEXT NOT NULL,
            outcome         TEXT CHECK (outcome IN
                                ('succeeded', 'failed', 'canceled', 'interrupted_by_crash')),
            error_code      TEXT,
            error_message   TEXT,
            started_at_ms   INTEGER NOT NULL,
            ended_at_ms     INTEGER,
            CHECK ((outcome IS NULL) = (ended_at_ms IS NULL))
        ) STRICT
        """,
        "CREATE INDEX runs_by_conversation ON runs(conversation_id, started_at_ms)",
        "CREATE INDEX runs_unfinished ON runs(started_at_ms) WHERE outcome IS NULL",
        "CREATE INDEX runs_by_cursor_run ON runs(cursor_run_id) WHERE cursor_run_id IS NOT NULL",
        """
        CREATE TABLE history_events (
            conversation_id TEXT NOT NULL REFERENCES conversations(conversation_id),
            seq             INTEGER NOT NULL CHECK (seq > 0),
            event_id        TEXT NOT NULL,
            kind            TEXT NOT NULL,
            run_id          TEXT,
            payload         BLOB NOT NULL,
            created_at_ms   INTEGER NOT NULL,
            PRIMARY KEY (conversation_id, seq),
            UNIQUE (conversation_id, event_id)
        ) STRICT
        """,
        # The store assigns seqs; these triggers make a wrong assignment fail instead of leaving a
        # gap, and keep the log append-only (compaction is itself an event).
        """
        CREATE TRIGGER history_events_gap_free BEFORE INSERT ON history_events
        WHEN NEW.seq IS NOT (SELECT COALESCE(MAX(seq), 0) + 1 FROM history_events
                             WHERE conversation_id = NEW.conversation_id)
        BEGIN SELECT RAISE(ABORT, 'history_events seq must follow the last seq'); END
        """,
        """
        CREATE TRIGGER history_events_no_update BEFORE UPDATE ON history_events
        BEGIN SELECT RAISE(ABORT, 'history_events are append-only'); END
        """,
        """
        CREATE TRIGGER history_events_no_delete BEFORE DELETE ON history_events
        BEGIN SELECT RAISE(ABORT, 'history_events are append-only'); END
        """,
        """
        CREATE TABLE checkpoints (
            conversation_id   TEXT NOT NULL REFERENCES conversations(conversation_id),
            seq               INTEGER NOT NULL CHECK (seq > 0),
            through_event_seq INTEGER NOT NULL CHECK (through_event_seq >= 0),
            run_id            TEXT,
            kind              TEXT NOT NULL CHECK (kind IN ('step', 'final')),
            state             BLOB NOT NULL,
            created_at_ms     INTEGER NOT NULL,
            PRIMARY KEY (conversation_id, seq)
        ) STRICT
        """,
        """
        CREATE TRIGGER checkpoints_gap_free BEFORE INSERT ON checkpoints
        WHEN NEW.seq IS NOT (SELECT COALESCE(MAX(seq), 0) + 1 FROM checkpoints
                             WHERE conversation_id = NEW.conversation_id)
        BEGIN SELECT RAISE(ABORT, 'checkpoints seq must follow the last seq'); END
        """,
        """
        CREATE TABLE blobs (
            blob_id       BLOB PRIMARY KEY NOT NULL CHECK (length(blob_id) = 32),
            data          BLOB NOT NULL,
            created_at_ms INTEGER NOT NULL
        ) STRICT
        """,
    ),
)

_OBSERVABILITY = Migration(
    2,
    "observability: traces, usage",
    (
        """
        CREATE TABLE traces (
            trace_id        TEXT PRIMARY KEY NOT NULL,
            request_id      TEXT,
            conversation_id TEXT,
            route           TEXT NOT NULL,
            method          TEXT NOT NULL,
            path            TEXT NOT NULL,
            status          INTEGER,
            bytes_in        INTEGER NOT NULL DEFAULT 0,
            bytes_out       INTEGER NOT NULL DEFAULT 0,
            started_at_ms   INTEGER NOT NULL,
            duration_ms     INTEGER
        ) STRICT
        """,
        "CREATE INDEX traces_by_started ON traces(started_at_ms)",
        """
        CREATE INDEX traces_by_conversation ON traces(conversation_id, started_at_ms)
            WHERE conversation_id IS NOT NULL
        """,
        "CREATE INDEX traces_by_request ON traces(request_id) WHERE request_id IS NOT NULL",
        # Usage rows are kept when a conversation goes away, so no foreign keys here.
        """
        CREATE TABLE usage (
            id                 INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id             TEXT,
            conversation_id    TEXT,
            model_id           TEXT NOT NULL,
            provider           TEXT NOT NULL,
            input_tokens       INTEGER NOT NULL DEFAULT 0,
            output_tokens      INTEGER NOT NULL DEFAULT 0,
            cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
            cache_write_tokens INTEGER NOT NULL DEFAULT 0,
            reasoning_tokens   INTEGER NOT NULL DEFAULT 0,
            ttft_ms            INTEGER,
            duration_ms        INTEGER,
            created_at_ms      INTEGER NOT NULL
        ) STRICT
        """,
        "CREATE INDEX usage_by_created ON usage(created_at_ms)",
        "CREATE INDEX usage_by_conversation ON usage(conversation_id, created_at_ms)",
        "CREATE INDEX usage_by_run ON usage(run_id) WHERE run_id IS NOT NULL",
    ),
)

_DELIVERIES = Migration(
    3,
    "background task completions delivered into a parent conversation",
    (
        """
        CREATE TABLE background_deliveries (
            conversation_id TEXT NOT NULL REFERENCES conversations(conversation_id),
            delivery_id     TEXT NOT NULL,
            payload         BLOB,
            state           TEXT NOT NULL CHECK (state IN ('pending', 'consumed')),
            created_at_ms   INTEGER NOT NULL,
            consumed_at_ms  INTEGER,
            PRIMARY KEY (conversation_id, delivery_id),
            CHECK ((state = 'consumed') = (consumed_at_ms IS NOT NULL)),
            CHECK (state = 'consumed' OR payload IS NOT NULL)
        ) STRICT
        """,
        """
        CREATE INDEX background_deliveries_pending
            ON background_deliveries(conversation_id, created_at_ms, delivery_id)
            WHERE state = 'pending'
        """,
    ),
)

_DELETIONS = Migration(
    4,
    "whole conversations can be deleted (history stays append-only otherwise)",
    (
        # A deletion lists its conversations here inside its own transaction and empties the table
        # again before committing: only their history events may go.
        "CREATE TABLE conversation_deletions (conversation_id TEXT PRIMARY KEY NOT NULL) STRICT",
        "DROP TRIGGER history_events_no_delete",
        """
        CREATE TRIGGER history_events_no_delete BEFORE DELETE ON history_events
        WHEN OLD.conversation_id NOT IN (SELECT conversation_id FROM conversation_deletions)
        BEGIN SELECT RAISE(ABORT, 'history_events are append-only'); END
        """,
    ),
)

_TOOL_STATE = Migration(
    5,
    "conversation tool state: the todo list and how much background-shell output was shown",
    (
        """
        CREATE TABLE conversation_tool_state (
            conversation_id TEXT PRIMARY KEY NOT NULL REFERENCES conversations(conversation_id),
            state           BLOB NOT NULL,
            updated_at_ms   INTEGER NOT NULL
        ) STRICT
        """,
    ),
)

_RETENTION = Migration(
    6,
    "retention: finished runs by when they ended",
    ("CREATE INDEX runs_finished ON runs(ended_at_ms) WHERE outcome IS NOT NULL",),
)

_PROVIDER_CALLS = Migration(
    7,
    "observability: one record per provider call; outcome and phase timings on each run's usage row",
    (
        # No foreign keys: records stay (until retention) when their conversation goes away.
        """
        CREATE TABLE provider_calls (
            trace_id            TEXT NOT NULL,
            seq                 INTEGER NOT NULL CHECK (seq > 0),
            conversation_id     TEXT,
            run_id              TEXT,
            cursor_run_id       TEXT,
            request_id          TEXT,
            model_id            TEXT NOT NULL,
            provider            TEXT NOT NULL,
            upstream_model      TEXT NOT NULL,
            purpose             TEXT NOT NULL,
            step                INTEGER NOT NULL DEFAULT 0,
            attempts            INTEGER NOT NULL DEFAULT 0,
            started_at_ms       INTEGER NOT NULL,
            ttfb_ms             INTEGER,
            first_event_ms      INTEGER,
            ttft_ms             INTEGER,
            duration_ms         INTEGER NOT NULL,
            input_tokens        INTEGER NOT NULL DEFAULT 0,
            output_tokens       INTEGER NOT NULL DEFAULT 0,
            cache_read_tokens   INTEGER NOT NULL DEFAULT 0,
            cache_write_tokens  INTEGER NOT NULL DEFAULT 0,
            reasoning_tokens    INTEGER NOT NULL DEFAULT 0,
            finish_reason       TEXT,
            http_status         INTEGER,
            error_kind          TEXT,
            error_message       TEXT,
            provider_request_id TEXT,
            tools               BLOB,
            request_body        BLOB,
            response_body       BLOB,
            PRIMARY KEY (trace_id, seq)
        ) STRICT
        """,
        "CREATE INDEX provider_calls_by_started ON provider_calls(started_at_ms)",
        """
        CREATE INDEX provider_calls_by_conversation ON provider_calls(conversation_id, started_at_ms)
            WHERE conversation_id IS NOT NULL
        """,
        "ALTER TABLE usage ADD COLUMN trace_id TEXT",
        "ALTER TABLE usage ADD COLUMN outcome TEXT",
        "ALTER TABLE usage ADD COLUMN error_code TEXT",
        "ALTER TABLE usage ADD COLUMN calls INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE usage ADD COLUMN tool_calls INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE usage ADD COLUMN phases TEXT",
    ),
)

# Every locally served BidiAppend, journaled before its 200 until its effect is durable (inbound.py).
_INBOUND = Migration(
    8,
    "inbound append journal",
    (
        """
        CREATE TABLE inbound_appends (
            request_id     TEXT NOT NULL,
            generation     TEXT NOT NULL,
            seqno          INTEGER NOT NULL,
            message        BLOB,
            received_at_ms INTEGER NOT NULL,
            PRIMARY KEY (request_id, generation, seqno)
        ) STRICT
        """,
    ),
)

# Nothing ever wrote the content-addressed blobs of version 1: checkpoint states and history are
# stored inline, and the IDE keeps the KV blobs it is sent.
_NO_BLOBS = Migration(9, "drop the unused blobs table", ("DROP TABLE IF EXISTS blobs",))

# Journaled streams a start could not resume: kept aside (not deleted, not replayed), named by
# `doctor` and `db stats`, so one bad row never keeps the server from starting (inbound.py).
_QUARANTINE = Migration(
    10,
    "quarantined inbound appends",
    (
        """
        CREATE TABLE quarantined_appends (
            request_id       TEXT NOT NULL,
            generation       TEXT NOT NULL,
            seqno            INTEGER NOT NULL,
            message          BLOB,
            received_at_ms   INTEGER NOT NULL,
            conversation_id  TEXT,
            reason           TEXT NOT NULL,
            quarantined_at_ms INTEGER NOT NULL,
            PRIMARY KEY (request_id, generation, seqno)
        ) STRICT
        """,
    ),
)

# A team server's developers (`cursor-byok users`): a token is stored only as its SHA-256 (hex),
# and each provider call and run usage row names the developer it was made for (NULL: none, as on a
# single-user server), as does each journaled append (a run resumed from it stays theirs). A budget
# is in millionths of a USD; NULL: the config's default. No foreign keys: records stay when a
# developer is revoked.
_DEVELOPERS = Migration(
    11,
    "team developers; the developer of each provider call and run",
    (
        """
        CREATE TABLE developers (
            name             TEXT PRIMARY KEY NOT NULL,
            token_sha256     TEXT NOT NULL UNIQUE,
            created_at_ms    INTEGER NOT NULL,
            revoked_at_ms    INTEGER,
            budget_micro_usd INTEGER
        ) STRICT
        """,
        "ALTER TABLE provider_calls ADD COLUMN user_name TEXT",
        "ALTER TABLE usage ADD COLUMN user_name TEXT",
        "ALTER TABLE inbound_appends ADD COLUMN user_name TEXT",
        """
        CREATE INDEX provider_calls_by_user ON provider_calls(user_name, started_at_ms)
            WHERE user_name IS NOT NULL
        """,
    ),
)

# Several instances on one PostgreSQL database: a conversation's one owner, until expires_at_ms on
# the database's clock, renewed by the owner (cluster/leases.py). The embedded store never uses it.
_LEASES = Migration(
    12,
    "conversation leases",
    (
        """
        CREATE TABLE conversation_leases (
            conversation_id TEXT PRIMARY KEY NOT NULL,
            owner           TEXT NOT NULL,
            expires_at_ms   INTEGER NOT NULL
        ) STRICT
        """,
        "CREATE INDEX conversation_leases_by_owner ON conversation_leases(owner)",
    ),
)

# Every run start wrote an entry of this index, and no query reads runs by their Cursor run id.
_NO_RUNS_BY_CURSOR_RUN = Migration(13, "drop the unread index of runs by Cursor run id", ("DROP INDEX IF EXISTS runs_by_cursor_run",))

MIGRATIONS: tuple[Migration, ...] = (
    _CORE, _OBSERVABILITY, _DELIVERIES, _DELETIONS, _TOOL_STATE, _RETENTION, _PROVIDER_CALLS, _INBOUND, _NO_BLOBS,
    _QUARANTINE, _DEVELOPERS, _LEASES, _NO_RUNS_BY_CURSOR_RUN,
)
SCHEMA_VERSION: int = MIGRATIONS[-1].version

VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version       INTEGER PRIMARY KEY NOT NULL,
    name          TEXT NOT NULL,
    applied_at_ms INTEGER NOT NULL
) STRICT
"""


def check_sequence(migrations: Sequence[Migration]) -> None:
    for expected, migration in enumerate(migrations, start=1):
        if migration.version != expected:
            raise ValueError(
                f"migrations must be numbered 1, 2, 3, … in order; got {migration.version} "
                f"at position {expected}"
            )


# Whether the version table exists (one row) or not (none); the PostgreSQL store has its own spelling.
HAS_VERSION_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"


def current_version(conn: sqlite3.Connection) -> int:
    """The highest version recorded (0: none yet); the version table must exist."""
    return int(conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0])


def stored_version(conn: sqlite3.Connection, migrations: Sequence[Migration], *, path: str) -> int:
    """The database's schema version, read without changing anything (0: not initialised).
    Raises SchemaTooNewError like `apply_migrations`."""
    known = conn.execute(HAS_VERSION_TABLE).fetchone()
    version = current_version(conn) if known else 0
    supported = migrations[-1].version if migrations else 0
    if version > supported:
        raise SchemaTooNewError(path, version, supported)
    return version


def apply_migrations(conn: sqlite3.Connection, migrations: Sequence[Migration], *, path: str) -> int:
    """Bring the database up to the last of `migrations`; returns the resulting version.

    `conn` must be in autocommit mode (isolation_level=None). Each pending migration runs under
    BEGIN IMMEDIATE, so two processes opening the same new file cannot both apply it.
    """
    check_sequence(migrations)
    supported = migrations[-1].version if migrations else 0
    conn.execute(VERSION_TABLE)
    version = current_version(conn)
    if version > supported:
        raise SchemaTooNewError(path, version, supported)
    for migration in migrations[version:]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-read under the write lock: another opener may have applied it meanwhile.
            if current_version(conn) >= migration.version:
                conn.execute("ROLLBACK")
                continue
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version(version, name, applied_at_ms) VALUES (?, ?, ?)",
                (migration.version, migration.name, time.time_ns() // 1_000_000),
            )
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise MigrationError(migration.version, migration.name, exc) from exc
    final = current_version(conn)
    if final > supported:
        raise SchemaTooNewError(path, final, supported)
    return final
