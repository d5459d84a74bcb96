"""Opening the database: SQLite version check, pragmas (WAL, synchronous, foreign keys), migrations.

Each connection is opened here and then owned by exactly one thread (the writer's or the reader's);
`check_same_thread` is off only because opening happens on a helper thread.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from .errors import StoreError
from .migrations import Migration, apply_migrations
from .records import Synchronous

# STRICT tables and the JSON functions used by the writer's probes.
MIN_SQLITE = (3, 37, 0)
_SYNCHRONOUS_LEVELS = {1: Synchronous.NORMAL, 2: Synchronous.FULL}
# Per connection. The writer appends at the B-trees' ends and the reader reads a conversation once
# per reload: 512 KiB holds the pages they touch again (no write cost measured against the default
# 2 MiB, which fills with pages read once and stays resident: a server's memory grew by it).
PAGE_CACHE_KIB = 512
# When the WAL starts over, its file is cut back to this (what the commits between two checkpoints
# write: checkpointer.py), not to nothing: commits write into its blocks again rather than grow the file.
WAL_KEEP_BYTES = 16 * 1024 * 1024


def check_sqlite_version() -> None:
    if sqlite3.sqlite_version_info < MIN_SQLITE:
        raise StoreError(
            f"SQLite {sqlite3.sqlite_version} is too old; cursor-byok needs "
            f"{'.'.join(map(str, MIN_SQLITE))} or newer"
        )


def connect(path: Path, *, synchronous: Synchronous, busy_timeout_ms: int, read_only: bool) -> sqlite3.Connection:
    """An autocommit connection (transactions are explicit BEGIN/COMMIT) in WAL mode."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, cached_statements=64)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"could not put {path} into WAL mode (got {mode!r})")
        conn.execute(f"PRAGMA synchronous = {synchronous.value}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
        if read_only:
            conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def prepare_writer(conn: sqlite3.Connection) -> float:
    """Hand the writer connection to the writer thread: its waits for the write lock become the
    thread's own (`WriterThread._begin`), its checkpoints the checkpointer's. Returns the busy
    timeout in seconds it had."""
    busy_timeout_s = int(conn.execute("PRAGMA busy_timeout").fetchone()[0]) / 1000
    conn.execute("PRAGMA busy_timeout = 0")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute(f"PRAGMA journal_size_limit = {WAL_KEEP_BYTES}")
    return busy_timeout_s


def open_writer(
    path: Path, *, synchronous: Synchronous, busy_timeout_ms: int, migrations: Sequence[Migration]
) -> tuple[sqlite3.Connection, int]:
    """The writer connection, with the schema migrated; and the resulting schema version."""
    conn = connect(path, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms, read_only=False)
    try:
        version = apply_migrations(conn, migrations, path=str(path))
        level = conn.execute("PRAGMA synchronous").fetchone()[0]
        if _SYNCHRONOUS_LEVELS.get(level) is not synchronous:
            raise StoreError(f"could not set synchronous={synchronous.value} (got {level!r})")
    except BaseException:
        conn.close()
        raise
    return conn, version
