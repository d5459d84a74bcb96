"""The write side: one thread that owns the write connection and commits batches of queued writes.

Group commit: the event loop hands over everything enqueued in one pass of the loop as one list;
the thread folds every list that arrived while it was committing into its next batch (up to
`max_batch_ops`), runs that batch as ONE transaction (BEGIN IMMEDIATE, probe, rows, COMMIT, all
on the standard `sqlite3` module, no hop per statement) and hands the outcome back to the loop
with one `call_soon_threadsafe`. So the runs that start in the same instant share one commit, and
each costs the loop one handover and one wake-up, whatever the batch holds.

If a batch's transaction fails, it is replayed one write per transaction so a bad write fails
alone. Futures are resolved on the loop, after the commit, by whoever receives the outcome.

The loop may commit a small batch itself (`try_commit`) when nothing it handed over is still
uncommitted: the connection's lock keeps the thread and the loop off it at the same time. The
connection never waits for another process's write lock (busy timeout 0): the loop's attempt gives
up at once, and the thread retries its BEGIN until the store's busy timeout has passed. Nor does
it checkpoint in a COMMIT (SQLite's automatic checkpoint is off): checkpoints run on their own
thread (checkpointer.py), which asks for one here between two transactions only when the WAL stays
long (`checkpoint_soon`).
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, final

import msgspec

from .errors import ConstraintViolation, DatabaseError, WriteFailedError
from .ops import PROBE_BINDINGS, PROBE_EVENT_IDS, PROBE_SEQS, Barrier, BatchContext, Probe, Statement, WriteOp, group_statements
from .thread_names import name_this_thread

log = logging.getLogger("cursor_byok.store")

# What a batch that needs no probe reads (it is only ever read).
NOTHING_PROBED = Probe({}, {}, {})
# Per-conversation seq counters are a cache of the conversations written lately (a miss costs one
# indexed probe); bounded, so idle conversations hold nothing here.
SEQ_CACHE_LIMIT = 1024


@final
class Failed:
    """The outcome of a write that could not be committed."""

    __slots__ = ("error",)

    def __init__(self, error: WriteFailedError) -> None:
        self.error = error


class BatchOutcome(msgspec.Struct):
    results: list[Any] = msgspec.field(default_factory=list)  # per non-Barrier op: planned value or Failed
    transactions: int = 0  # committed
    replayed: bool = False  # the batch failed as a whole and was replayed one write at a time


Deliver = Callable[[list[WriteOp], BatchOutcome], None]
Stopped = Callable[[BaseException | None, list[WriteOp]], None]


class WriterThread:
    """`submit` hands a list of ops over (from the loop thread); `deliver(batch, outcome)` is called
    on the loop for every batch, in order; `stopped(error, unprocessed)` once, at the end."""

    def __init__(
        self, conn: Any, *, max_batch_ops: int, deliver: Deliver, stopped: Stopped, name: str,
        busy_timeout_s: float = 0.0, embedded: bool = True,
    ) -> None:
        """`conn`: a sqlite3 connection set up by `connection.prepare_writer` (whose busy timeout is
        `busy_timeout_s`), or the PostgreSQL backend's (`embedded` False), which waits for locks
        itself, is never used on the loop (a commit there is a network round trip) and whose
        database other servers write too (no seq counter is taken from memory)."""
        self._conn = conn
        self._max_batch_ops = max_batch_ops
        self._deliver = deliver
        self._stopped = stopped
        self._loop = asyncio.get_running_loop()
        self._inbox: queue.SimpleQueue[list[WriteOp] | None] = queue.SimpleQueue()
        self._seq_cache: dict[str, tuple[int, int]] = {}  # used under _conn_lock
        self._conn_lock = threading.Lock()  # whoever uses the connection: the thread or the loop
        self._busy_timeout_s = busy_timeout_s
        self._embedded = embedded
        # A network connection sends a transaction's statements without waiting for each answer
        # (PostgreSQL's pipeline: BEGIN and the probes in one round trip, the rows in another, then
        # COMMIT); SQLite's calls are function calls.
        self._round_trips: Callable[[], contextlib.AbstractContextManager[Any]] = getattr(conn, "pipeline", contextlib.nullcontext)
        self._checkpoint: Callable[[sqlite3.Connection], None] | None = None  # asked for by it
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def submit(self, ops: list[WriteOp]) -> None:
        self._inbox.put(ops)

    def try_commit(self, batch: list[WriteOp]) -> BatchOutcome | None:
        """On the loop, with nothing handed over still uncommitted: commit `batch` as one transaction
        now, if the connection is free and the database's write lock can be had without waiting.
        None (nothing written): hand the batch to the thread, which waits for the lock and isolates
        a bad write."""
        if not self._embedded or not self._conn_lock.acquire(blocking=False):
            return None  # the thread is using the connection (a batch, or a checkpoint asked of it)
        try:
            outcome = BatchOutcome()
            writes = [op for op in batch if not isinstance(op, Barrier)]
            if writes:
                outcome.results = self._transaction(writes, wait=False)
                outcome.transactions = 1
        except Exception:
            return None
        finally:
            self._conn_lock.release()
        return outcome

    def try_read(self, sql: str, params: Sequence[Any]) -> list[Any] | None:
        """On the loop, with nothing handed over still uncommitted: the rows of one indexed read, made
        on this connection now if it is free (its page cache holds what the last commits wrote); None
        if it is not, or the read cannot be made without waiting."""
        if not self._embedded or not self._conn_lock.acquire(blocking=False):
            return None
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error:
            return None
        finally:
            self._conn_lock.release()

    def counts_from_zero(self, conversation_id: str) -> None:
        """From the loop, with nothing handed over still uncommitted: nothing of this conversation is
        stored, so its counters start at zero without a probe. The embedded store only: it alone
        writes its database's events."""
        if self._embedded:
            self._seq_cache.setdefault(conversation_id, (0, 0))

    def checkpoint_soon(self, run: Callable[[sqlite3.Connection], None]) -> None:
        """From any thread: `run(connection)` before the next batch, no commit beside it."""
        self._checkpoint = run
        self._inbox.put([])

    def stop(self) -> None:
        """Commit everything submitted before this call, then close the connection."""
        self._inbox.put(None)

    # -- the thread -----------------------------------------------------------------------------
    def _run(self) -> None:
        name_this_thread("store-writer")
        pending: collections.deque[WriteOp] = collections.deque()
        batch: list[WriteOp] = []
        error: BaseException | None = None
        stopping = False
        try:
            while True:
                if not pending and not stopping:
                    stopping = self._take(pending, self._inbox.get())
                while not stopping:  # fold in whatever else has arrived
                    try:
                        item = self._inbox.get_nowait()
                    except queue.Empty:
                        break
                    stopping = self._take(pending, item)
                if self._checkpoint is not None:
                    run, self._checkpoint = self._checkpoint, None
                    with self._conn_lock:
                        run(self._conn)
                if pending:
                    batch = [pending.popleft() for _ in range(min(len(pending), self._max_batch_ops))]
                    with self._conn_lock:
                        outcome = self._commit(batch)
                    self._post(self._deliver, batch, outcome)
                    batch = []
                if stopping and not pending:
                    return
        except BaseException as exc:  # a bug: report it and hand back what was not done
            error = exc
        finally:
            unprocessed = [*batch, *pending]
            while True:
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    break
                unprocessed.extend(item or ())
            self._conn.close()
            self._post(self._stopped, error, unprocessed)

    @staticmethod
    def _take(pending: collections.deque[WriteOp], item: list[WriteOp] | None) -> bool:
        if item is None:
            return True
        pending.extend(item)
        return False

    def _post(self, callback: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            pass  # the event loop is gone: nobody is waiting any more

    def _commit(self, batch: list[WriteOp]) -> BatchOutcome:
        writes = [op for op in batch if not isinstance(op, Barrier)]
        outcome = BatchOutcome()
        if not writes:
            return outcome
        try:
            outcome.results = self._transaction(writes)
            outcome.transactions = 1
        except Exception as exc:
            if len(writes) == 1:
                outcome.results = [Failed(WriteFailedError(writes[0].describe(), exc))]
                return outcome
            # Find the bad write(s): replay one per transaction so the others commit.
            outcome.replayed = True
            for op in writes:
                try:
                    outcome.results.extend(self._transaction([op]))
                    outcome.transactions += 1
                except Exception as single_exc:
                    outcome.results.append(Failed(WriteFailedError(op.describe(), single_exc)))
        return outcome

    def _begin(self, wait: bool) -> None:
        """BEGIN IMMEDIATE; `wait`: while another connection holds the write lock, retry until the
        busy timeout has passed (as SQLite's busy handler would, with the interpreter lock let go)."""
        deadline: float | None = None  # read off the clock only once the lock is found taken
        pause = 0.001
        while True:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if deadline is None:
                    deadline = time.monotonic() + self._busy_timeout_s
                left = deadline - time.monotonic()
                if not wait or exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or left <= 0:
                    raise
                time.sleep(min(pause, left))
                pause = min(pause * 2, 0.05)

    def _transaction(self, ops: list[WriteOp], *, wait: bool = True) -> list[Any]:
        """Run `ops` in one transaction; returns each op's planned result (or Failed for an op that
        refused to plan). Raises, with everything rolled back, if the transaction fails.

        The events' ids are not looked up first: a new event's insert is its own check (an id is
        unique in its conversation), and events are new but for a replay. Only a transaction whose
        insert that check refuses runs again, with the ids looked up (a repeat is then a duplicate),
        and with the seq counters read again: on a shared PostgreSQL database another server may
        have taken the next seq of a conversation this one wrote before (its insert is refused)."""
        try:
            return self._attempt(ops, wait, look_up_events=False)
        except (sqlite3.IntegrityError, ConstraintViolation):
            if not any(op.event_keys() or op.seq_conversations() for op in ops):
                raise
        return self._attempt(ops, wait, look_up_events=True)

    def _attempt(self, ops: list[WriteOp], wait: bool, *, look_up_events: bool) -> list[Any]:
        conn = self._conn
        try:
            with self._round_trips():
                self._begin(wait)
                ctx, results, statements = self._plan(ops, self._probe(ops, look_up_events))
                for sql, rows in group_statements(statements):
                    conn.executemany(sql, rows)
            # Sent once every row is in, not queued behind them: a server that holds the rows up
            # (another's lock) and outlives this process must find no COMMIT waiting.
            conn.execute("COMMIT")
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except (sqlite3.Error, DatabaseError):
                pass  # SQLite already rolled back (e.g. after SQLITE_FULL)
            # Re-probe these conversations next time rather than trust counters the failed
            # transaction may have disagreed with.
            for op in ops:
                for conversation_id in op.seq_conversations():
                    self._seq_cache.pop(conversation_id, None)
            raise
        if self._embedded:
            # Only the embedded store's counters are kept between transactions: other servers write
            # a shared database, so there they are read in every transaction (the cache stays empty;
            # a checkpoint's default `through_event_seq` must count their events too).
            cache = self._seq_cache
            ctx.commit_into(cache)
            while len(cache) > SEQ_CACHE_LIMIT:
                del cache[next(iter(cache))]  # the least recently written
        return results

    def _probe(self, ops: list[WriteOp], look_up_events: bool) -> Probe:
        cache = self._seq_cache
        missing: set[str] = set()  # conversations whose counters are not cached
        keys: list[tuple[str, str]] = []
        request_ids: list[str] = []
        for op in ops:
            if not op.keyed:
                continue
            for conversation_id in op.seq_conversations():
                if conversation_id not in cache:
                    missing.add(conversation_id)
            if look_up_events:
                keys.extend(op.event_keys())
            request_ids.extend(op.binding_keys())
        if not (missing or keys or request_ids):
            return NOTHING_PROBED  # a start's transaction, as a rule: its counters and bindings are known
        # Every probe is sent before any is read: one round trip for all on a pipelined connection.
        execute, encode = self._conn.execute, msgspec.json.encode
        seq_rows = execute(PROBE_SEQS, (encode(missing).decode(),)) if missing else ()
        event_rows = execute(PROBE_EVENT_IDS, (encode(keys).decode(),)) if keys else ()
        binding_rows = execute(PROBE_BINDINGS, (encode(request_ids).decode(),)) if request_ids else ()
        return Probe(
            {str(r[0]): (int(r[1]), int(r[2])) for r in seq_rows},
            {(str(r[0]), str(r[1])): int(r[2]) for r in event_rows},
            {str(r[0]): str(r[1]) for r in binding_rows},
        )

    def _plan(self, ops: list[WriteOp], probe: Probe) -> tuple[BatchContext, list[Any], list[Statement]]:
        refused: dict[int, Failed] = {}
        while True:
            ctx = BatchContext(self._seq_cache, probe)
            statements: list[Statement] = []
            results: list[Any] = []
            for index, op in enumerate(ops):
                if index in refused:
                    results.append(refused[index])
                    continue
                try:
                    results.append(op.plan(ctx, statements))
                except Exception as exc:
                    # Plan again without it, from a clean context.
                    refused[index] = Failed(WriteFailedError(op.describe(), exc))
                    break
            else:
                return ctx, results, statements
