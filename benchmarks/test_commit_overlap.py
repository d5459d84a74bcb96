"""A turn start's input commit beside the request's encoding: on the loop first, or on a thread meanwhile.

    .venv/bin/python -m pytest -q -s -p no:randomly benchmarks/test_commit_overlap.py

Issue 35 asked whether the commit that makes a start's input durable should run on the writer
thread while the loop encodes the provider request, instead of on the loop before it. The thread
needs the interpreter lock for each of its Python steps and at each return from SQLite, and while
the loop runs Python it gets the lock only after the switch interval (0.5 ms while serving). So a
commit of several calls into SQLite (BEGIN, five executemany, COMMIT: today's) may wait on the
loop's Python once per call, and one of a single call (one INSERT into a view whose INSTEAD OF
trigger writes every row, autocommitted) should wait at most at its start and end.

Each start writes what a server's start writes (the append's journal row, a new conversation's row,
the user's 2,000-word input; the previous start's binding and run row riding along), then the loop
runs `BENCH_OVERLAP_WORK_US` (550) of Python (the request's encoding, calibrated once), then waits
for the commit. Scenarios, interleaved start by start:

- `inline`: the real `Store`, `hand_over_now` committing on the loop (today's code), then the work.
- `thread`: the real `Store`, the batch handed to its writer thread (`_hand_over`), then the work.
- `raw7 thread`: the same seven calls, planned on the loop, run by a minimal thread (no planning
  there): what the thread costs when its Python is as small as it can be.
- `raw1 thread`: one autocommitted INSERT into a view (temp trigger) run by the minimal thread.
- `raw1 thread lock`: the same, the loop letting go of the interpreter lock after the hand-over
  until the thread has taken its job (a lock the thread releases before its SQLite call);
  `raw1 thread sleep0` / `yield`: letting go of it once, by `time.sleep(0)` / `os.sched_yield()`.
- `raw1 inline` / `raw7 inline`: the single call, or the seven, on the loop (route 2: a cheaper commit).

Per scenario: wall time from the first write queued to both done (the work and the commit), the
loop thread's CPU, and the process's CPU (the thread's included), medians over
`BENCH_OVERLAP_STARTS` (200) starts `BENCH_OVERLAP_PAUSE_MS` (10) apart; and the wall time of the
start's own calls, of the work, and from the work's end to the commit's.

What it showed on the shared 2-core machine (2026-12-07): every thread scenario slower than its
inline twin in wall time and in the process's CPU, at 0, 10 and 25 ms apart. The thread starts its
commit only after the work (it waits for the lock), or, let in first, steals the loop's core: while
the loop runs Python another process holds the other core most of the time. And the single call
costs more than the seven inline (the trigger runs every branch for every row).
"""
from __future__ import annotations

import asyncio
import enum
import os
import queue
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.test_store_start_sql import RUN_REQUEST, USER_ENTRY, queue_run_start
from cursor_byok.store import ConversationRecord, EventKind, NewEvent, RunRecord, Store
from cursor_byok.store.bindings import UPSERT_BINDING
from cursor_byok.store.connection import connect, prepare_writer
from cursor_byok.store.conversations import INSERT_RUN, UPSERT_CONVERSATION
from cursor_byok.store.history import INSERT_EVENT
from cursor_byok.store.inbound import RECORD_APPEND
from cursor_byok.store.records import Synchronous

STARTS = int(os.environ.get("BENCH_OVERLAP_STARTS", "200"))
PAUSE = float(os.environ.get("BENCH_OVERLAP_PAUSE_MS", "10")) / 1000
WORK_US = float(os.environ.get("BENCH_OVERLAP_WORK_US", "550"))
SWITCH_INTERVAL = 0.0005  # the server's while serving (gateway/lock_hand_over.py)

