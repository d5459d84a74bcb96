"""Storage faults in words: what went wrong with the database file, and what to do about it.

Used for the one line `serve` prints when it cannot open the database, for the Connect error of a
run whose writes failed, and by `doctor`.
"""
from __future__ import annotations

import contextlib
import errno
import sqlite3
from pathlib import Path

# Primary SQLite result code names (sqlite_errorname without its extension, e.g. IOERR of IOERR_WRITE).
_SQLITE_KINDS = {"CORRUPT": "damaged", "NOTADB": "damaged", "FULL": "full", "IOERR": "io",
                 "READONLY": "unwritable", "CANTOPEN": "unwritable", "PERM": "unwritable", "AUTH": "unwritable"}
_OS_KINDS = {errno.ENOSPC: "full", errno.EROFS: "unwritable", errno.EACCES: "unwritable", errno.EPERM: "unwritable", errno.EIO: "io"}


def _root_cause(exc: BaseException) -> BaseException:
    """The first SQLite or OS error in the chain (store errors wrap them), else `exc` itself."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (sqlite3.Error, OSError)):
            return seen
        seen = seen.__cause__ or seen.__context__
    return exc


def storage_problem(exc: BaseException, database: Path | None = None) -> str:
    """One line naming the database, the cause and the fix."""
    cause = _root_cause(exc)
    if isinstance(cause, sqlite3.Error):
        name = getattr(cause, "sqlite_errorname", "") or ""
        kind = _SQLITE_KINDS.get(name.split("_")[1] if "_" in name else "")
        detail = str(cause)
    elif isinstance(cause, OSError):
        kind, detail = _OS_KINDS.get(cause.errno or 0), cause.strerror or str(cause)
    else:
        kind, detail = None, str(exc)
    what = f"the database {database}" if database else "the database"
    if kind == "damaged":
        return _damaged(what, detail)
    if kind == "full":
        return f"no space left for {what} ({detail}): free disk space"
    if kind == "unwritable":
        return f"{what} cannot be written ({detail}): make {database.parent if database else 'the data dir'} writable"
    if kind == "io":
        return f"I/O error on {what} ({detail}): check the disk and its free space"
    return f"{what}: {detail}"


def database_problem(database: Path) -> str | None:
    """Open the database read-only and run SQLite's quick integrity check: None when healthy (or
    not created yet), else `storage_problem`'s line."""
    if not database.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            findings = [str(row[0]) for row in conn.execute("PRAGMA quick_check")]
    except sqlite3.Error as exc:
        return storage_problem(exc, database)
    return None if findings == ["ok"] else _damaged(f"the database {database}", findings[0])


def _damaged(what: str, detail: str) -> str:
    return f"{what} is damaged ({detail}): move it aside to start with an empty history, or restore a backup"
