"""The store's machinery shared by every record family: opening, the write queue, reads, closing.

Writes are synchronous enqueue calls that return an `asyncio.Future` resolved after the write's
transaction has committed. A caller that must not acknowledge something before it is durable (a
frame to the client, a tool result) awaits the future; everyone else lets it go. Everything
enqueued during one pass of the event loop is handed to the writer thread as one list, and the
thread commits whatever has accumulated as ONE transaction (see writer.py).

Durability: with `synchronous=NORMAL` (default) a committed transaction is in the WAL file when
its future resolves, so it survives the process being killed (`kill -9`, OOM); only an OS crash or
power loss can drop the last few transactions. `synchronous=FULL` also fsyncs each commit.

A write nobody waits for and nothing needs soon (a run's start records) may be queued `later`: it
is handed over with the next write that is, or after `LATER_SECONDS` at most, so it shares that
write's commit instead of adding one; queued after a turn's input, it stays out of the commit the
model request waits for.

A write someone is about to wait on (`hand_over_now`) is committed by the loop itself when the
store's threads are idle (nothing handed over is uncommitted, no read outstanding) and the batch
is small, however soon after its previous commit: no hand-over to the thread and back (a queue
put, the thread's wake-up, the interpreter lock passed back and forth, the loop's wake-up: on the
thread a start's commit cost ~0.55 ms of CPU, its SQL ~0.3), and its future resolves in the same
step. At most one such commit per pass of the loop: the starts of a burst that arrive in one pass
still share commits on the thread, and while the thread commits them, later ones join its next
batch. Another process's write lock sends the writes to the thread too (it waits for the lock; the
loop never does).

Reads run on their own thread and connection (WAL readers never block the writer): a
conversation's history when its runtime loads, recovery and the CLI. Every one is an indexed
lookup or range, so none grows with the size of the database. A new turn's path needs none for a
fresh request id or a new conversation (stored_ids.py); the binding of any other request id memory
does not hold, and whether another conversation has anything stored, are primary-key lookups the
loop makes itself (`_read_now`) when the store's threads are idle, on the writer's connection: a
thread round trip costs more than the read, and that connection's page cache holds what the last commits wrote (a connection of its own
would find its cache stale after every commit and read the pages again). It never waits for a lock
(busy timeout 0); whatever it cannot answer at once goes to the reader thread.

On PostgreSQL (a `postgresql://` url, postgres/) the writer and reader threads each hold a psycopg
connection instead, and the loop never uses a connection itself: every commit and read is a network
round trip, which the threads make while the loop goes on.
"""
from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from .bindings import DEFAULT_CAPACITY
from .checkpointer import Checkpointer
from .connection import check_sqlite_version, connect, open_writer, prepare_writer
from .errors import FlushError, StoreClosedError, StoreError, WriteFailedError
from .migrations import MIGRATIONS, Migration, stored_version
from .ops import Barrier, WriteOp
from .reader import ReaderThread
from .records import Synchronous
from .writer import BatchOutcome, Failed, WriterThread

log = logging.getLogger("cursor_byok.store")
T = TypeVar("T")
# The largest batch the loop commits itself: a few run starts' records, not a backlog.
LOOP_COMMIT_MAX_OPS = 64
# How long a write queued `later` may wait for another to share its commit.
LATER_SECONDS = 0.2
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
Self = TypeVar("Self", bound="StoreCore")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class StoreStats(msgspec.Struct):
    """Writer counters, for tests, benchmarks and `doctor`."""

    batches: int = 0  # batches taken from the queue
    transactions: int = 0  # write transactions committed
    writes: int = 0  # writes committed
    failed_writes: int = 0
    isolation_replays: int = 0  # failed batches replayed one write per transaction
    loop_commits: int = 0  # transactions the event loop committed itself (writer idle)


def _mark_retrieved(future: asyncio.Future[Any]) -> None:
    # The failure is logged and reported by flush(); a fire-and-forget caller must not also
    # get "Future exception was never retrieved" noise at garbage collection.
    if not future.cancelled():
        future.exception()