# The single-call form: every row of a start through one view, in foreign-key order.
START_VIEW = """
CREATE TEMP VIEW start_rows (stage, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10) AS
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0
"""
START_TRIGGER = """
CREATE TEMP TRIGGER start_rows_insert INSTEAD OF INSERT ON start_rows BEGIN
  INSERT INTO conversations (conversation_id, parent_conversation_id, parent_run_id, parent_tool_call_id,
      model_id, mode, created_at_ms, updated_at_ms, last_cursor_run_id, title)
  SELECT NEW.c1, NEW.c2, NEW.c3, NEW.c4, NEW.c5, NEW.c6, NEW.c7, NEW.c8, NEW.c9, NEW.c10 WHERE NEW.stage = 0
  ON CONFLICT (conversation_id) DO UPDATE SET parent_conversation_id = excluded.parent_conversation_id,
      parent_run_id = excluded.parent_run_id, parent_tool_call_id = excluded.parent_tool_call_id,
      model_id = excluded.model_id, mode = excluded.mode, updated_at_ms = excluded.updated_at_ms,
      last_cursor_run_id = excluded.last_cursor_run_id, title = excluded.title;
  INSERT INTO request_bindings (request_id, conversation_id, cursor_run_id, created_at_ms)
  SELECT NEW.c1, NEW.c2, NEW.c3, NEW.c4 WHERE NEW.stage = 1
  ON CONFLICT (request_id) DO UPDATE SET conversation_id = excluded.conversation_id,
      cursor_run_id = COALESCE(excluded.cursor_run_id, request_bindings.cursor_run_id);
  INSERT INTO runs (run_id, conversation_id, cursor_run_id, request_id, phase, started_at_ms)
  SELECT NEW.c1, NEW.c2, NEW.c3, NEW.c4, NEW.c5, NEW.c6 WHERE NEW.stage = 2;
  INSERT INTO history_events (conversation_id, seq, event_id, kind, run_id, payload, created_at_ms)
  SELECT NEW.c1, NEW.c2, NEW.c3, NEW.c4, NEW.c5, NEW.c6, NEW.c7 WHERE NEW.stage = 3;
  INSERT INTO inbound_appends (request_id, generation, seqno, message, received_at_ms, user_name)
  SELECT NEW.c1, NEW.c2, NEW.c3, NEW.c4, NEW.c5, NEW.c6 WHERE NEW.stage = 10
  ON CONFLICT (request_id, generation, seqno) DO NOTHING;
END
"""


def _calibrate() -> Callable[[], None]:
    """Pure Python work of about WORK_US of CPU (a fixed amount of it, not a time)."""
    def work(n: int) -> int:
        total = 0
        for i in range(n):
            total += i * i
        return total

    n = 10_000
    t0 = time.thread_time_ns()
    for _ in range(20):
        work(n)
    per = (time.thread_time_ns() - t0) / 20 / n
    n = max(1, int(WORK_US * 1000 / per))

    def calibrated() -> None:
        work(n)
    return calibrated


class LetIn(enum.Enum):
    """How the loop lets the thread take the interpreter lock after handing it a job."""

    NONE = "none"
    LOCK = "lock"  # blocks on a lock the thread releases once it has the job
    SLEEP0 = "sleep0"
    SCHED_YIELD = "sched_yield"


