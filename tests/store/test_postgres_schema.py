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
        "CREATE TABLE t (name TEXT COLLATE NOCASE) STRICT",
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


async def test_an_older_database_is_upgraded_keeping_its_data(postgres_url: str) -> None:
    old = await Store.open(postgres_url, migrations=MIGRATIONS[:1])
    assert old.schema_version == 1
    await old.upsert_conversation(ConversationRecord("c1", 1, 1))
    await old.append_events("c1", [NewEvent("e1", "user", b"x")])
    await old.close()
    new = await Store.open(postgres_url)
    try:
        assert new.schema_version == SCHEMA_VERSION
        assert [e.event_id for e in await new.load_events("c1")] == ["e1"]
        appended = await new.append_events("c1", [NewEvent("e2", "user", b"y")])  # the triggers re-made by v4 hold
        assert appended.results[0].seq == 2
    finally:
        await new.close()


async def test_a_read_only_opener_creates_nothing(postgres_url: str) -> None:
    reader = await Store.open(postgres_url, read_only=True)
    try:
        assert reader.schema_version == 0
    finally:
        await reader.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('schema_version')").fetchone()[0] is None


def _store_statements() -> dict[str, str]:
    """Every SQL statement a module of the store names as a constant, by where it is."""
    import importlib
    import pkgutil
    import re

    import cursor_byok.store as package

    found = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, str) and re.match(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b", value):
                found[f"{info.name}.{name}"] = value
    return found


def test_every_statement_of_the_store_has_a_postgresql_text() -> None:
    """A statement in SQLite's own spelling (rowid, json_each, INSERT OR REPLACE, …) added to the
    store fails here, naming it, rather than on a team server."""
    statements = _store_statements()
    assert len(statements) > 20 and "history.INSERT_EVENT" in statements
    for where, sql in statements.items():
        if where.startswith(("salvage.", "upkeep.")):
            continue  # the embedded store's file tools
        translate(sql)


def test_sqlite_only_spellings_are_refused_or_rewritten() -> None:
    assert translate("INSERT OR IGNORE INTO t VALUES (?)") == "INSERT INTO t VALUES (%s) ON CONFLICT DO NOTHING"
    for sql in ("INSERT OR REPLACE INTO t VALUES (?)", "SELECT rowid FROM t", "SELECT value FROM json_each(?)", "SELECT 1 LIMIT -1"):
        with pytest.raises(UntranslatableStatement):
            translate(sql)
