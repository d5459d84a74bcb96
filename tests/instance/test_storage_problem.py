"""Storage faults worded as one line: cause and fix."""
from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

from cursor_byok.instance import database_problem, storage_problem
from cursor_byok.store import WriteFailedError


def sqlite_error(run: str, path: Path) -> sqlite3.Error:
    try:
        with sqlite3.connect(path) as conn:
            conn.execute(run)
    except sqlite3.Error as exc:
        return exc
    raise AssertionError("no error")


def test_each_fault_names_its_fix(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    db.write_bytes(b"not a database" * 100)
    damaged = storage_problem(sqlite_error("SELECT * FROM sqlite_master", db), db)
    assert damaged.startswith(f"database damaged: the database {db} (file is not a database)") and "`cursor-byok db repair`" in damaged
    full = WriteFailedError("append 1 event", sqlite3.OperationalError("database or disk is full"))
    full.__cause__.sqlite_errorname = "SQLITE_FULL"  # type: ignore[union-attr]
    assert storage_problem(full) == "no space left for the database (database or disk is full): free disk space"
    read_only = storage_problem(OSError(errno.EROFS, "Read-only file system"), db)
    assert read_only == f"the database {db} cannot be written (Read-only file system): make {tmp_path} writable"


def test_doctor_check_of_a_database(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    assert database_problem(db) is None  # not created yet
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (x)")
    assert database_problem(db) is None
    db.write_bytes(b"x" * 4096)
    problem = database_problem(db)
    assert problem is not None and problem.startswith("database damaged") and "\n" not in problem