class MiniWriter:
    """A thread that runs jobs on a connection and resolves their futures: the least a thread can do."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.loop = asyncio.get_running_loop()
        self.inbox: queue.SimpleQueue[tuple[Callable[[Any], None], asyncio.Future[None], threading.Lock | None] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def submit(self, job: Callable[[Any], None], taken: threading.Lock | None = None) -> asyncio.Future[None]:
        future = self.loop.create_future()
        self.inbox.put((job, future, taken))
        return future

    def stop(self) -> None:
        self.inbox.put(None)
        self.thread.join()

    def _run(self) -> None:
        conn = self.conn
        while (item := self.inbox.get()) is not None:
            job, future, taken = item
            if taken is not None:
                taken.release()
            try:
                job(conn)
            except Exception as exc:
                self.loop.call_soon_threadsafe(future.set_exception, exc)
            else:
                self.loop.call_soon_threadsafe(future.set_result, None)


class RawStarts:
    """A start's rows as plain statements: seven calls, or one through the view."""

    def __init__(self) -> None:
        self.previous: tuple[str, str] | None = None  # (request, conversation) whose run records ride along

    def rows(self, n: int) -> tuple[list[tuple[str, list[tuple[Any, ...]]]], list[tuple[Any, ...]]]:
        conv, request, now = f"c{n}-{uuid.uuid4().hex}", f"r{n}-{uuid.uuid4().hex}", int(time.time() * 1000)
        seven: list[tuple[str, list[tuple[Any, ...]]]] = [
            (UPSERT_CONVERSATION, [(conv, None, None, None, "bench", "agent", n, n, None, None)])
        ]
        one: list[tuple[Any, ...]] = [(0, conv, None, None, None, "bench", "agent", n, n, None, None)]
        if self.previous is not None:
            prev_request, prev_conv = self.previous
            run_id = f"run-{uuid.uuid4().hex}"
            seven += [
                (UPSERT_BINDING, [(prev_request, prev_conv, None, now)]),
                (INSERT_RUN, [(run_id, prev_conv, None, prev_request, "preparing", now)]),
            ]
            one += [
                (1, prev_request, prev_conv, None, now, None, None, None, None, None, None),
                (2, run_id, prev_conv, None, prev_request, "preparing", now, None, None, None, None),
            ]
        seven += [
            (INSERT_EVENT, [(conv, 1, f"u-{request}", "user", None, USER_ENTRY, now)]),
            (RECORD_APPEND, [(request, "", 0, RUN_REQUEST, now, None)]),
        ]
        one += [
            (3, conv, 1, f"u-{request}", "user", None, USER_ENTRY, now, None, None, None),
            (10, request, "", 0, RUN_REQUEST, now, None, None, None, None, None),
        ]
        self.previous = (request, conv)
        return seven, one


def seven_calls(statements: list[tuple[str, list[tuple[Any, ...]]]]) -> Callable[[Any], None]:
    def job(conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")
        for sql, rows in statements:
            conn.executemany(sql, rows)
        conn.execute("COMMIT")
    return job


def one_call(rows: list[tuple[Any, ...]]) -> Callable[[Any], None]:
    sql = "INSERT INTO start_rows VALUES " + ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(rows))
    params = tuple(value for row in rows for value in row)

    def job(conn: Any) -> None:
        conn.execute(sql, params)
    return job


class Scenario:
    def __init__(self, name: str) -> None:
        self.name = name
        self.wall: list[int] = []
        self.loop_cpu: list[int] = []
        self.cpu: list[int] = []
        self.late: list[int] = []  # the commit done after the work: how long after
        self.begun: list[int] = []  # the start's own calls (inline: the commit; yield: the hand-over)
        self.worked: list[int] = []  # the work's wall time

    def summary(self) -> str:
        med = statistics.median
        q = statistics.quantiles
        return (f"{self.name:22}{med(self.wall) / 1000:9.0f}{q(self.wall, n=10)[-1] / 1000:9.0f}"
                f"{med(self.loop_cpu) / 1000:10.0f}{med(self.cpu) / 1000:10.0f}{med(self.begun) / 1000:8.0f}"
                f"{med(self.worked) / 1000:8.0f}{med(self.late) / 1000:8.0f}")


