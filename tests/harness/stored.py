"""An outside observer of what a test server's store has committed, on whichever backend it runs:
the SQLite file in its state dir, or its PostgreSQL database ([store] url). Reads only, on a
connection of its own, as another process would."""
from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .server import ServerConfig

# Every table a turn writes: holding their write lock holds up each of the server's commits.
_TURN_TABLES = "conversations, request_bindings, runs, history_events, checkpoints, inbound_appends, conversation_tool_state"


def _database(config: ServerConfig) -> Path:
    return (config.state_dir or config.data_dir) / "state.db"


def stored_rows(config: ServerConfig, sql: str, params: Sequence[Any] = (), *, postgres_sql: str | None = None) -> list[tuple[Any, ...]]:
    """The rows `sql` reads from the server's committed state (`postgres_sql`: its PostgreSQL
    spelling, where SQLite's is not PostgreSQL's; placeholders `?` in both)."""
    if config.store_url:
        import psycopg

        with psycopg.connect(config.store_url, autocommit=True) as conn:
            return conn.execute((postgres_sql or sql).replace("?", "%s"), params).fetchall()  # type: ignore[arg-type]
    with contextlib.closing(sqlite3.connect(f"{_database(config).resolve().as_uri()}?mode=ro", uri=True)) as conn:
        return conn.execute(sql, params).fetchall()


def history_holds(config: ServerConfig, needle: bytes) -> bool:
    """Some committed history event's payload holds `needle`."""
    return bool(stored_rows(
        config, "SELECT 1 FROM history_events WHERE instr(payload, ?) > 0 LIMIT 1", (needle,),
        postgres_sql="SELECT 1 FROM history_events WHERE position(?::bytea in payload) > 0 LIMIT 1",
    ))


def change_stored(config: ServerConfig, sqlite: Sequence[str], postgres: Sequence[str]) -> None:
    """Change the server's stored state by hand (as a person or another release would), in one
    transaction: `sqlite`'s statements on the embedded store, `postgres`'s on PostgreSQL."""
    if config.store_url:
        import psycopg

        with psycopg.connect(config.store_url) as conn:  # committed when the block ends
            for statement in postgres:
                conn.execute(statement)  # type: ignore[arg-type]
        return
    with contextlib.closing(sqlite3.connect(_database(config))) as conn:
        for statement in sqlite:
            conn.execute(statement)
        conn.commit()


@contextlib.contextmanager
def writes_held(config: ServerConfig) -> Iterator[None]:
    """Another connection holds the store's write lock meanwhile (as a slow disk or a busy database
    delays a commit): the server's commits wait until the block ends."""
    if config.store_url:
        import psycopg

        with psycopg.connect(config.store_url, autocommit=True) as conn:
            conn.execute("BEGIN")
            conn.execute(f"LOCK TABLE {_TURN_TABLES} IN EXCLUSIVE MODE")
            try:
                yield
            finally:
                conn.execute("ROLLBACK")
        return
    with contextlib.closing(sqlite3.connect(_database(config), isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
