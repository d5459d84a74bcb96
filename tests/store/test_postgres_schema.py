"""The PostgreSQL schema is derived from the one list of migrations: every migration translates
(a new one using a form the derivation does not know fails here, not on a team's database), the
whole schema applies to an empty database and guards as SQLite's does, several openers migrate it
once, and a database written by a newer release is refused."""
from __future__ import annotations

import asyncio

import psycopg
import pytest

from cursor_byok.store import MIGRATIONS, SCHEMA_VERSION, ConversationRecord, Migration, MigrationError, NewEvent, SchemaTooNewError, Store
from cursor_byok.store.postgres import UntranslatableStatement, derive, translate


@pytest.mark.parametrize("migration", MIGRATIONS, ids=lambda m: f"v{m.version}")
def test_every_migration_has_a_postgresql_form(migration: Migration) -> None:
    statements = derive(migration)
    assert statements
    for statement in statements:
        for sqlite_only in ("STRICT", "AUTOINCREMENT", " BLOB", "RAISE(ABORT"):
            assert sqlite_only not in statement, statement


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE VIRTUAL TABLE docs USING fts5(body)",
        "CREATE TABLE t (id INTEGER PRIMARY KEY) WITHOUT ROWID",
        "CREATE TABLE t (v ANY) STRICT",
        "PRAGMA user_version = 3",
        "CREATE VIEW v AS SELECT 1",
        "CREATE TRIGGER t AFTER INSERT ON x BEGIN UPDATE x SET a = 1; END",
        "INSERT INTO t VALUES (1)",
    ],
)
def test_a_form_the_derivation_does_not_know_is_refused(statement: str) -> None:
    with pytest.raises(UntranslatableStatement):
        derive(Migration(1, "unknown", (statement,)))


def test_plain_ddl_of_a_new_migration_needs_no_postgresql_text() -> None:
    """What a new migration usually adds (tables, indexes, columns) translates as it is written."""
    derived = derive(Migration(11, "users", (
        "CREATE TABLE users (user_id TEXT PRIMARY KEY NOT NULL, token_hash BLOB NOT NULL, "
        "budget_usd REAL, created_at_ms INTEGER NOT NULL, UNIQUE (token_hash)) STRICT",
        "CREATE UNIQUE INDEX users_by_token ON users(token_hash)",
        "ALTER TABLE usage ADD COLUMN user_id TEXT",
        "CREATE INDEX usage_by_user ON usage(user_id, created_at_ms) WHERE user_id IS NOT NULL",
    )))
    assert derived[0] == (
        'CREATE TABLE users (user_id TEXT COLLATE "C" PRIMARY KEY NOT NULL, token_hash BYTEA NOT NULL, '
        "budget_usd DOUBLE PRECISION, created_at_ms BIGINT NOT NULL, UNIQUE (token_hash))"
    )
    assert derived[2] == 'ALTER TABLE usage ADD COLUMN user_id TEXT COLLATE "C"'


def test_statements_translate_once_with_placeholders_outside_literals() -> None:
    assert translate("SELECT '?%' FROM t WHERE a = ? AND b LIKE 'x%'") == "SELECT '?%%' FROM t WHERE a = %s AND b LIKE 'x%%'"
    assert translate("BEGIN IMMEDIATE") == "BEGIN"


async def test_the_whole_schema_applies_to_an_empty_database_and_guards_history(postgres_url: str) -> None:
    store = await Store.open(postgres_url)
    try:
        assert store.schema_version == SCHEMA_VERSION
        store.upsert_conversation(ConversationRecord("c", 1, 1))
        await store.append_events("c", [NewEvent("e1", "user", b"x")])
    finally:
        await store.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_version ORDER BY version")]
        assert versions == list(range(1, SCHEMA_VERSION + 1))
        # The triggers derived from SQLite's: history is append-only, seqs gap-free.
        with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="append-only"):
            conn.execute("UPDATE history_events SET kind = 'other'")
        with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="append-only"):
            conn.execute("DELETE FROM history_events")
        with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="must follow"):
            conn.execute("INSERT INTO history_events VALUES ('c', 3, 'e3', 'user', NULL, 'x', 1)")


async def test_openers_at_once_migrate_a_new_database_once(postgres_url: str) -> None:
    stores = await asyncio.gather(*(Store.open(postgres_url) for _ in range(3)))
    for store in stores:
        assert store.schema_version == SCHEMA_VERSION
        await store.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == SCHEMA_VERSION


async def test_a_database_from_a_newer_release_is_refused(postgres_url: str) -> None:
    await (await Store.open(postgres_url)).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_version VALUES (%s, 'future', 0)", (SCHEMA_VERSION + 1,))
    for read_only in (False, True):
        with pytest.raises(SchemaTooNewError) as caught:
            await Store.open(postgres_url, read_only=read_only)
        assert caught.value.found == SCHEMA_VERSION + 1 and caught.value.supported == SCHEMA_VERSION


async def test_a_failed_migration_is_rolled_back_whole(postgres_url: str) -> None:
    bad = Migration(SCHEMA_VERSION + 1, "bad", ("CREATE TABLE added_by_bad (x INTEGER)", "CREATE INDEX i ON missing(x)"))
    with pytest.raises(MigrationError):
        await Store.open(postgres_url, migrations=(*MIGRATIONS, bad))
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('added_by_bad')").fetchone()[0] is None
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION


async def test_a_password_never_shows_in_what_the_store_says(postgres_url: str) -> None:
    with_password = postgres_url.replace("://byok@", "://byok:s3cret@")
    store = await Store.open(with_password)  # trust authentication: the password is not checked
    try:
        assert "s3cret" not in store.location
    finally:
        await store.close()