def is_postgres_url(location: object) -> bool:
    """A PostgreSQL connection url (libpq's schemes), not a SQLite file's path."""
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


def postgres_backend() -> Any:
    """The PostgreSQL backend, imported on first use (psycopg is in the `team` extra)."""
    try:
        from . import postgres
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "psycopg":
            raise
        raise StoreError(
            "a postgresql:// store url needs psycopg, which is not installed: pip install 'cursor-byok[team]'"
        ) from exc
    return postgres


SQLiteConnections = tuple[sqlite3.Connection | None, int, sqlite3.Connection, sqlite3.Connection | None]


def _open_sqlite(
    path: Path, sync: Synchronous, busy_timeout_ms: int, migrations: Sequence[Migration], read_only: bool
) -> SQLiteConnections:
    """The writer (migrating the schema first), its schema version, the reader and the checkpoints'
    connections; `read_only`: the reader alone."""
    if read_only:
        reader = connect(path, synchronous=sync, busy_timeout_ms=busy_timeout_ms, read_only=True)
        try:
            return None, stored_version(reader, migrations, path=str(path)), reader, None
        except BaseException:
            reader.close()
            raise
    opened: list[sqlite3.Connection] = []
    try:
        writer, version = open_writer(path, synchronous=sync, busy_timeout_ms=busy_timeout_ms, migrations=migrations)
        opened.append(writer)
        opened.append(connect(path, synchronous=sync, busy_timeout_ms=busy_timeout_ms, read_only=True))
        opened.append(connect(path, synchronous=sync, busy_timeout_ms=0, read_only=False))  # checkpoints
    except BaseException:
        for conn in opened:
            conn.close()
        raise
    return writer, version, opened[1], opened[2]


