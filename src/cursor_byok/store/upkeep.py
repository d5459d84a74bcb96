"""The database file as a whole: what it holds and costs per turn, an online backup, and a rebuild.

Which process does what: the server owns the database (the data dir's lock) and is its only writer.
`database_stats` and `backup_database` only read, on their own read-only connection, so they run
beside a serving server: WAL readers never block its writes (a backup holds one read snapshot while
it copies, so the server's WAL cannot be checkpointed past it until it ends). `vacuum_database`
rewrites the whole file and must run with no server (the caller holds the data dir's lock).
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import msgspec

from .core import is_postgres_url, postgres_backend
from .inbound import QuarantinedStream, select_quarantined

# Tables counted by `database_stats`, in the order they are shown.
COUNTED = (
    "conversations", "request_bindings", "runs", "history_events", "checkpoints", "usage", "traces", "quarantined_appends",
)


class DatabaseStats(msgspec.Struct):
    path: Path | str  # the file, or the PostgreSQL url without its password
    file_bytes: int  # the database file
    wal_bytes: int  # its write-ahead log
    page_size: int
    pages: int
    free_pages: int  # reusable inside the file; `vacuum_database` gives them back to the disk
    rows: dict[str, int] = msgspec.field(default_factory=dict)  # table → rows
    table_bytes: dict[str, int] = msgspec.field(default_factory=dict)  # table → bytes with its indexes (when asked)
    quarantined: list[QuarantinedStream] = msgspec.field(default_factory=list)  # journaled streams a start could not resume

    @property
    def used_bytes(self) -> int:
        return (self.pages - self.free_pages) * self.page_size

    @property
    def turns(self) -> int:
        """Turns the database holds: each turn comes on a request id of its own."""
        return self.rows.get("request_bindings", 0)

    @property
    def bytes_per_turn(self) -> float | None:
        return self.used_bytes / self.turns if self.turns else None


def _read_only(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


def database_stats(path: Path | str, *, table_sizes: bool = False) -> DatabaseStats:
    """Sizes, page use and row counts (one count per table: a read of its smallest index);
    `table_sizes` also reads every page to give each table's bytes (SQLite's dbstat). A
    postgresql:// url: that database's (postgres/stats.py)."""
    if is_postgres_url(path):
        return postgres_backend().database_stats(str(path), table_sizes=table_sizes)
    path = Path(path)
    wal = path.with_name(path.name + "-wal")
    with contextlib.closing(_read_only(path)) as conn:
        conn.execute("BEGIN")  # one snapshot for every figure
        pragma = {p: conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_size", "page_count", "freelist_count")}
        stats = DatabaseStats(
            path=path,
            file_bytes=path.stat().st_size,
            wal_bytes=wal.stat().st_size if wal.exists() else 0,
            page_size=pragma["page_size"],
            pages=pragma["page_count"],
            free_pages=pragma["freelist_count"],
        )
        present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        stats.rows = {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in COUNTED if t in present}
        stats.quarantined = select_quarantined(conn)
        if table_sizes:
            stats.table_bytes = dict(conn.execute(
                "SELECT COALESCE(m.tbl_name, s.name), SUM(s.pgsize) FROM dbstat AS s "
                "LEFT JOIN sqlite_master AS m ON m.name = s.name GROUP BY 1 ORDER BY 2 DESC"
            ).fetchall())
        conn.execute("COMMIT")
    return stats


def backup_database(path: Path, dest: Path, *, compact: bool = False) -> int:
    """Copy the database to `dest` (which must not exist), consistent as of one moment, while the
    server may be writing it; `compact` leaves out free pages (VACUUM INTO). The copy is private
    (0600) and self-contained (no WAL beside it). Returns its size."""
    if dest.exists():
        raise FileExistsError(f"{dest} exists")
    partial = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    try:
        with contextlib.closing(_read_only(path)) as source:
            if compact:
                partial.unlink()  # VACUUM INTO wants to create it
                source.execute("VACUUM INTO ?", (str(partial),))
                os.chmod(partial, 0o600)
            else:
                with contextlib.closing(sqlite3.connect(partial, isolation_level=None)) as copy:
                    source.backup(copy)  # all pages in one step: one read snapshot, never restarted
                    copy.execute("PRAGMA journal_mode = DELETE")
        if dest.exists():  # created while we copied
            raise FileExistsError(f"{dest} exists")
        os.replace(partial, dest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return dest.stat().st_size


def vacuum_database(path: Path) -> None:
    """Rebuild the file without its free pages. Only with no server: the caller holds the data
    dir's lock. Needs free disk space about the size of the database while it runs."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


__all__ = ["COUNTED", "DatabaseStats", "backup_database", "database_stats", "vacuum_database"]
