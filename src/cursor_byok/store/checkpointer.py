"""WAL checkpoints on their own thread and connection, so that no commit ever runs one.

SQLite's automatic checkpoint runs inside the COMMIT that takes the WAL past its threshold: copying
some thousand pages into the database file and syncing it there (1–4 ms of CPU, more of wall time)
held up every write queued behind that commit, a turn's input among them. A PASSIVE checkpoint on
another connection runs beside the writer (it takes no write lock) and copies what no reader still
needs; the writer's connection has the automatic one off.

The WAL starts over from its beginning only when a write begins after a checkpoint has copied all of
it, which one running beside a steady stream of commits may never have done (a write that began
before it ended goes on appending): when the WAL is long and has not started over since the
previous checkpoint (or this thread lags behind the commits), the writer is asked to run one itself
between two of its transactions (most of the WAL is copied by then, so the writes queued meanwhile
wait briefly), and its next write starts the WAL over. A long WAL that did start over needs no such
help: it is what the commits between two checkpoints wrote. Starting over keeps the WAL's file (up
to the writer's size limit): writing into its blocks again costs a commit less than growing a file
cut back to nothing.
"""
from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

from .thread_names import name_this_thread
from .writer import WriterThread

log = logging.getLogger("cursor_byok.store")

# Commits between checkpoints: a new conversation's start writes ~24 pages (with the run records of
# the start before it), a journaled append's 2, so the WAL holds up to ~3,000 pages between two
# (SQLite's own threshold is 1,000). A checkpoint copies each page once however often the commits
# since the previous one rewrote it (the tables' last leaves, their parents, the header page): every
# 128 commits rather than 48, held new-conversation starts cost the checkpoint and writer threads
# ~20 µs less CPU each, and ~8 KB less written.
COMMITS_PER_CHECKPOINT = 128
# The WAL's pages (when it has not started over since the previous checkpoint), or commits since the
# WAL was last short (this thread may lag under load), beyond which the writer runs one itself.
WAL_LIMIT_PAGES = 3000
WAL_LIMIT_COMMITS = 2 * COMMITS_PER_CHECKPOINT


class Checkpointer:
    """`committed(n)` on the loop after each batch; `stop()` ends the thread, which closes the connection."""

    def __init__(self, conn: sqlite3.Connection, writer: WriterThread, *, wal: Path, name: str) -> None:
        self._conn = conn
        self._wal = wal  # the WAL's file
        self._generation = wal_generation(wal)  # the WAL's, at the previous checkpoint
        self._writer = writer
        self._running = threading.Lock()  # one checkpoint at a time: another would fail (busy)
        self._wake = threading.Event()
        self._stopping = False
        self._commits = 0  # since the last wake-up
        self._since_short = 0  # commits since a checkpoint left the WAL short
        self._writer_asked = False
        self._left_to_start_over = False  # the previous checkpoint copied all of a long WAL
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def committed(self, transactions: int) -> None:
        self._commits += transactions
        self._since_short += transactions
        if self._commits >= COMMITS_PER_CHECKPOINT:
            self._commits = 0
            self._wake.set()
        if self._since_short >= WAL_LIMIT_COMMITS:
            self._ask_writer()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join()

    def _run(self) -> None:
        name_this_thread("store-checkpts")
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                wal = run_now(self._conn, self._running)
                if wal is None:
                    continue
                pages, copied = wal
                generation, self._generation = self._generation, wal_generation(self._wal)
                if pages < WAL_LIMIT_PAGES or generation != self._generation:  # short, or started over since
                    self._since_short = 0
                    self._left_to_start_over = False
                elif copied >= pages and not self._left_to_start_over:
                    self._since_short = 0  # all copied: its next write starts it over, unless one had begun
                    self._left_to_start_over = True
                else:
                    self._ask_writer()
        finally:
            self._conn.close()

    def _ask_writer(self) -> None:
        if not self._writer_asked:
            self._writer_asked = True
            self._writer.checkpoint_soon(self._on_writer)

    def _on_writer(self, conn: sqlite3.Connection) -> None:
        """On the writer's thread, its connection held: no commit beside this checkpoint, so it
        copies the whole WAL and, unless a reader still uses it, the writer's next write starts the
        WAL over (RESTART, which waits for no one on this connection: its busy timeout is 0)."""
        run_now(conn, self._running, "RESTART")
        self._since_short = 0
        self._left_to_start_over = False
        self._writer_asked = False


def run_now(conn: sqlite3.Connection, running: threading.Lock, mode: str = "PASSIVE") -> tuple[int, int] | None:
    """A checkpoint (PASSIVE: copies what no reader still needs, waits for no writer): the WAL's
    pages and how many of them are copied; None if it could not run."""
    with running:
        try:
            _, pages, copied = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        except sqlite3.Error as exc:  # e.g. another process checkpointing: the next one catches up
            log.warning("WAL checkpoint skipped: %s", exc)
            return None
    return int(pages), int(copied)


def wal_generation(wal: Path) -> bytes:
    """What changes each time the WAL starts over: its header's checkpoint count and first salt."""
    try:
        with wal.open("rb") as file:
            return file.read(20)[12:20]
    except OSError:
        return b""
