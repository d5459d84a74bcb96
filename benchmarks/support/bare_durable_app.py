"""The durable floor of the turn-start benchmarks: the floor (`bare_turn_app`) plus the one thing every
correct turn start must do before the model is called, make the turn's input durable. For a run
request, before its provider task is made (so before its POST), one SQLite commit on the loop
thread: the append's AgentClientMessage bytes as received (what ours journals as the run request's
row) inserted with its request id as the key, in autocommit (the INSERT is its own transaction).
Nothing else: no other row, no reads, no writer thread, no checkpointer (SQLite's own automatic
checkpoint runs inside the commit that takes the WAL past 1,000 pages, on the loop).

The file is BENCH_DURABLE_DB (the harness makes it in a temp dir), opened on the first run request
(in the worker's loop, as the floor's provider session) in WAL mode with synchronous=NORMAL, ours'
settings. It is this app's alone: a write lock held by anyone else is an error, not a wait, and a
failed commit fails the append (granian answers 500) with no provider request.

Follow-up appends are not journaled: the floor does nothing with them either.

`/journal` (any method) answers "<commits> <loop CPU ns in them>": the commits' own CPU (the
thread's clock around each), read by the benchmark before and after its held starts.
"""
from __future__ import annotations

import os
import sqlite3
import time

from benchmarks.support.bare_app import HEADERS
from benchmarks.support.bare_turn_app import forward_frames, turn_app
from cursor_byok.protocol import BidiAppend, end_stream_ok

DB_ENV = "BENCH_DURABLE_DB"
INSERT = "INSERT INTO appends (request_id, message) VALUES (?, ?)"


class SqliteJournal:
    """A run request's append committed to its own row; the commits' count and CPU kept."""

    path = "/journal"

    def __init__(self) -> None:
        self._db: sqlite3.Connection | None = None
        self.commits = 0
        self.cpu_ns = 0

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(os.environ[DB_ENV], isolation_level=None, timeout=0)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute("CREATE TABLE IF NOT EXISTS appends (request_id TEXT PRIMARY KEY, message BLOB NOT NULL)")
        return db

    def commit(self, append: BidiAppend) -> None:
        started = time.thread_time_ns()
        if self._db is None:
            self._db = self._open()
        self._db.execute(INSERT, (append.request_id, append.raw))
        self.commits += 1
        self.cpu_ns += time.thread_time_ns() - started

    def stats(self) -> bytes:
        return f"{self.commits} {self.cpu_ns}".encode()


app = turn_app(forward_frames, HEADERS, end_stream_ok(), SqliteJournal())
