"""`cursor-byok conversations list|show|export|delete|prune`: the store, while the server may be running."""
from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import re
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from ..config import Config
from .common import CommandError, echo, load_config, run_async, table
from .transcript import decode_payload, message_lines, run_line


def when(ms: int | None) -> str:
    if not ms:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).astimezone().strftime("%Y-%m-%d %H:%M:%S")


async def with_store(cfg: Config, action: Callable[[Any], Any], *, writes: bool = False) -> Any:
    """Run `action(store)`. A running server owns the embedded database: then it is only read (no
    migrations, no writer), unless the action `writes` a few rows of its own beside the server's
    (`users`: SQLite takes writers from several processes in turn); otherwise the data dir's lock
    is held meanwhile, so that no server starts writing beside us. A PostgreSQL store is shared by
    design: opened as a server opens it. A database that cannot be read is one line naming it and
    the way out."""
    from ..instance import DataDirError, DataDirLock, storage_problem
    from ..store import Store, StoreError

    lock: DataDirLock | None = None
    if cfg.embedded_store:
        try:
            lock = DataDirLock.acquire(cfg.data_path, patience=0.0)
        except DataDirError:  # held by a server (or the data dir is read-only): read only
            pass
    try:
        if lock is not None:
            lock.record(command="conversations")
        try:
            store = await Store.open(cfg.store_location, read_only=cfg.embedded_store and lock is None and not writes)
            try:
                return await action(store)
            finally:
                await store.close()
        except (StoreError, sqlite3.Error) as exc:
            raise CommandError(storage_problem(exc, cfg.database_path if cfg.embedded_store else None)) from None
    finally:
        if lock is not None:
            lock.release()


def database_exists(cfg: Config) -> bool:
    """There is a store to read (a PostgreSQL store is created by whoever opens it first)."""
    return not cfg.embedded_store or cfg.database_path.exists()


