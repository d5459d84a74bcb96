"""`cursor-byok conversations list|show|export`: read the store while the server may be running."""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from ..config import Config
from .common import CommandError, echo, load_config, table


def when(ms: int | None) -> str:
    if not ms:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).astimezone().strftime("%Y-%m-%d %H:%M:%S")


async def with_store(cfg: Config, action: Callable[[Any], Any]) -> Any:
    """Run `action(store)`. A running server owns the database: then it is only read (no
    migrations, no writer); otherwise the data dir's lock is held meanwhile, so that no server
    starts writing beside us."""
    from ..instance import DataDirError, DataDirLock
    from ..store import Store

    try:
        lock: DataDirLock | None = DataDirLock.acquire(cfg.data_path, patience=0.0)
    except DataDirError:  # held by a server (or the data dir is read-only): read only
        lock = None
    try:
        if lock is not None:
            lock.record(command="conversations")
        store = await Store.open(cfg.database_path, read_only=lock is None)
        try:
            return await action(store)
        finally:
            await store.close()
    finally:
        if lock is not None:
            lock.release()


def database_exists(cfg: Config) -> bool:
    return cfg.database_path.exists()


def cmd_conversations_list(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    if not database_exists(cfg):
        echo(f"no conversations yet ({cfg.database_path} does not exist)")
        return 0

    async def fetch(store: Any) -> list[Any]:
        return await store.list_conversations(args.limit, args.offset)

    records = asyncio.run(with_store(cfg, fetch))
    if args.json:
        echo(json.dumps(msgspec.to_builtins(records), indent=2, ensure_ascii=False))
        return 0
    if not records:
        echo("no conversations")
        return 0
    rows = [("CONVERSATION", "UPDATED", "MODEL", "PARENT", "TITLE")]
    for r in records:
        parent = r.parent.parent_conversation_id if r.parent else "-"
        rows.append((r.conversation_id, when(r.updated_at_ms), r.model_id or "-", parent, (r.title or "-")[:60]))
    for line in table(rows):
        echo(line)
    return 0


def cmd_conversations_show(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    if not database_exists(cfg):
        raise CommandError(f"no conversation {args.conversation_id!r} ({cfg.database_path} does not exist)")

    async def fetch(store: Any) -> tuple[Any, list[Any]]:
        record = await store.get_conversation(args.conversation_id)
        runs = await store.list_runs(args.conversation_id) if record is not None else []
        return record, runs

    record, runs = asyncio.run(with_store(cfg, fetch))
    if record is None:
        raise CommandError(f"no conversation {args.conversation_id!r}")
    data = msgspec.to_builtins(record)
    for key in ("created_at_ms", "updated_at_ms"):
        data[key.removesuffix("_ms")] = when(data.pop(key))
    data["runs"] = len(runs)
    width = max(len(k) for k in data)
    for key, value in data.items():
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else ("-" if value is None else value)
        echo(f"{key.ljust(width)}  {shown}")
    return 0


def cmd_conversations_export(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    if not database_exists(cfg):
        raise CommandError(f"no conversation {args.conversation_id!r} ({cfg.database_path} does not exist)")

    async def fetch(store: Any) -> dict[str, Any] | None:
        return await store.export_conversation(args.conversation_id)

    exported = asyncio.run(with_store(cfg, fetch))
    if exported is None:
        raise CommandError(f"no conversation {args.conversation_id!r}")
    text = json.dumps(exported, indent=2, ensure_ascii=False) + "\n"
    if args.out:
        out = Path(args.out).expanduser()
        # Conversations hold code and prompts: the export is private like the database.
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        echo(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    conv = sub.add_parser("conversations", help="stored conversations")
    conv_sub = conv.add_subparsers(dest="conversations_command", metavar="ACTION", required=True)
    p = conv_sub.add_parser("list", parents=[common], help="most recently updated first")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_conversations_list)
    p = conv_sub.add_parser("show", parents=[common], help="one conversation's record")
    p.add_argument("conversation_id", metavar="ID")
    p.set_defaults(handler=cmd_conversations_show)
    p = conv_sub.add_parser("export", parents=[common], help="everything stored about a conversation, as JSON")
    p.add_argument("conversation_id", metavar="ID")
    p.add_argument("--out", metavar="FILE")
    p.set_defaults(handler=cmd_conversations_export)
