"""`conversations list|show|export` over a real SQLite store in a temp data dir."""
from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

from cursor_byok.store import ConversationRecord, EventKind, NewEvent, ParentRef, Store


def populate(db: Path) -> None:
    async def go() -> None:
        store = await Store.open(db)
        try:
            store.upsert_conversation(
                ConversationRecord("conv-old", 1_700_000_000_000, 1_700_000_000_000, model_id="byok-a", title="Old chat")
            )
            store.upsert_conversation(
                ConversationRecord("conv-new", 1_700_000_100_000, 1_700_000_900_000, model_id="byok-b", title="Fix the tests")
            )
            store.upsert_conversation(
                ConversationRecord(
                    "conv-child",
                    1_700_000_200_000,
                    1_700_000_300_000,
                    parent=ParentRef("conv-new", "run-1", "tool-7"),
                    model_id="byok-b",
                )
            )
            await store.append_events("conv-new", [NewEvent("ev-1", EventKind.USER, b'{"text": "hi"}')])
            await store.flush()
        finally:
            await store.close()

    asyncio.run(go())


def db_path(config: Path) -> Path:
    return config.parent / "data" / "state.db"


def test_without_a_database_nothing_is_created(run_cli, write_config):
    path = write_config()
    result = run_cli("conversations", "list", "--config", str(path))
    assert result.code == 0 and "no conversations yet" in result.out
    result = run_cli("conversations", "show", "conv-x", "--config", str(path))
    assert result.code == 1 and len(result.err_lines) == 1
    assert not db_path(path).exists()


def test_list_is_most_recent_first(run_cli, write_config):
    path = write_config()
    populate(db_path(path))
    result = run_cli("conversations", "list", "--config", str(path))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == ["CONVERSATION", "UPDATED", "MODEL", "PARENT", "TITLE"]
    assert [line.split()[0] for line in lines[1:]] == ["conv-new", "conv-child", "conv-old"]
    assert "Fix the tests" in lines[1] and "conv-new" in lines[2].split()[4:]
    assert result.err == ""  # one page holds them all: no cursor to follow


def test_list_pages_by_cursor(run_cli, write_config):
    path = write_config()
    populate(db_path(path))
    first = run_cli("conversations", "list", "--limit", "2", "--config", str(path))
    assert [line.split()[0] for line in first.out.splitlines()[1:]] == ["conv-new", "conv-child"]
    assert len(first.err_lines) == 1 and first.err_lines[0].startswith("more: cursor-byok conversations list --after ")
    cursor = first.err_lines[0].rsplit(" ", 1)[1]
    page = json.loads(run_cli("conversations", "list", "--json", "--limit", "2", "--after", cursor, "--config", str(path)).out)
    assert [c["conversation_id"] for c in page["conversations"]] == ["conv-old"] and page["next"] is None
    page = json.loads(run_cli("conversations", "list", "--json", "--limit", "1", "--config", str(path)).out)
    assert [c["conversation_id"] for c in page["conversations"]] == ["conv-new"] and page["next"] == "1700000900000.conv-new"
    bad = run_cli("conversations", "list", "--after", "page-2", "--config", str(path))
    assert bad.code == 2 and len(bad.err_lines) == 1 and "not a page cursor" in bad.err
    assert run_cli("conversations", "list", "--limit", "0", "--config", str(path)).code == 2


