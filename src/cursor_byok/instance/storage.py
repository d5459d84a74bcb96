"""Storage faults in words: what went wrong with the database file, and what to do about it.

Used for the one line `serve` prints when it cannot open the database, for the Connect error of a
run whose writes failed, and by `doctor`.
"""
from __future__ import annotations

import contextlib
import errno
import sqlite3
import time
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


def _sqlite_kind(error: sqlite3.Error) -> str | None:
    name = getattr(error, "sqlite_errorname", "") or ""
    return _SQLITE_KINDS.get(name.split("_")[1] if "_" in name else "")


def is_damage(exc: BaseException) -> bool:
    """The failure is the database file's damage (retrying never helps; `db repair` does)."""
    cause = _root_cause(exc)
    return isinstance(cause, sqlite3.Error) and _sqlite_kind(cause) == "damaged"


def storage_problem(exc: BaseException, database: Path | None = None) -> str:
    """One line naming the database, the cause and the fix."""
    cause = _root_cause(exc)
    if isinstance(cause, sqlite3.Error):
        kind = _sqlite_kind(cause)
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


def database_problem(database: Path, *, within: float | None = None) -> str | None:
    """Open the database read-only and run SQLite's quick integrity check: None when healthy (or
    not created yet, or, with `within` seconds, not checked to the end by then), else
    `storage_problem`'s line."""
    if not database.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            if within is not None:
                deadline = time.monotonic() + within
                conn.set_progress_handler(lambda: time.monotonic() > deadline, 100_000)
            findings = [str(row[0]) for row in conn.execute("PRAGMA quick_check")]
    except sqlite3.Error as exc:
        if getattr(exc, "sqlite_errorname", "") == "SQLITE_INTERRUPT":
            return None  # out of time: not known to be damaged
        return storage_problem(exc, database)
    if findings == ["ok"]:
        return None
    # The first finding, in one line (a finding may come as a "*** in database main ***" heading and its lines).
    lines = [line.strip() for finding in findings for line in finding.splitlines() if line.strip() and not line.startswith("***")]
    return _damaged(f"the database {database}", lines[0] if lines else "integrity check failed")


def _damaged(what: str, detail: str) -> str:
    return (
        f"database damaged: {what} ({detail}); stop the server and run `cursor-byok db repair` "
        "(it salvages every readable row and keeps the damaged file beside the new one)"
    )
