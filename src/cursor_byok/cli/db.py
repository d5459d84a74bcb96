"""`cursor-byok db stats|vacuum|backup|repair`: the database file, while the server may be running.
On a PostgreSQL store `stats` and `vacuum` (its retention part) work; `backup` and `repair` are the
embedded file's and say what to use instead.

`stats` and `backup` only read (their own read-only connection), so they run beside a serving
server; `vacuum` and `repair` rewrite the file, so they take the data dir's lock and refuse while a server holds it.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from ..config import Config
from .common import CommandError, echo, load_config, run_async, table


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


# What PostgreSQL's own tools do for a database the embedded store's commands do for its file.
_POSTGRES_TOOLS = {
    "backup": "pg_dump (or the cluster's continuous archiving)",
    "repair": "PostgreSQL's own recovery (a replica, a backup)",
}


def _database(cfg: Config, command: str | None = None) -> Path:
    """The embedded store's file. `command`: one that works on that file only, refused (naming
    what to use instead) when the store is on PostgreSQL."""
    if command is not None and not cfg.embedded_store:
        raise CommandError(
            f"`db {command}` is for the embedded SQLite store; this store is a PostgreSQL database: use {_POSTGRES_TOOLS[command]}"
        )
    if not cfg.database_path.exists():
        raise CommandError(f"no database yet ({cfg.database_path} does not exist)")
    return cfg.database_path


def _storage_error(exc: BaseException, database: Path | None) -> CommandError:
    from ..instance import storage_problem

    return CommandError(storage_problem(exc, database))


def cmd_db_stats(args: argparse.Namespace) -> int:
    from ..store import StoreError, database_stats

    cfg = load_config(args)
    database = _database(cfg) if cfg.embedded_store else cfg.store.url
    try:
        stats = database_stats(database, table_sizes=args.sizes)
    except sqlite3.OperationalError as exc:
        if args.sizes and "dbstat" in str(exc):
            raise CommandError("--sizes needs SQLite's dbstat table, which this SQLite was built without") from None
        raise _storage_error(exc, database) from None
    except (sqlite3.Error, StoreError) as exc:
        raise _storage_error(exc, database if cfg.embedded_store else None) from None
    ages = cfg.retention_ages_ms()
    if args.json:
        echo(json.dumps({
            "path": str(stats.path), "file_bytes": stats.file_bytes, "wal_bytes": stats.wal_bytes,
            "page_size": stats.page_size, "pages": stats.pages, "free_pages": stats.free_pages,
            "used_bytes": stats.used_bytes, "turns": stats.turns, "bytes_per_turn": stats.bytes_per_turn,
            "rows": stats.rows, "table_bytes": stats.table_bytes,
            "quarantined": [{"conversation_id": q.conversation_id, "request_id": q.request_id, "appends": q.appends, "reason": q.reason} for q in stats.quarantined],
            "retention_days": {k: v / 86_400_000 for k, v in ages.items()},
        }, indent=2))
        return 0
    if cfg.embedded_store:
        echo(f"database: {stats.path}: {size(stats.file_bytes)} (+ {size(stats.wal_bytes)} write-ahead log)")
        echo(f"pages: {stats.pages:,} of {stats.page_size} B, {stats.free_pages:,} free ({size(stats.free_pages * stats.page_size)}"
             " that `cursor-byok db vacuum` gives back)")
    else:
        echo(f"database: {stats.path} (PostgreSQL): {size(stats.file_bytes)}")
    per_turn = f", {size(stats.bytes_per_turn)} per turn" if stats.bytes_per_turn is not None else ""
    echo(f"turns: {stats.turns:,}{per_turn}")
    rows = [("TABLE", "ROWS", "SIZE" if stats.table_bytes else "")]
    for name, count in stats.rows.items():
        rows.append((name, f"{count:,}", size(stats.table_bytes[name]) if name in stats.table_bytes else ""))
    for line in table(rows):
        echo(line)
    for q in stats.quarantined:
        echo(f"quarantined: conversation {q.conversation_id or 'unknown'} (request {q.request_id}), {q.appends} append(s): {q.reason}")
    kept = ", ".join(f"{k} {'forever' if v == 0 else f'{v / 86_400_000:g} days'}" for k, v in ages.items())
    echo(f"retention: {kept} ([retention] in the config; history is kept until `conversations delete|prune`)")
    return 0


def cmd_db_backup(args: argparse.Namespace) -> int:
    from ..store import backup_database

    cfg = load_config(args)
    database = _database(cfg, "backup")
    dest = Path(args.file).expanduser()
    if dest.exists():
        raise CommandError(f"{dest} exists: choose another file, or remove it first")
    if not dest.parent.is_dir():
        raise CommandError(f"{dest.parent} is not a directory: create it first, or choose another file")
    started = time.monotonic()
    try:
        written = backup_database(database, dest, compact=args.compact)
    except FileExistsError:
        raise CommandError(f"{dest} appeared while the backup ran: choose another file") from None
    except (sqlite3.Error, OSError) as exc:
        raise _storage_error(exc, dest if isinstance(exc, OSError) else database) from None
    echo(f"backed up {database} to {dest}: {size(written)} in {time.monotonic() - started:.1f} s")
    return 0


def cmd_db_vacuum(args: argparse.Namespace) -> int:
    from ..store import vacuum_database

    cfg = load_config(args)
    if not cfg.embedded_store:
        return _prune_postgres(cfg)
    database = _database(cfg)
    advice = "(`cursor-byok db backup FILE --compact` writes a compacted copy while it serves)"
    with _holding_data_dir(cfg, "db vacuum", f"to vacuum {advice}"):
        before = database.stat().st_size
        try:
            pruned = run_async(_apply_retention(cfg, database))
            vacuum_database(database)
        except (sqlite3.Error, OSError) as exc:
            raise _storage_error(exc, database) from None
    gone = ", ".join(f"{n:,} {kind}" for kind, n in pruned.items() if n)
    echo(f"retention: deleted {gone or 'nothing'}")
    echo(f"vacuumed {database}: {size(before)} → {size(database.stat().st_size)}")
    return 0


def _prune_postgres(cfg: Config) -> int:
    """`db vacuum` of a PostgreSQL store: the retention ages applied now (the servers apply them
    hourly too); the space is PostgreSQL's autovacuum's to reuse."""
    from ..store import StoreError

    try:
        pruned = run_async(_apply_retention(cfg, cfg.store.url))
    except StoreError as exc:
        raise _storage_error(exc, None) from None
    gone = ", ".join(f"{n:,} {kind}" for kind, n in pruned.items() if n)
    echo(f"retention: deleted {gone or 'nothing'}")
    echo("the space freed is reused by PostgreSQL's autovacuum (VACUUM FULL gives it back to the disk)")
    return 0


def cmd_db_repair(args: argparse.Namespace) -> int:
    """Salvage every readable row into a new file, which takes the database's place; the damaged
    file (with its write-ahead log) is kept beside it under another name."""
    from ..store import NothingToSalvage, salvage_database

    cfg = load_config(args)
    database = _database(cfg, "repair")
    with _holding_data_dir(cfg, "db repair", "to repair the database"):
        repaired = database.with_name(database.name + ".repairing")
        kept = database.with_name(f"{database.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        repaired.unlink(missing_ok=True)  # a repair cut short before
        try:
            salvage = salvage_database(database, repaired)
        except NothingToSalvage as exc:
            repaired.unlink(missing_ok=True)
            raise CommandError(f"cannot repair {database}: {exc}; restore a backup, or move it aside to start with an empty history") from None
        except (sqlite3.Error, OSError) as exc:
            repaired.unlink(missing_ok=True)
            raise _storage_error(exc, database) from None
        for suffix in ("", "-wal", "-shm"):  # the log goes with its file: it must never meet the repaired one
            damaged = database.with_name(database.name + suffix)
            if damaged.exists():
                damaged.rename(kept.with_name(kept.name + suffix))
        repaired.rename(database)
    lost = f"; rows could not be read in: {', '.join(salvage.damaged)}" if salvage.damaged else "; every row was readable"
    echo(f"repaired {database}: {sum(salvage.rows.values()):,} rows salvaged{lost}")
    echo(f"the damaged file is kept at {kept}")
    return 0


@contextlib.contextmanager
def _holding_data_dir(cfg: Config, command: str, why: str) -> Iterator[None]:
    """The data dir's lock, held while `command` rewrites the database: no server beside it."""
    from ..instance import DataDirBusy, DataDirError, DataDirLock

    try:
        lock = DataDirLock.acquire(cfg.data_path, patience=0.0)
    except DataDirBusy as exc:
        raise CommandError(f"{exc.holder.describe()} is using {cfg.data_path}: stop it first {why}") from None
    except DataDirError as exc:
        raise CommandError(str(exc)) from None
    try:
        lock.record(command=command)
        yield
    finally:
        lock.release()


