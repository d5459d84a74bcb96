"""Salvage of a damaged database (`cursor-byok db repair`): every row SQLite can still read is copied
into a new file with the same schema; the damaged file itself is left as it is.

A damaged page cuts a table scan short, so each table is read in rowid order and, where a read
fails, the scan looks for the first rowid it can seek to past the damage (doubling the distance,
then halving it back), and goes on from there: the rows of the damaged pages are lost, the rows
behind them are not. Indexes are not copied but built again from the rows.
"""
from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import msgspec

_MAX_ROWID = 2**63 - 1
_BATCH = 500


class NothingToSalvage(Exception):
    """The file's schema cannot be read: no table in it can be found."""


class Salvage(msgspec.Struct):
    rows: dict[str, int] = msgspec.field(default_factory=dict)  # rows copied, by table
    damaged: list[str] = msgspec.field(default_factory=list)  # tables where some rows could not be read


def salvage_database(damaged: Path, into: Path) -> Salvage:
    """Copy every readable row of `damaged` into the new file `into` (which must not exist)."""
    source = sqlite3.connect(f"{damaged.resolve().as_uri()}?mode=ro", uri=True)
    try:
        try:
            schema = source.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid").fetchall()
            user_version = source.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise NothingToSalvage(f"its schema cannot be read ({exc})") from None
        with contextlib.closing(sqlite3.connect(into, isolation_level=None)) as target:
            target.execute(f"PRAGMA user_version = {int(user_version)}")
            tables = [(name, sql) for kind, name, sql in schema if kind == "table" and not name.startswith("sqlite_")]
            for _, sql in tables:
                target.execute(sql)
            result = Salvage()
            for name, _ in tables:
                result.rows[name], whole = _copy_table(source, target, name)
                if not whole:
                    result.damaged.append(name)
            for kind, name, sql in schema:  # indexes and triggers after the rows: the triggers guard the server's writes
                if kind in ("index", "trigger"):
                    target.execute(sql)
            _copy_sequence(source, target)
            return result
    finally:
        source.close()


def _copy_table(source: sqlite3.Connection, target: sqlite3.Connection, table: str) -> tuple[int, bool]:
    """How many rows were copied, and whether that was all of them."""
    quoted = '"' + table.replace('"', '""') + '"'
    columns = [row[1] for row in source.execute(f"PRAGMA table_info({quoted})")]
    names = ", ".join('"' + c.replace('"', '""') + '"' for c in columns)
    insert = f"INSERT INTO {quoted} (rowid, {names}) VALUES ({', '.join('?' * (len(columns) + 1))})"
    select = f"SELECT rowid, {names} FROM {quoted} WHERE rowid > ? ORDER BY rowid"
    copied, whole, after = 0, True, -_MAX_ROWID - 1
    target.execute("BEGIN")
    while after is not None:
        batch: list[tuple[object, ...]] = []
        try:
            for row in source.execute(select, (after,)):
                batch.append(row)
                if len(batch) >= _BATCH:
                    target.executemany(insert, batch)
                    copied, after, batch = copied + len(batch), batch[-1][0], []
            after = None  # read to the end
        except sqlite3.DatabaseError:
            whole = False
            if batch:
                after = batch[-1][0]
            after = _first_readable_after(source, select, after) if after is not None else None
        target.executemany(insert, batch)
        copied += len(batch)
    target.execute("COMMIT")
    return copied, whole


def _readable(source: sqlite3.Connection, select: str, after: int) -> bool:
    try:
        source.execute(select, (after,)).fetchone()
    except sqlite3.DatabaseError:
        return False
    return True


def _first_readable_after(source: sqlite3.Connection, select: str, after: int) -> int | None:
    """A rowid to scan on from, past the damage that stopped a scan after `after`; None: none."""
    step = 1
    while not _readable(source, select, min(_MAX_ROWID, after + step)):
        if after + step >= _MAX_ROWID:
            return None
        step *= 2
    low, high = after + step // 2, min(_MAX_ROWID, after + step)  # low fails (or is `after`), high reads
    while high - low > 1:
        middle = (low + high) // 2
        if _readable(source, select, middle):
            high = middle
        else:
            low = middle
    return high


def _copy_sequence(source: sqlite3.Connection, target: sqlite3.Connection) -> None:
    """AUTOINCREMENT counters: a repaired table never hands out an id it handed out before."""
    with contextlib.suppress(sqlite3.DatabaseError):
        rows = source.execute("SELECT name, seq FROM sqlite_sequence").fetchall()
        target.execute("DELETE FROM sqlite_sequence")
        target.executemany("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", rows)


__all__ = ["NothingToSalvage", "Salvage", "salvage_database"]