class StoreCore:
    """Create with `await Store.open(path)`; end with `await close()`."""

    def __init__(
        self,
        *,
        path: Path | None,
        location: str,
        writer: Any,
        reader: Any,
        checkpoints: sqlite3.Connection | None,
        clock: Callable[[], int],
        max_batch_ops: int,
        schema_version: int,
        synchronous: Synchronous,
        busy_timeout_s: float = 0.0,
    ) -> None:
        self.path = path  # the SQLite file; None on PostgreSQL
        self.location = location  # what messages name: the file, or the url without its password
        self.schema_version = schema_version
        self.synchronous = synchronous  # as read back from the writer connection
        self.stats = StoreStats()
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        self._outbox: list[WriteOp] = []  # enqueued, not yet handed over
        self._due = False  # a hand-over is scheduled for this pass of the loop
        self._later: asyncio.TimerHandle | None = None  # the hand-over of writes queued `later`
        self._in_flight = 0  # ops handed to the writer thread and not yet delivered back
        self._committed_this_pass = False  # the loop has committed itself in this pass of the loop
        self._unreported: list[WriteFailedError] = []
        self._closing = False
        self._closed = False
        self._writer_stopped: asyncio.Future[BaseException | None] = self._loop.create_future()
        self._writer = None if writer is None else WriterThread(
            writer, max_batch_ops=max_batch_ops, deliver=self._deliver, stopped=self._on_writer_stopped,
            name=f"store-writer:{location}", busy_timeout_s=busy_timeout_s, embedded=path is not None,
        )
        self._reader = ReaderThread(reader, name=f"store-reader:{location}")
        self._checkpointer = None
        if checkpoints is not None and self._writer is not None and path is not None:
            self._checkpointer = Checkpointer(
                checkpoints, self._writer, wal=path.with_name(path.name + "-wal"), name=f"store-checkpoints:{path}"
            )

    # ----------------------------------------------------------------------------- lifecycle

    @classmethod
    async def open(
        cls: type[Self],
        path: Path | str,
        *,
        synchronous: Synchronous | str = Synchronous.NORMAL,
        busy_timeout_ms: int = 5_000,
        max_batch_ops: int = 2_048,
        clock: Callable[[], int] | None = None,
        migrations: Sequence[Migration] = MIGRATIONS,
        read_only: bool = False,
        binding_cache: int = DEFAULT_CAPACITY,
        trace: Callable[[str], None] | None = None,
    ) -> Self:
        """Open (creating it and its parent dirs if needed) and migrate the database at `path`, or
        the PostgreSQL database of a `postgresql://` url (see postgres/__init__.py).

        Raises SchemaTooNewError for a database written by a newer release and MigrationError
        if a migration fails (that migration is rolled back; earlier ones stay).
        `migrations` exists for upgrade tests and tooling; the server uses the default.
        `read_only`: the read connection only (no migrations, no writer thread), for reading a
        database another process owns; every write raises StoreClosedError.
        `binding_cache`: how many request bindings memory keeps beyond those being written.
        `trace`: called with every SQL statement either connection runs, on its thread (for tests
        and tooling).
        """
        if max_batch_ops < 1:
            raise ValueError("max_batch_ops must be at least 1")
        sync = Synchronous(synchronous.upper() if isinstance(synchronous, str) else synchronous)
        if is_postgres_url(path):
            url = str(path)
            backend = postgres_backend()
            writer, version, reader = await asyncio.to_thread(
                backend.open_connections, url, migrations=migrations, read_only=read_only
            )
            checkpoints, file, location, busy_timeout_s = None, None, backend.redacted(url), 0.0
        else:
            check_sqlite_version()
            file = Path(path).expanduser()
            file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            writer, version, reader, checkpoints = await asyncio.to_thread(
                _open_sqlite, file, sync, busy_timeout_ms, migrations, read_only
            )
            location = str(file)
            busy_timeout_s = 0.0 if writer is None else prepare_writer(writer)
        if trace is not None:
            for conn in (writer, reader, checkpoints):
                if conn is not None:
                    conn.set_trace_callback(trace)
        return cls(
            path=file, location=location, busy_timeout_s=busy_timeout_s, writer=writer, reader=reader,
            checkpoints=checkpoints, clock=clock or now_ms, max_batch_ops=max_batch_ops,
            schema_version=version, synchronous=sync, binding_cache=binding_cache,
        )

    async def __aenter__(self: Self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closing

    async def flush(self) -> None:
        """Wait until every write queued before this call has committed or failed.

        Raises FlushError listing the writes that failed since the previous flush (whether or
        not their futures were awaited); each failure was also logged when it happened.
        """
        errors = await self._enqueue(Barrier())
        if errors:
            raise FlushError(errors)

    async def close(self) -> None:
        """Commit everything queued, stop the writer and close both connections. Idempotent.
        Failed writes are logged, not raised, here."""
        if self._closed:
            return
        self._closing = True
        try:
            if self._writer is not None:
                self._hand_over()
                self._writer.stop()
                error = await self._writer_stopped
                if error is not None:
                    log.error("store writer of %s had stopped with an error: %r", self.location, error)
        finally:
            self._closed = True
            if self._checkpointer is not None:
                await asyncio.to_thread(self._checkpointer.stop)
            await self._reader.close()

    # ---------------------------------------------------------------------------- internals

    def _check_open(self) -> None:
        if self._closing:
            raise StoreClosedError(f"store {self.location} is closed")

    async def _read_job(self, job: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StoreClosedError(f"store {self.location} is closed")
        return await self._reader.call(job)

    async def _read(self, sql: str, params: Sequence[Any]) -> list[Any]:
        return await self._read_job(lambda conn: conn.execute(sql, params).fetchall())

    def _read_now(self, sql: str, params: Sequence[Any]) -> list[Any] | None:
        """An indexed read made on the loop, at once; None if it cannot be made without waiting or
        a store thread is busy (read it on the reader thread instead)."""
        writer = self._writer
        if writer is None or self._closing or not self._threads_idle():
            return None
        return writer.try_read(sql, params)

    def _threads_idle(self) -> bool:
        """Neither store thread has work from us. Only then does the loop use SQLite itself: each
        call lets go of the interpreter lock, and a busy thread could keep it for up to the
        interpreter's switch interval before the loop gets it back (and writes handed to the
        writer must commit first, in order)."""
        return self._in_flight == 0 and self._reader.waiting == 0

    def _check_writable(self) -> None:
        self._check_open()
        if self._writer is None:
            raise StoreClosedError(f"store {self.location} is open read-only")

    def _enqueue(self, op: WriteOp, *, later: bool = False) -> asyncio.Future[Any]:
        """Queue `op`; it is handed over at the end of this pass of the loop, or, `later`, with the
        next write that is (at most `LATER_SECONDS` on)."""
        if self._closing or self._writer is None:
            self._check_writable()  # raises
        future: asyncio.Future[Any] = self._loop.create_future()
        op.future = future
        self._outbox.append(op)
        if self._due:
            return future  # it goes with this pass's hand-over
        if not later:
            self._due = True
            self._loop.call_soon(self._hand_over_due)
        elif self._later is None:
            self._later = self._loop.call_later(LATER_SECONDS, self._hand_over)
        return future

    def _hand_over_due(self) -> None:
        if self._due:  # not taken already by hand_over_now
            self._hand_over()

    def _taken(self) -> None:
        """The outbox has been handed over (or committed): nothing is scheduled for it any more."""
        self._outbox = []
        self._due = False
        if self._later is not None:
            self._later.cancel()
            self._later = None

    def hand_over_now(self) -> None:
        """Hand what is queued to the writer now, not after the callbacks ahead of the usual hand-over:
        for a write someone is about to wait on, the writer is awake and starts the moment the loop
        lets it (the writes queued so far share its commit; later ones take the next). When the
        store's threads are idle, the loop commits them itself, at once (see the module's docstring)."""
        ops = self._outbox
        writer = self._writer
        if (
            ops and writer is not None and not self._committed_this_pass and self._threads_idle()
            and len(ops) <= LOOP_COMMIT_MAX_OPS
        ):
            outcome = writer.try_commit(ops)
            if outcome is not None:
                self._taken()
                self._committed_this_pass = True
                self._loop.call_soon(self._pass_over)
                self.stats.loop_commits += outcome.transactions
                self._in_flight += len(ops)
                self._deliver(ops, outcome)
                return
        self._hand_over()

    def _pass_over(self) -> None:
        self._committed_this_pass = False

    def _hand_over(self) -> None:
        ops = self._outbox
        self._taken()
        if ops:
            assert self._writer is not None  # only writable stores enqueue
            self._in_flight += len(ops)
            self._writer.submit(ops)

    def _deliver(self, batch: list[WriteOp], outcome: BatchOutcome) -> None:
        """On the loop, after the batch's commit: resolve every op's future."""
        stats = self.stats
        self._in_flight -= len(batch)
        stats.batches += 1
        stats.transactions += outcome.transactions
        if self._checkpointer is not None:
            self._checkpointer.committed(outcome.transactions)
        stats.isolation_replays += outcome.replayed
        results = outcome.results
        written = 0  # the results are the writes', Barriers have none
        for op in batch:
            future = op.future
            if isinstance(op, Barrier):
                reported, self._unreported = self._unreported, []
                if not future.done():
                    future.set_result(reported)
                continue
            result = results[written]
            written += 1
            if result.__class__ is Failed:  # final: no subclass to ask isinstance about
                op.failed()
                stats.failed_writes += 1
                self._unreported.append(result.error)
                log.error("store write failed: %s", result.error)
                if not future.done():
                    future.set_exception(result.error)
                    _mark_retrieved(future)
            else:
                value = op.committed(result)
                stats.writes += 1
                if not future.done():  # the waiter may have been cancelled; the write stands
                    future.set_result(value)

    def _on_writer_stopped(self, error: BaseException | None, unprocessed: list[WriteOp]) -> None:
        # Stopped by close(), or by a bug: never leave a caller waiting on a future nobody will
        # resolve.
        self._closing = True
        unprocessed += self._outbox
        self._taken()
        reason = StoreClosedError(f"store writer stopped: {error!r}" if error else f"store {self.location} is closed")
        for op in unprocessed:
            if not op.future.done():
                op.future.set_exception(reason)
                _mark_retrieved(op.future)
        if not self._writer_stopped.done():
            self._writer_stopped.set_result(error)
