"""The commands that read the store work on a PostgreSQL store (`--store-url` or [store] url) as on
the embedded one; the ones about SQLite's file say they are for the embedded store."""
from __future__ import annotations

import sys

import pytest

from cursor_byok.store import StoreError
from tests.cli.test_cli_conversations import populate


def test_conversations_usage_and_stats_read_a_postgresql_store(run_cli, write_config, postgres_url: str) -> None:
    path = write_config()
    populate(postgres_url)  # type: ignore[arg-type]
    given = ("--config", str(path), "--store-url", postgres_url)
    listed = run_cli("conversations", "list", *given)
    assert listed.code == 0, listed.err
    assert [line.split()[0] for line in listed.out.splitlines()[1:]] == ["conv-new", "conv-child", "conv-old"]
    shown = run_cli("conversations", "show", "conv-ne", *given)
    assert shown.code == 0 and "conv-new" in shown.out
    assert run_cli("usage", *given).code == 0
    stats = run_cli("db", "stats", *given)
    assert stats.code == 0 and "(PostgreSQL)" in stats.out and "conversations" in stats.out
    assert not (path.parent / "data" / "state.db").exists()  # nothing went to the embedded store


def test_the_config_names_the_store_and_deletion_works_on_it(run_cli, write_config, postgres_url: str) -> None:
    path = write_config(f'[store]\nurl = "{postgres_url}"\n')
    populate(postgres_url)  # type: ignore[arg-type]
    deleted = run_cli("conversations", "delete", "conv-new", "--config", str(path))
    assert deleted.code == 0, deleted.err
    assert "conv-child" in deleted.out  # its sub-task went with it
    listed = run_cli("conversations", "list", "--config", str(path))
    assert [line.split()[0] for line in listed.out.splitlines()[1:]] == ["conv-old"]
    doctor = run_cli("doctor", "--config", str(path))
    assert "(PostgreSQL) answers" in doctor.out


@pytest.mark.parametrize("command", ["backup", "repair"])
def test_file_commands_say_they_are_for_the_embedded_store(run_cli, write_config, command: str, tmp_path) -> None:
    path = write_config('[store]\nurl = "postgresql://nobody@127.0.0.1:9/none"\n')
    extra = (str(tmp_path / "copy.db"),) if command == "backup" else ()
    result = run_cli("db", command, *extra, "--config", str(path))
    assert result.code == 1
    assert result.err_lines == [f"cursor-byok: `db {command}` is for the embedded SQLite store; this store is a PostgreSQL database: "
                                f"use {result.err_lines[0].split('use ', 1)[1]}"]


def test_a_store_url_that_is_not_postgresql_is_refused(run_cli, write_config) -> None:
    path = write_config()
    result = run_cli("conversations", "list", "--config", str(path), "--store-url", "mysql://x/y")
    assert result.code == 2 and "--store-url: expected a postgresql:// url" in result.err


async def test_without_psycopg_a_postgresql_url_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import cursor_byok.store
    from cursor_byok.store import Store

    monkeypatch.delattr(cursor_byok.store, "postgres", raising=False)  # as in a process that never loaded it
    for name in [n for n in sys.modules if n.startswith("cursor_byok.store.postgres")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # an import of it fails, as when it is not installed
    with pytest.raises(StoreError, match=r"pip install 'cursor-byok\[team\]'"):
        await Store.open("postgresql://nobody@127.0.0.1:9/none")


def test_vacuum_of_a_postgresql_store_applies_the_retention_ages(run_cli, write_config, postgres_url: str) -> None:
    import asyncio

    from cursor_byok.store import Store, TraceRecord

    async def old_trace() -> None:
        store = await Store.open(postgres_url)
        try:
            await store.record_trace(TraceRecord("t-old", "local_byok", "POST", "/x", started_at_ms=1))
        finally:
            await store.close()

    asyncio.run(old_trace())
    path = write_config(f'[store]\nurl = "{postgres_url}"\n')
    result = run_cli("db", "vacuum", "--config", str(path))
    assert result.code == 0, result.err
    assert "retention: deleted 1 traces" in result.out
