"""A turn start's SQLite work, against the durable floor's one insert, in a fresh database and in one
grown by thousands of turns.

    .venv/bin/python -m pytest -q -s -p no:randomly benchmarks/test_store_start_sql.py
    # another checkout's store, for a before/after pair (its schema: the grown file is built per run)
    PYTHONPATH=/path/to/old-checkout/src .venv/bin/python -m pytest -q -s -p no:randomly benchmarks/test_store_start_sql.py

- **ours**: the real `Store`, driven as a server's runtime drives it when its threads are idle: the
  request id's binding looked up and a new conversation's history (both known absent without SQL),
  the append's journal row, a new conversation's row, the user's input (a 2,000-word message) awaited,
  committed on the loop by `hand_over_now`; the run's records (the request's binding, the run's row)
  queued `later` as one write, so they share the next start's commit (as held starts do in the server).
- **durable**: `benchmarks/support/bare_durable_app.SqliteJournal`, the floor app's one autocommitted
  INSERT of the run request's bytes (WAL, synchronous=NORMAL), on a connection of its own.

Both write the same run request's bytes. Per start, taken on the loop thread (`time.thread_time`):
the CPU of the commit that makes the input durable (ours: `hand_over_now`; durable: the INSERT),
and of everything the start asked of the store (ours: the enqueue calls too). Per commit: the pages
it wrote (WAL frames, from the WAL index's header), and per start the statements SQLite ran (a trace
callback, in a pass of its own: tracing expands every blob). Starts come `BENCH_SQL_PAUSE_MS` apart
(25: a user's turn; the store's threads idle again, CPU caches cooled by the pause) or back to back
(`0`). "grown": first `BENCH_SQL_GROWN` turns (3,000) over conversations of 3 turns each are written
as the server writes a whole turn (journal rows, input, run records, the answer, a checkpoint, the
run's end, the journal's rows forgotten); the floor's table grows by as many rows.
"""
from __future__ import annotations

import asyncio
import inspect
import os
import sqlite3
import statistics
import struct
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.support.bare_durable_app import DB_ENV, SqliteJournal
from benchmarks.support.bare_turn_app import turn_text
from cursor_byok.store import CheckpointKind, ConversationRecord, EventKind, NewEvent, RunRecord, Store
from tests.harness.ide import run_request

STARTS = int(os.environ.get("BENCH_SQL_STARTS", "300"))
GROWN = int(os.environ.get("BENCH_SQL_GROWN", "3000"))
PAUSE = float(os.environ.get("BENCH_SQL_PAUSE_MS", "25")) / 1000
TURNS_PER_CONVERSATION = 3
TEXT = turn_text()
# What a start stores: the run request as received, and the user's message as the history holds it.
RUN_REQUEST = run_request(TEXT, model="bench", conversation_id="c").SerializeToString()
USER_ENTRY = b'{"kind":"user","message":{"role":"user","parts":[{"text":"' + TEXT.encode() + b'"}]}}'
ANSWER_ENTRY = b'{"kind":"assistant","message":{"role":"assistant","parts":[{"text":"' + TEXT[:2000].encode() + b'"}]}}'
CHECKPOINT = bytes(range(256)) * 16
SMALL_APPEND = b"\x12" * 120  # a heartbeat or a tool result's ack
# The store queues a run's start records as one write (else: its three calls, as before).
RUN_START_ONE_WRITE = "bind" in inspect.signature(Store.start_run).parameters


def queue_run_start(store: Store, run: RunRecord, update: ConversationRecord | None) -> None:
    """A run start's records queued `later`, as the server's start queues them: one write (the
    request's binding, an existing conversation's row, the run's row), or three on a store from before."""
    if RUN_START_ONE_WRITE:
        store.start_run(run, bind=True, conversation=update, later=True)
        return
    assert run.request_id is not None
    if update is not None:
        store.upsert_conversation(update, later=True)
    store.bind_request(run.request_id, run.conversation_id, later=True)
    store.start_run(run, later=True)


def wal_frames(db: Path) -> int:
    """The WAL's frames so far (mxFrame of the WAL index's header; 0 once it has started over)."""
    try:
        with open(db.with_name(db.name + "-shm"), "rb") as shm:
            return int(struct.unpack_from("=I", shm.read(20), 16)[0])
    except (OSError, struct.error):
        return 0


