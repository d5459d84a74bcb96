"""Opening a database read-only: a second process reads what the owner wrote, and never writes."""
from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from cursor_byok.store import MIGRATIONS, ConversationRecord, SchemaTooNewError, Store, StoreClosedError


async def test_reads_what_the_owner_committed_while_it_keeps_writing(
    store_location: Path | str, conversation: Callable[..., ConversationRecord]
) -> None:
    owner = await Store.open(store_location)
    try:
        await owner.upsert_conversation(conversation("c1"))
        reader = await Store.open(store_location, read_only=True)
        try:
            assert [r.conversation_id for r in (await reader.list_conversations()).conversations] == ["c1"]
            await owner.upsert_conversation(conversation("c2", at_ms=2_000))  # the owner is not blocked
            assert {r.conversation_id for r in (await reader.list_conversations()).conversations} == {"c1", "c2"}
            with pytest.raises(StoreClosedError, match="read-only"):
                reader.upsert_conversation(conversation("c3"))
        finally:
            await reader.close()
    finally:
        await owner.close()


async def test_migrates_nothing(db_path: Path) -> None:
    await (await Store.open(db_path, migrations=MIGRATIONS[:1])).close()
    reader = await Store.open(db_path, read_only=True)
    await reader.close()
    assert reader.schema_version == 1
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone() == (1,)


async def test_refuses_a_newer_schema(db_path: Path) -> None:
    await (await Store.open(db_path)).close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("INSERT INTO schema_version VALUES (999, 'future', 0)")
    with pytest.raises(SchemaTooNewError):
        await Store.open(db_path, read_only=True)
