"""Opening a database: pragmas, migrations, upgrade, refusal of a newer schema."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cursor_byok.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    Migration,
    MigrationError,
    SchemaTooNewError,
    Store,
    Synchronous,
    TraceRecord,
)


def _versions(path: Path) -> list[tuple[int, str, int]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT version, name, applied_at_ms FROM schema_version ORDER BY version").fetchall()


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {r[0] for r in rows}


async def test_fresh_database_gets_every_migration_in_order(db_path: Path) -> None:
    store = await Store.open(db_path)  # parent dir does not exist yet
    await store.close()
    versions = _versions(db_path)
    assert [v for v, _, _ in versions] == list(range(1, SCHEMA_VERSION + 1))
    assert [n for _, n, _ in versions] == [m.name for m in MIGRATIONS]
    assert store.schema_version == SCHEMA_VERSION
    assert {
        "conversations", "request_bindings", "runs", "history_events", "checkpoints",
        "traces", "usage", "background_deliveries", "schema_version",
    } <= _tables(db_path)
    assert "blobs" not in _tables(db_path)  # checkpoint states and history are stored inline


async def test_reopen_is_a_no_op(db_path: Path) -> None:
    await (await Store.open(db_path)).close()
    before = _versions(db_path)
    schema_before = sqlite3.connect(db_path).execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
    await (await Store.open(db_path)).close()
    assert _versions(db_path) == before
    assert sqlite3.connect(db_path).execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall() == schema_before


async def test_database_from_a_newer_version_is_refused(db_path: Path) -> None:
    await (await Store.open(db_path)).close()
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "INSERT INTO schema_version(version, name, applied_at_ms) VALUES (?, 'future', 0)",
            (SCHEMA_VERSION + 1,),
        )
    with pytest.raises(SchemaTooNewError) as caught:
        await Store.open(db_path)
    assert caught.value.found == SCHEMA_VERSION + 1
    assert caught.value.supported == SCHEMA_VERSION
    assert str(db_path) in str(caught.value)
    assert len(_versions(db_path)) == SCHEMA_VERSION + 1  # untouched


async def test_older_database_is_upgraded_keeping_its_data(db_path: Path, conversation) -> None:
    old = await Store.open(db_path, migrations=MIGRATIONS[:1])
    assert old.schema_version == 1
    await old.upsert_conversation(conversation("c1"))
    await old.close()
    assert "traces" not in _tables(db_path)

    new = await Store.open(db_path)
    try:
        assert new.schema_version == SCHEMA_VERSION
        assert await new.get_conversation("c1") == conversation("c1")
        await new.record_trace(TraceRecord("t1", "local", "POST", "/x", started_at_ms=5))
        assert [t.trace_id for t in await new.list_traces()] == ["t1"]
    finally:
        await new.close()
    assert [v for v, _, _ in _versions(db_path)] == list(range(1, SCHEMA_VERSION + 1))


async def test_an_old_database_loses_its_unused_blobs_table_and_keeps_working(db_path: Path, conversation) -> None:
    """Version 9 drops the content-addressed `blobs` table nothing wrote (a database of an older
    release may hold rows in it): everything else stays, and the store goes on as before."""
    old = await Store.open(db_path, migrations=[m for m in MIGRATIONS if m.version < 9])
    await old.upsert_conversation(conversation("c1"))
    await old.put_checkpoint("c1", b"the state", kind="final")
    await old.close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("INSERT INTO blobs (blob_id, data, created_at_ms) VALUES (?, ?, 0)", (bytes(32), b"old"))
    new = await Store.open(db_path)
    try:
        assert new.schema_version == SCHEMA_VERSION >= 9
        assert "blobs" not in _tables(db_path)
        assert await new.get_conversation("c1") == conversation("c1")
        assert (await new.latest_checkpoint("c1")).state == b"the state"
        await new.put_checkpoint("c1", b"the next state", kind="final")
        assert (await new.latest_checkpoint("c1")).state == b"the next state"
    finally:
        await new.close()


async def test_failing_migration_rolls_back_entirely(db_path: Path) -> None:
    bad = Migration(
        SCHEMA_VERSION + 1,
        "half-applied",
        ("CREATE TABLE added_by_bad_migration (x INTEGER)", "THIS IS NOT SQL"),
    )
    with pytest.raises(MigrationError) as caught:
        await Store.open(db_path, migrations=(*MIGRATIONS, bad))
    assert caught.value.version == SCHEMA_VERSION + 1
    assert "added_by_bad_migration" not in _tables(db_path)
    assert [v for v, _, _ in _versions(db_path)] == list(range(1, SCHEMA_VERSION + 1))
    await (await Store.open(db_path)).close()  # still opens with the good migrations


async def test_misnumbered_migrations_are_rejected(db_path: Path) -> None:
    with pytest.raises(ValueError):
        await Store.open(db_path, migrations=(MIGRATIONS[0], MIGRATIONS[2]))


async def test_wal_mode_and_synchronous_levels(db_path: Path) -> None:
    store = await Store.open(db_path)
    try:
        assert store.synchronous is Synchronous.NORMAL
        with sqlite3.connect(db_path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        await store.close()
    full = await Store.open(db_path, synchronous="full")
    assert full.synchronous is Synchronous.FULL
    await full.close()
    with pytest.raises(ValueError):
        await Store.open(db_path, synchronous="OFF")