async def _measure(tmp: Path) -> list[Scenario]:
    work = _calibrate()
    store = await Store.open(tmp / "store.db")
    raw_thread_conn = _raw_connection(tmp / "raw-thread.db")
    raw_inline_conn = _raw_connection(tmp / "raw-inline.db")
    mini = MiniWriter(raw_thread_conn)
    thread_raw = RawStarts()
    inline_raw = RawStarts()

    def store_start(n: int, inline: bool) -> asyncio.Future[Any]:
        conv, request = f"s{n}", f"r{n}-{uuid.uuid4().hex}"
        store.record_append(request, "", 0, RUN_REQUEST)
        store.upsert_conversation(ConversationRecord(conversation_id=conv, created_at_ms=n, updated_at_ms=n, model_id="bench", mode="agent"))
        stored = store.append_events(conv, [NewEvent(f"u-{request}", EventKind.USER, USER_ENTRY)])
        if inline:
            store.hand_over_now()
        else:
            store._hand_over()
        queue_run_start(store, RunRecord(f"run-{uuid.uuid4().hex}", conv, "preparing", started_at_ms=n, request_id=request), None)
        return stored

    def raw_thread(n: int, single: bool, let_in: LetIn = LetIn.NONE) -> asyncio.Future[Any]:
        seven, one = thread_raw.rows(n)
        taken = threading.Lock() if let_in is LetIn.LOCK else None
        if taken is not None:
            taken.acquire()
        future = mini.submit(one_call(one) if single else seven_calls(seven), taken)
        if taken is not None:
            taken.acquire()  # the interpreter lock let go until the thread has its job
        elif let_in is LetIn.SLEEP0:
            time.sleep(0)
        elif let_in is LetIn.SCHED_YIELD:
            os.sched_yield()
        return future

    def raw_inline(n: int, single: bool) -> asyncio.Future[Any]:
        seven, one = inline_raw.rows(n)
        (one_call(one) if single else seven_calls(seven))(raw_inline_conn)
        return _done()

    starts: dict[str, Callable[[int], asyncio.Future[Any]]] = {
        "inline (today)": lambda n: store_start(n, True),
        "thread": lambda n: store_start(n, False),
        "raw7 thread": lambda n: raw_thread(n, False),
        "raw1 thread": lambda n: raw_thread(n, True),
        "raw1 thread lock": lambda n: raw_thread(n, True, LetIn.LOCK),
        "raw1 thread sleep0": lambda n: raw_thread(n, True, LetIn.SLEEP0),
        "raw1 thread yield": lambda n: raw_thread(n, True, LetIn.SCHED_YIELD),
        "raw7 inline": lambda n: raw_inline(n, False),
        "raw1 inline": lambda n: raw_inline(n, True),
        "work only": lambda n: _done(),  # the floor of every scenario
    }
    scenarios = {name: Scenario(name) for name in starts}
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        for n in range(STARTS + 10):
            for name, start in starts.items():
                await asyncio.sleep(PAUSE)
                w0, c0, p0 = time.perf_counter_ns(), time.thread_time_ns(), time.process_time_ns()
                future = start(n)
                ws = time.perf_counter_ns()
                work()
                w1 = time.perf_counter_ns()
                await future
                w2, c2, p2 = time.perf_counter_ns(), time.thread_time_ns(), time.process_time_ns()
                if n >= 10:  # warmed up
                    s = scenarios[name]
                    s.wall.append(w2 - w0)
                    s.loop_cpu.append(c2 - c0)
                    s.cpu.append(p2 - p0)
                    s.late.append(w2 - w1)
                    s.begun.append(ws - w0)
                    s.worked.append(w1 - ws)
    finally:
        sys.setswitchinterval(interval)
        mini.stop()
        raw_thread_conn.close()
        raw_inline_conn.close()
        await store.close()
    return list(scenarios.values())


def _done() -> asyncio.Future[Any]:
    done = asyncio.get_running_loop().create_future()
    done.set_result(None)
    return done


def _raw_connection(path: Path) -> Any:
    """The store's writer connection as the store sets it up, with the single-call view."""
    conn = connect(path, synchronous=Synchronous.NORMAL, busy_timeout_ms=5_000, read_only=False)
    prepare_writer(conn)
    conn.execute(START_VIEW)
    conn.execute(START_TRIGGER)
    return conn


def test_commit_overlap(benchmark: Any, tmp_path: Path) -> None:
    for name in ("raw-thread.db", "raw-inline.db"):
        asyncio.run(_create(tmp_path / name))
    results: list[Scenario] = []

    def measure() -> None:
        results.extend(asyncio.run(_measure(tmp_path)))

    benchmark.pedantic(measure, rounds=1, iterations=1)
    print(f"\nper start, {STARTS} starts {PAUSE * 1000:.0f} ms apart, {WORK_US:.0f} µs of Python work; µs")
    print(f"{'':22}{'wall p50':>9}{'p90':>9}{'loop CPU':>10}{'all CPU':>10}{'start':>8}{'work':>8}{'after':>8}")
    for scenario in results:
        print(scenario.summary())
    benchmark.extra_info.update({s.name: statistics.median(s.wall) / 1000 for s in results})
    assert all(s.wall for s in results)


async def _create(path: Path) -> None:
    await (await Store.open(path)).close()