def test_show_and_export_take_a_window_of_the_history(run_cli, write_config):
    path = write_config()
    db = db_path(path)

    async def long_conversation() -> None:
        store = await Store.open(db)
        store.upsert_conversation(ConversationRecord("conv-long", 1_700_000_000_000, 1_700_000_000_000))
        message = lambda n: json.dumps({"kind": "user", "message": {"role": "user", "parts": [{"type": "text", "text": f"message {n}"}]}}).encode()
        await store.append_events("conv-long", [NewEvent(f"ev-{n}", EventKind.USER, message(n)) for n in range(1, 1_201)])
        await store.close()

    asyncio.run(long_conversation())
    whole = run_cli("conversations", "show", "conv-long", "--config", str(path))
    assert whole.code == 0 and whole.err == ""
    assert [line for line in whole.out.splitlines() if "message " in line] == [f"  user: message {n}" for n in range(1, 1_201)]
    window = run_cli("conversations", "show", "conv-long", "--after", "600", "--limit", "3", "--config", str(path))
    assert [line for line in window.out.splitlines() if "message " in line] == [f"  user: message {n}" for n in (601, 602, 603)]
    assert window.err_lines == ["more: cursor-byok conversations show conv-long --after 603"]
    tail = run_cli("conversations", "show", "conv-long", "--after", "1199", "--limit", "5", "--config", str(path))
    assert [line for line in tail.out.splitlines() if "message " in line] == ["  user: message 1200"] and tail.err == ""

    exported = json.loads(run_cli("conversations", "export", "conv-long", "--after", "10", "--limit", "2", "--config", str(path)).out)
    assert [e["seq"] for e in exported["events"]] == [11, 12] and exported["next_after"] == 12
    exported = json.loads(run_cli("conversations", "export", "conv-long", "--config", str(path)).out)
    assert len(exported["events"]) == 1_200 and exported["next_after"] is None


def test_show_accepts_a_unique_prefix_and_names_the_parent(run_cli, write_config):
    path = write_config()
    populate(db_path(path))
    result = run_cli("conversations", "show", "conv-ch", "--config", str(path))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].startswith("conversation conv-child: model byok-b, mode -, created ")
    assert lines[1] == "sub-task of conv-new (run run-1, tool call tool-7)"
    ambiguous = run_cli("conversations", "show", "conv-", "--config", str(path))
    assert ambiguous.code == 2
    assert ambiguous.err_lines == ["cursor-byok: 'conv-' matches several conversations (conv-child, conv-new, …): give more of the id"]
    result = run_cli("conversations", "show", "nope", "--config", str(path))
    assert result.code == 1 and result.err_lines == ["cursor-byok: no conversation 'nope'"]


def test_export_writes_json_to_stdout_or_a_private_file(run_cli, write_config, tmp_path: Path):
    path = write_config()
    populate(db_path(path))
    result = run_cli("conversations", "export", "conv-new", "--config", str(path))
    assert result.code == 0, result.err
    exported = json.loads(result.out)
    assert exported["conversation"]["conversation_id"] == "conv-new"
    assert [e["event_id"] for e in exported["events"]] == ["ev-1"]
    assert exported["events"][0]["payload"] == {"text": "hi"}  # decoded, not base64

    out = tmp_path / "export.json"
    result = run_cli("conversations", "export", "conv-new", "--out", str(out), "--config", str(path))
    assert result.code == 0 and result.out == ""
    assert json.loads(out.read_text()) == exported
    if os.name == "posix":
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
    result = run_cli("conversations", "export", "nope", "--config", str(path))
    assert result.code == 1 and result.err_lines == ["cursor-byok: no conversation 'nope'"]


def schema_version(db: Path) -> int:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0])


def test_while_a_server_owns_the_data_dir_the_database_is_only_read(run_cli, write_config):
    """A read command next to a running server is no second writer: not even the migrations a
    writer would apply run. With nobody holding the data dir, the same command opens it normally."""
    from cursor_byok.instance import DataDirLock
    from cursor_byok.store import MIGRATIONS

    path = write_config()
    db = db_path(path)

    async def old_database() -> None:
        store = await Store.open(db, migrations=MIGRATIONS[:2])  # an older schema (the transcript reads usage, from 2)
        await store.upsert_conversation(ConversationRecord("conv-1", 1_700_000_000_000, 1_700_000_000_000, title="Kept"))
        await store.close()

    asyncio.run(old_database())

    def read_beside_a_server(*commands: tuple[str, ...]) -> None:
        with DataDirLock.acquire(db.parent) as server:  # what a running `serve` holds
            server.record(address="127.0.0.1:8787")
            for args in commands:
                result = run_cli("conversations", *args, "--config", str(path))
                assert result.code == 0 and "conv-1" in result.out, result.err

    read_beside_a_server(("list",), ("show", "conv-1"))
    assert schema_version(db) == 2
    result = run_cli("conversations", "list", "--config", str(path))
    assert result.code == 0 and "conv-1" in result.out
    assert schema_version(db) == len(MIGRATIONS)
    read_beside_a_server(("export", "conv-1"))