def cmd_conversations_list(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    if not database_exists(cfg):
        echo(f"no conversations yet ({cfg.database_path} does not exist)")
        return 0

    async def fetch(store: Any) -> Any:
        try:
            return await store.list_conversations(args.limit, args.after)
        except ValueError as exc:
            raise CommandError(f"--after: {exc}", code=2) from None

    page = run_async(with_store(cfg, fetch))
    if args.json:
        echo(json.dumps(msgspec.to_builtins(page), indent=2, ensure_ascii=False))
        return 0
    if not page.conversations:
        echo("no conversations")
        return 0
    rows = [("CONVERSATION", "UPDATED", "MODEL", "PARENT", "TITLE")]
    for r in page.conversations:
        parent = r.parent.parent_conversation_id if r.parent else "-"
        rows.append((r.conversation_id, when(r.updated_at_ms), r.model_id or "-", parent, (r.title or "-")[:60]))
    for line in table(rows):
        echo(line)
    if page.next is not None:
        echo(f"more: cursor-byok conversations list --after {page.next}", file=sys.stderr)
    return 0


async def _resolve(store: Any, given: str) -> str:
    """A full conversation id from itself or a unique prefix of it."""
    if await store.get_conversation(given) is not None:
        return given
    matches = await store.find_conversation_ids(given, limit=3)
    if not matches:
        raise CommandError(f"no conversation {given!r}")
    if len(matches) > 1:
        shown = ", ".join(matches[:2]) + (", …" if len(matches) > 2 else "")
        raise CommandError(f"{given!r} matches several conversations ({shown}): give more of the id", code=2)
    return matches[0]


def _open_store_or_fail(cfg: Config, given: str) -> None:
    if not database_exists(cfg):
        raise CommandError(f"no conversation {given!r} ({cfg.database_path} does not exist)")


_EVENT_PAGE = 500


def cmd_conversations_show(args: argparse.Namespace) -> int:
    """The transcript, printed a page of events at a time (memory stays flat however long the
    conversation); `--after SEQ --limit N` prints a window of it."""
    cfg = load_config(args)
    _open_store_or_fail(cfg, args.conversation_id)

    async def show(store: Any) -> None:
        cid = await _resolve(store, args.conversation_id)
        record = await store.get_conversation(cid)
        runs = {r.run_id: r for r in await store.list_runs(cid)}
        usage = await store.usage_by_run(cid)
        head = f"conversation {cid}: model {record.model_id or '-'}, mode {record.mode or '-'}, "
        head += f"created {when(record.created_at_ms)}, updated {when(record.updated_at_ms)}"
        echo(head + (f", {record.title!r}" if record.title else ""))
        if record.parent is not None:
            p = record.parent
            echo(f"sub-task of {p.parent_conversation_id} (run {p.parent_run_id}, tool call {p.parent_tool_call_id})")
        shown: set[str] = set()
        current: str | None = None

        def end_run(run_id: str | None) -> None:
            if run_id in runs and run_id not in shown:
                shown.add(run_id)
                echo(run_line(runs[run_id], usage.get(run_id)))

        after, left = args.after, args.limit
        while left is None or left > 0:
            page = await store.load_events(cid, after, _EVENT_PAGE if left is None else min(left, _EVENT_PAGE))
            if not page:
                break
            for event in page:
                if event.run_id != current:
                    end_run(current)
                    current = event.run_id
                entry = decode_payload(event.payload)
                if isinstance(entry, dict):
                    for line in message_lines(str(entry.get("kind", event.kind)), entry.get("message") or {}):
                        echo(f"  {line}")
            after = page[-1].seq
            left = None if left is None else left - len(page)
        if left == 0 and await store.load_events(cid, after, 1):
            echo(f"more: cursor-byok conversations show {cid} --after {after}", file=sys.stderr)
            return
        end_run(current)
        if args.after == 0:
            for run_id in runs:  # runs that committed no history (failed early)
                end_run(run_id)

    run_async(with_store(cfg, show))
    return 0


def _decoded_export(exported: dict[str, Any]) -> dict[str, Any]:
    """The store's export with history payloads, checkpoint states and deliveries decoded (the
    store gives bytes as base64)."""
    from google.protobuf import json_format

    from ..protocol import agent_pb2

    for event in exported["events"]:
        event["payload"] = decode_payload(base64.b64decode(event["payload"]))
    for checkpoint in exported["checkpoints"]:
        state = agent_pb2.ConversationStateStructure.FromString(base64.b64decode(checkpoint["state"]))
        checkpoint["state"] = json_format.MessageToDict(state)
    for delivery in exported["deliveries"]:
        if delivery.get("payload"):
            delivery["payload"] = decode_payload(base64.b64decode(delivery["payload"]))
    return exported


def cmd_conversations_export(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    _open_store_or_fail(cfg, args.conversation_id)

    async def fetch(store: Any) -> dict[str, Any] | None:
        cid = await _resolve(store, args.conversation_id)
        return await store.export_conversation(cid, events_after=args.after, events_limit=args.limit)

    exported = run_async(with_store(cfg, fetch))
    if exported is None:
        raise CommandError(f"no conversation {args.conversation_id!r}")
    text = json.dumps(_decoded_export(exported), indent=2, ensure_ascii=False) + "\n"
    if args.out:
        out = Path(args.out).expanduser()
        try:
            # Conversations hold code and prompts: the export is private like the database.
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            hint = f"create {out.parent} first, or" if not out.parent.is_dir() else "check the path, or"
            raise CommandError(f"cannot write {out}: {exc.strerror} ({hint} choose another --out)") from None
        echo(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _report_deletion(result: Any) -> int:
    for cid in result.busy:
        echo(f"kept {cid}: a run is in progress (try again when it has finished)", file=sys.stderr)
    echo(f"deleted {len(result.deleted)} conversation(s)" + (f": {', '.join(result.deleted)}" if 0 < len(result.deleted) <= 20 else ""))
    if result.erased_bodies:
        echo(f"erased the request and response bodies of {result.erased_bodies} provider call record(s)")
    return 1 if result.busy else 0


def cmd_conversations_delete(args: argparse.Namespace) -> int:
    from ..store import delete_conversations

    cfg = load_config(args)
    _open_store_or_fail(cfg, args.conversation_id)

    async def delete(store: Any) -> Any:
        cid = await _resolve(store, args.conversation_id)
        await store.close()  # flushes; the deletion runs on its own connection
        return await delete_conversations(cfg.store_location, [cid])

    return _report_deletion(run_async(with_store(cfg, delete)))


_AGE = re.compile(r"(\d+)([smhdw])")
_AGE_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def age(text: str) -> int:
    """argparse type for --older-than: 30d, 12h, 2w… as milliseconds."""
    m = _AGE.fullmatch(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"not an age: {text!r} (use e.g. 30d, 12h, 2w)")
    return int(m.group(1)) * _AGE_SECONDS[m.group(2)] * 1000


def cmd_conversations_prune(args: argparse.Namespace) -> int:
    from ..store import prune_conversations

    cfg = load_config(args)
    if not database_exists(cfg):
        echo(f"deleted 0 conversation(s) ({cfg.database_path} does not exist)")
        return 0
    cutoff = int(time.time() * 1000) - args.older_than

    async def prune(store: Any) -> Any:
        await store.close()  # migrated and flushed; the deletion runs on its own connection
        return await prune_conversations(cfg.store_location, cutoff)

    return _report_deletion(run_async(with_store(cfg, prune)))


def positive(text: str) -> int:
    """argparse type for page sizes."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive number: {text!r}")
    return int(text)


def add_event_window(p: argparse.ArgumentParser) -> None:
    p.add_argument("--after", type=int, default=0, metavar="SEQ", help="only history events after this one")
    p.add_argument("--limit", type=positive, default=None, metavar="N", help="at most N history events")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    conv = sub.add_parser("conversations", help="stored conversations")
    conv_sub = conv.add_subparsers(dest="conversations_command", metavar="ACTION", required=True)
    p = conv_sub.add_parser("list", parents=[common], help="most recently updated first")
    p.add_argument("--limit", type=positive, default=50, help="conversations per page (default 50)")
    p.add_argument("--after", metavar="CURSOR", help="the page after the one that printed this cursor")
    p.add_argument("--json", action="store_true", help='one page as {"conversations": [...], "next": CURSOR or null}')
    p.set_defaults(handler=cmd_conversations_list)
    p = conv_sub.add_parser("show", parents=[common], help="a conversation's transcript (ID or a unique prefix of it)")
    p.add_argument("conversation_id", metavar="ID", help="a conversation id, or a unique prefix of one")
    add_event_window(p)
    p.set_defaults(handler=cmd_conversations_show)
    p = conv_sub.add_parser("export", parents=[common], help="everything stored about a conversation, as decoded JSON")
    p.add_argument("conversation_id", metavar="ID", help="a conversation id, or a unique prefix of one")
    p.add_argument("--out", metavar="FILE", help="write the JSON to FILE (default: standard output)")
    add_event_window(p)
    p.set_defaults(handler=cmd_conversations_export)
    p = conv_sub.add_parser("delete", parents=[common], help="delete a conversation and its sub-tasks")
    p.add_argument("conversation_id", metavar="ID", help="a conversation id, or a unique prefix of one")
    p.set_defaults(handler=cmd_conversations_delete)
    p = conv_sub.add_parser("prune", parents=[common], help="delete conversations not updated for a while")
    p.add_argument("--older-than", type=age, required=True, metavar="AGE", help="e.g. 30d, 12h, 2w")
    p.set_defaults(handler=cmd_conversations_prune)
