"""Fixtures for the store tests: real SQLite files under tmp_path."""
from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from cursor_byok.store import ConversationRecord, Store


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "state.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[Store]:
    opened = await Store.open(db_path)
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


@pytest.fixture
def conversation() -> Callable[..., ConversationRecord]:
    def make(conversation_id: str, at_ms: int = 1_000, **fields: object) -> ConversationRecord:
        return ConversationRecord(conversation_id, at_ms, at_ms, **fields)  # type: ignore[arg-type]

    return make
