"""Fixtures for the store tests: real SQLite files under tmp_path, and real PostgreSQL databases.

The store's contract is one for both backends: a test that takes `store` or `store_location` runs
once on each (`[sqlite]`, `[postgres]`: a fresh database of the session's throwaway cluster). A test
about SQLite's files (it takes `db_path` or `raw_db`: WAL, checkpoints, page cache, salvage, raw
peeks at the file; `committed` is the observer of either backend) or marked `embedded_only` (how that backend works: reads and commits the event
loop makes itself) runs on SQLite only.
"""
from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cursor_byok.store import ConversationRecord, Store

BACKENDS = ("sqlite", "postgres")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store_backend" in metafunc.fixturenames:
        file_bound = {"db_path", "raw_db"} & set(metafunc.fixturenames)
        embedded = file_bound or metafunc.definition.get_closest_marker("embedded_only") is not None
        metafunc.parametrize("store_backend", BACKENDS[:1] if embedded else BACKENDS)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "state.db"


@pytest.fixture
def store_location(store_backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Path | str:
    """What `Store.open` takes: the SQLite file, or a fresh PostgreSQL database's url."""
    if store_backend == "postgres":
        return request.getfixturevalue("postgres_url")
    return tmp_path / "data" / "state.db"


@pytest.fixture
async def store(store_location: Path | str) -> AsyncIterator[Store]:
    opened = await Store.open(store_location)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def raw_db(db_path: Path) -> Iterator[Callable[[], sqlite3.Connection]]:
    """A plain sqlite3 connection to the same file: an outside observer of what is committed."""
    opened: list[sqlite3.Connection] = []

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(db_path, isolation_level=None)
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        conn.close()


Committed = Callable[..., list[tuple[Any, ...]]]


@pytest.fixture
def committed(store_location: Path | str) -> Committed:
    """`committed(sql, params)`: the rows `sql` (placeholders `?`) reads on a connection of its own,
    as another process sees what the store has committed, on either backend."""

    def read(sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if isinstance(store_location, str):
            import psycopg

            with psycopg.connect(store_location, autocommit=True) as conn:
                return conn.execute(sql.replace("?", "%s"), params).fetchall()  # type: ignore[arg-type]
        with contextlib.closing(sqlite3.connect(store_location)) as conn:
            return conn.execute(sql, params).fetchall()

    return read


@pytest.fixture
def conversation() -> Callable[..., ConversationRecord]:
    def make(conversation_id: str, at_ms: int = 1_000, **fields: object) -> ConversationRecord:
        return ConversationRecord(conversation_id, at_ms, at_ms, **fields)  # type: ignore[arg-type]

    return make