async def _apply_retention(cfg: Config, database: Path | str) -> dict[str, int]:
    """What the server would prune at its next retention pass, pruned now (opening the store also
    brings its schema up to date)."""
    from ..store import Store

    store = await Store.open(database)
    try:
        pruned = await store.apply_retention(cfg.retention_ages_ms(), time.time_ns() // 1_000_000)
    finally:
        await store.close()
    return {kind.value: n for kind, n in pruned.items()}


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    db = sub.add_parser("db", help="the database: its size, a backup, a rebuild")
    db_sub = db.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    p = db_sub.add_parser("stats", parents=[common], help="size, rows and bytes per turn (runs beside a server)")
    p.add_argument("--sizes", action="store_true", help="also each table's size (reads the whole file)")
    p.add_argument("--json", action="store_true", help="the same numbers as JSON")
    p.set_defaults(handler=cmd_db_stats)
    p = db_sub.add_parser("backup", parents=[common], help="a consistent copy, taken while the server may be serving")
    p.add_argument("file", metavar="FILE", help="where the copy goes (must not exist)")
    p.add_argument("--compact", action="store_true", help="leave out free pages (slower, smaller)")
    p.set_defaults(handler=cmd_db_backup)
    p = db_sub.add_parser("vacuum", parents=[common], help="apply the retention ages, then rebuild the file smaller (server stopped)")
    p.set_defaults(handler=cmd_db_vacuum)
    p = db_sub.add_parser("repair", parents=[common], help="salvage every readable row of a damaged database into a new file (server stopped)")
    p.set_defaults(handler=cmd_db_repair)


__all__ = ["register"]
