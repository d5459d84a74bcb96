"""Salvage of a damaged database: every row of a readable page is copied, rows behind a damaged
page included; the schema (indexes, triggers, the version) comes along."""
from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from cursor_byok.store import NothingToSalvage, salvage_database


def make(path: Path, rows: int) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA user_version = 7")
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL) STRICT")
        conn.execute("CREATE INDEX items_body ON items (body)")
        conn.execute("CREATE TRIGGER items_kept BEFORE DELETE ON items BEGIN SELECT RAISE(ABORT, 'kept'); END")
        conn.execute("CREATE TABLE other (name TEXT PRIMARY KEY) STRICT")
        conn.executemany("INSERT INTO items (body) VALUES (?)", [(f"row {i:05d} " + "y" * 200,) for i in range(rows)])
        conn.execute("INSERT INTO other VALUES ('intact')")
        conn.commit()


def overwrite(path: Path, where: str) -> list[int]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = [r[0] for r in conn.execute(f"SELECT pageno FROM dbstat WHERE {where} ORDER BY pageno")]
    with open(path, "r+b") as fh:
        for page in pages:
            fh.seek((page - 1) * size)
            fh.write(b"\xa5" * size)
    return pages


def test_the_rows_around_a_damaged_page_are_salvaged(tmp_path: Path) -> None:
    damaged, into = tmp_path / "state.db", tmp_path / "new.db"
    make(damaged, 2000)
    with contextlib.closing(sqlite3.connect(damaged)) as conn:
        leaves = [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name = 'items' AND pagetype = 'leaf' ORDER BY path")]
    middle = leaves[len(leaves) // 2]
    overwrite(damaged, f"pageno IN ({middle}, {leaves[len(leaves) // 2 + 5]})")
    salvage = salvage_database(damaged, into)
    assert salvage.damaged == ["items"] and salvage.rows["other"] == 1
    per_page = 2000 / len(leaves)
    assert 2000 - 3 * per_page <= salvage.rows["items"] < 2000  # two pages' rows lost, the rest kept
    with contextlib.closing(sqlite3.connect(into)) as conn:
        assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 7
        ids = [r[0] for r in conn.execute("SELECT id FROM items ORDER BY id")]
        assert ids[0] == 1 and ids[-1] == 2000  # rows behind the damage came along
        assert conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL").fetchall() == [("items_body",)]
        with pytest.raises(sqlite3.DatabaseError, match="kept"):
            conn.execute("DELETE FROM items WHERE id = 1")
        conn.execute("INSERT INTO items (body) VALUES ('new')")
        assert conn.execute("SELECT max(id) FROM items").fetchone()[0] == 2001  # the AUTOINCREMENT counter came along


def test_a_healthy_file_is_copied_whole(tmp_path: Path) -> None:
    make(tmp_path / "state.db", 50)
    salvage = salvage_database(tmp_path / "state.db", tmp_path / "new.db")
    assert salvage.damaged == [] and salvage.rows == {"items": 50, "other": 1}


def test_a_file_without_a_readable_schema_has_nothing_to_salvage(tmp_path: Path) -> None:
    (tmp_path / "state.db").write_bytes(b"not a database" * 400)
    with pytest.raises(NothingToSalvage):
        salvage_database(tmp_path / "state.db", tmp_path / "new.db")
