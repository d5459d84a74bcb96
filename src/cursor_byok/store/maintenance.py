"""Removing whole conversations (`conversations delete` and `prune --older-than`).

History is append-only for the server: a trigger refuses to delete any event. Removing a whole
conversation, with its sub-task conversations, is the one exception: the deleting transaction lists
them in `conversation_deletions` (which the trigger lets through) and empties that table before it
commits. It runs on its own short-lived connection, so it never interleaves with a Store's batched
writes, and it leaves alone a conversation whose run is still in progress. Usage rows and provider
call records stay for the usage figures (they have no foreign keys on purpose), but the request and
response bodies a call record keeps in detailed mode are the conversation's words and files: they are
erased in the same transaction. The same statements run on PostgreSQL (its triggers are derived
from SQLite's).
"""
from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from .core import is_postgres_url, postgres_backend

# Tables holding a conversation's rows, children first (foreign keys point at conversations).
_OWNED_TABLES = (
    "history_events",
    "checkpoints",
    "background_deliveries",
    "request_bindings",
    "runs",
    "conversation_tool_state",
    "conversations",
)
_BATCH = 100


class Deletion(msgspec.Struct):
    deleted: list[str] = msgspec.field(default_factory=list)  # conversations removed, sub-tasks included
    busy: list[str] = msgspec.field(default_factory=list)  # left alone: a run of theirs is in progress
    erased_bodies: int = 0  # provider call records whose request and response bodies went


def _marks(ids: Sequence[str]) -> str:
    return ",".join("?" * len(ids))


def _with_subtasks(conn: Any, roots: Sequence[str]) -> list[str]:
    ids, frontier = list(roots), list(roots)
    while frontier:
        rows = conn.execute(
            f"SELECT conversation_id FROM conversations WHERE parent_conversation_id IN ({_marks(frontier)})", frontier
        ).fetchall()
        frontier = [r[0] for r in rows if r[0] not in ids]
        ids += frontier
    return ids


def _delete_batch(conn: Any, roots: Sequence[str], result: Deletion) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        doomed: list[str] = []
        for root in roots:
            family = _with_subtasks(conn, [root])
            running = conn.execute(
                f"SELECT 1 FROM runs WHERE outcome IS NULL AND conversation_id IN ({_marks(family)}) LIMIT 1", family
            ).fetchone()
            if running:
                result.busy.append(root)
            else:
                doomed += family
        if doomed:
            conn.executemany("INSERT INTO conversation_deletions VALUES (?) ON CONFLICT DO NOTHING", [(c,) for c in doomed])
            for table in _OWNED_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE conversation_id IN ({_marks(doomed)})", doomed)
            result.erased_bodies += conn.execute(
                f"UPDATE provider_calls SET request_body = NULL, response_body = NULL WHERE conversation_id IN ({_marks(doomed)}) "
                "AND (request_body IS NOT NULL OR response_body IS NOT NULL)",
                doomed,
            ).rowcount
            conn.execute("DELETE FROM conversation_deletions")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    result.deleted += doomed


@contextlib.contextmanager
def _connect(location: Path | str) -> Iterator[Any]:
    """A connection of its own to the SQLite file or the PostgreSQL database, closed after."""
    if is_postgres_url(location):
        conn = postgres_backend().connect(str(location), application_name="cursor-byok conversations")
    else:
        conn = sqlite3.connect(location, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA foreign_keys = ON")
    try:
        yield conn
    finally:
        conn.close()


def _delete(path: Path | str, ids: Sequence[str]) -> Deletion:
    result = Deletion()
    with _connect(path) as conn:
        for start in range(0, len(ids), _BATCH):
            _delete_batch(conn, ids[start : start + _BATCH], result)
    return result


def _prune(path: Path | str, older_than_ms: int) -> Deletion:
    """Root conversations last updated before `older_than_ms`, oldest first, a batch at a time."""
    result = Deletion()
    after: tuple[int, str] = (-1, "")
    with _connect(path) as conn:
        while True:
            rows = conn.execute(
                "SELECT updated_at_ms, conversation_id FROM conversations "
                "WHERE updated_at_ms < ? AND (updated_at_ms, conversation_id) > (?, ?) "
                "AND parent_conversation_id IS NULL ORDER BY updated_at_ms, conversation_id LIMIT ?",
                (older_than_ms, *after, _BATCH),
            ).fetchall()
            if not rows:
                return result
            _delete_batch(conn, [r[1] for r in rows], result)
            after = (rows[-1][0], rows[-1][1])


async def delete_conversations(path: Path | str, conversation_ids: Sequence[str]) -> Deletion:
    """Delete these conversations and their sub-task conversations (the database, a SQLite file or
    a postgresql:// url, must exist and be migrated: open a Store on it first)."""
    return await asyncio.to_thread(_delete, _location(path), list(conversation_ids))


async def prune_conversations(path: Path | str, older_than_ms: int) -> Deletion:
    """Delete every root conversation (with its sub-tasks) not updated since `older_than_ms`."""
    return await asyncio.to_thread(_prune, _location(path), older_than_ms)


def _location(path: Path | str) -> Path | str:
    return path if is_postgres_url(path) else Path(path)


__all__ = ["Deletion", "delete_conversations", "prune_conversations"]