class Meter:
    """Per start: loop CPU (ns) of the commit and of all store calls; WAL frames per commit."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.commit_ns: list[int] = []
        self.start_ns: list[int] = []
        self.pages: list[int] = []

    def frames(self) -> int:
        return wal_frames(self.db)

    def pages_since(self, before: int) -> None:
        after = self.frames()
        self.pages.append(after - before if after >= before else after)  # started over: counted from 0

    def summary(self) -> dict[str, float]:
        return {
            "commit_cpu_us": statistics.median(self.commit_ns) / 1000,
            "start_cpu_us": statistics.median(self.start_ns) / 1000,
            "commit_cpu_mean_us": statistics.fmean(self.commit_ns) / 1000,
            "pages": statistics.median(self.pages),
        }


class Ours:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def start(self, n: int, meter: Meter | None = None, *, new: bool = True, conversation: str | None = None) -> None:
        store = self.store
        conv, request = conversation or f"c{n}", f"r{n}-{uuid.uuid4().hex}"
        frames = meter.frames() if meter else 0
        t0 = time.thread_time_ns()
        # What a server's start asks first: whom the request id is bound to, and whether a new
        # conversation has anything stored (both answered without SQL here, and the writer then
        # plans the commit without its probes, as in the server).
        assert await store.lookup_conversation(request) is None
        if new:
            assert store.holds_nothing_of(conv)
        store.record_append(request, "", 0, RUN_REQUEST)
        if new:
            store.upsert_conversation(ConversationRecord(conversation_id=conv, created_at_ms=n, updated_at_ms=n, model_id="bench", mode="agent"))
        stored = store.append_events(conv, [NewEvent(f"u-{request}", EventKind.USER, USER_ENTRY)])
        c0 = time.thread_time_ns()
        store.hand_over_now()
        c1 = time.thread_time_ns()
        update = None if new else ConversationRecord(conversation_id=conv, created_at_ms=n, updated_at_ms=n + 1, model_id="bench", mode="agent")
        run = RunRecord(f"run-{uuid.uuid4().hex}", conv, "preparing", started_at_ms=n, request_id=request)
        queue_run_start(store, run, update)
        t1 = time.thread_time_ns()
        await stored
        if meter is not None:
            meter.pages_since(frames)
            meter.commit_ns.append(c1 - c0)
            meter.start_ns.append(t1 - t0)

    def finish(self, n: int, conversation: str) -> None:
        """The rest of a whole turn as the server writes it, queued (not measured)."""
        store = self.store
        request = f"end-{n}"
        for seqno in range(1, 6):
            store.record_append(request, "", seqno, SMALL_APPEND)
        store.append_events(conversation, [NewEvent(f"a-{n}", EventKind.ASSISTANT, ANSWER_ENTRY)])
        store.put_checkpoint(conversation, CHECKPOINT, kind=CheckpointKind.FINAL)
        store.forget_appends(request, "")


async def _grow(ours: Ours, turns: int) -> None:
    for n in range(turns):
        conv = f"g{n // TURNS_PER_CONVERSATION}"
        await ours.start(n, new=n % TURNS_PER_CONVERSATION == 0, conversation=conv)
        ours.finish(n, conv)
        if n % 64 == 63:
            await ours.store.flush()
    await ours.store.flush()


async def _ours(db: Path, grown: int, traced: list[str] | None = None) -> dict[str, float]:
    options: dict[str, Any] = {} if traced is None else {"trace": traced.append}
    store = await Store.open(db, **options)
    try:
        ours = Ours(store)
        await _grow(ours, grown)
        meter = Meter(db)
        await store.flush()
        for n in range(grown, grown + (20 if traced is not None else STARTS)):
            await asyncio.sleep(PAUSE)  # a start of its own pass of the loop (the loop commits once per pass)
            if traced is not None and n == grown + 10:
                traced.clear()  # ten starts counted, in steady state
            await ours.start(n, meter)
        return meter.summary()
    finally:
        await store.close()


class _Append:
    """What `SqliteJournal.commit` reads of a decoded append."""

    request_id = ""
    raw = RUN_REQUEST


def _durable(db: Path, grown: int, traced: list[str] | None = None) -> dict[str, float]:
    os.environ[DB_ENV] = str(db)
    journal = SqliteJournal()
    append = _Append()
    meter = Meter(db)
    for n in range(grown + (20 if traced is not None else STARTS)):
        append.request_id = f"r{n}-{uuid.uuid4().hex}"
        measured = n >= grown
        if measured and PAUSE:
            time.sleep(PAUSE)
        if traced is not None and n == grown + 10:
            assert journal._db is not None
            journal._db.set_trace_callback(traced.append)
        frames = meter.frames() if measured else 0
        t0 = time.thread_time_ns()
        journal.commit(append)
        t1 = time.thread_time_ns()
        if measured:
            meter.pages_since(frames)
            meter.commit_ns.append(t1 - t0)
            meter.start_ns.append(t1 - t0)
    return meter.summary()


def _statements(traced: list[str]) -> float:
    return len(traced) / 10


def test_store_start_sql(benchmark: Any, tmp_path: Path) -> None:
    results: dict[str, dict[str, float]] = {}

    def measure() -> None:
        for label, grown in (("fresh", 0), ("grown", GROWN)):
            for name, run in (("ours", lambda db, g, t=None: asyncio.run(_ours(db, g, t))), ("durable", _durable)):
                key = f"{name} {label}"
                results[key] = run(tmp_path / f"{name}-{label}.db", grown)
                traced: list[str] = []
                run(tmp_path / f"{name}-{label}-traced.db", min(grown, 300), traced)
                results[key]["statements"] = _statements(traced)

    benchmark.pedantic(measure, rounds=1, iterations=1)
    print(f"\nper start, {STARTS} starts {PAUSE * 1000:.0f} ms apart; grown: {GROWN} turns first; loop CPU medians")
    print(f"{'':16}{'commit µs':>10}{'start µs':>10}{'commit mean':>12}{'pages':>7}{'statements':>11}")
    for key, r in results.items():
        print(f"{key:16}{r['commit_cpu_us']:10.0f}{r['start_cpu_us']:10.0f}{r['commit_cpu_mean_us']:12.0f}{r['pages']:7.0f}{r['statements']:11.1f}")
    for label in ("fresh", "grown"):
        o, d = results[f"ours {label}"], results[f"durable {label}"]
        print(f"ours / durable, {label}: commit {o['commit_cpu_us'] / d['commit_cpu_us']:.2f}x, "
              f"start {o['start_cpu_us'] / d['start_cpu_us']:.2f}x, pages {o['pages'] / d['pages']:.2f}x")
    benchmark.extra_info.update({f"{k} {m}": v for k, r in results.items() for m, v in r.items()})
    assert all(r["pages"] > 0 for r in results.values())  # the WAL was read: every start commits
