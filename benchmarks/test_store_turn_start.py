"""The store's part of a turn start, in one process: what the runtime writes when a turn starts
(journal row, the 2,000-word input, the input awaited; the conversation's row update, the
request's binding and the run's row before it, or queued `later` after it where the store has that) and the binding read for the turn's
fresh request id. One start at a time with a pause between (a user's turn),
then 200 starting in one instant (they must share commits).

    .venv/bin/python -m pytest -q benchmarks/test_store_turn_start.py -s
    # before/after in one sitting: the same file against another checkout's store
    PYTHONPATH=/path/to/old-checkout/src .venv/bin/python -m pytest -q benchmarks/test_store_turn_start.py -s -p no:cacheprovider

Per start: wall time from the first write queued to the input durable (its future resolved),
p50/p99; the process's CPU per start (every thread: the loop's and the store's). Per lookup: wall
and CPU of `lookup_conversation` for a request id never bound. Then starts back to back (each as
soon as the one before is durable, as the server's held starts come): CPU per start of each thread
(the loop's, the store's writer, checkpoint and reader threads; from /proc/self/task/TID/schedstat).
"""
from __future__ import annotations

import asyncio
import inspect
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from cursor_byok.store import ConversationRecord, EventKind, NewEvent, RunRecord, Store

STARTS = int(os.environ.get("BENCH_STORE_STARTS", "300"))
BACK_TO_BACK = int(os.environ.get("BENCH_STORE_BACK_TO_BACK", "1000"))
PAUSE = 0.025  # between a user's turns: the store's threads are idle again
TURN = b'{"text":"' + b"word " * 2000 + b'"}'


def _pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] / 1000


# A store without writes queued `later` (an older checkout's) gets the run's records before the input.
LATER = "later" in inspect.signature(Store.start_run).parameters


def _queue_start(store: Store, i: int) -> asyncio.Future[Any]:
    store.record_append(f"r{i}", "", 0, TURN)
    if not LATER:
        _queue_run_records(store, i)
    stored = store.append_events(f"c{i}", [NewEvent(f"u{i}", EventKind.USER, TURN)])
    store.hand_over_now()
    if LATER:
        _queue_run_records(store, i, later=True)
    return stored


def _queue_run_records(store: Store, i: int, **later: bool) -> None:
    """The conversation (it exists: its row's update), the request's binding, the run."""
    store.upsert_conversation(ConversationRecord(conversation_id=f"c{i}", created_at_ms=1, updated_at_ms=2), **later)
    store.bind_request(f"r{i}", f"c{i}", **later)
    store.start_run(RunRecord(f"run-{i}", f"c{i}", "preparing", started_at_ms=1), **later)


def _thread_cpu_ns() -> dict[str, int]:
    """On-CPU ns so far of the loop's thread and of each store thread, by their Python names' first part."""
    out: dict[str, int] = {}
    for thread in threading.enumerate():
        name = "loop" if thread is threading.main_thread() else thread.name.split(":", 1)[0]
        try:
            ns = int(Path(f"/proc/self/task/{thread.native_id}/schedstat").read_text().split()[0])
        except OSError:
            continue
        out[name] = out.get(name, 0) + ns
    return out


async def _back_to_back(store: Store, first: int) -> dict[str, float]:
    """CPU µs per start of each thread, BACK_TO_BACK starts each queued once the one before is durable."""
    await store.flush()
    before = _thread_cpu_ns()
    for i in range(first, first + BACK_TO_BACK):
        await _queue_start(store, i)
    await store.flush()
    await asyncio.sleep(0.3)  # a checkpoint the last commits woke
    after = _thread_cpu_ns()
    return {f"b2b_{name}_cpu_us": (ns - before.get(name, 0)) / BACK_TO_BACK / 1000 for name, ns in after.items()}


async def _measure(path: Path) -> dict[str, float]:
    store = await Store.open(path)
    try:
        for i in range(STARTS + 200 + BACK_TO_BACK):  # each start is a conversation's next turn: its row exists
            store.upsert_conversation(ConversationRecord(conversation_id=f"c{i}", created_at_ms=1, updated_at_ms=1))
        await store.flush()
        walls: list[int] = []
        cpu = 0
        for i in range(STARTS):
            await asyncio.sleep(PAUSE)
            c0, t0 = time.process_time_ns(), time.perf_counter_ns()
            await _queue_start(store, i)
            walls.append(time.perf_counter_ns() - t0)
            cpu += time.process_time_ns() - c0
        fresh = [uuid.uuid4().hex for _ in range(STARTS)]
        lookups: list[int] = []
        lookup_cpu = 0
        for request_id in fresh:
            c0, t0 = time.process_time_ns(), time.perf_counter_ns()
            assert await store.lookup_conversation(request_id) is None
            lookups.append(time.perf_counter_ns() - t0)
            lookup_cpu += time.process_time_ns() - c0
        await store.flush()
        before = store.stats.transactions
        await asyncio.gather(*[_queue_start(store, STARTS + i) for i in range(200)])
        burst_transactions = store.stats.transactions - before
        return {
            **await _back_to_back(store, STARTS + 200),
            "start_p50_us": _pct(walls, 0.5), "start_p99_us": _pct(walls, 0.99), "start_cpu_us": cpu / STARTS / 1000,
            "lookup_p50_us": _pct(lookups, 0.5), "lookup_cpu_us": lookup_cpu / STARTS / 1000,
            "burst_transactions": burst_transactions,
        }
    finally:
        await store.close()


def test_store_turn_start(benchmark: Any, tmp_path: Path) -> None:
    results: dict[str, float] = {}
    benchmark.pedantic(lambda: results.update(asyncio.run(_measure(tmp_path / "state.db"))), rounds=1, iterations=1)
    benchmark.extra_info.update(results)
    print(
        f"\nturn start's writes queued -> input durable: p50 {results['start_p50_us']:.0f} us, p99 "
        f"{results['start_p99_us']:.0f} us; CPU per start {results['start_cpu_us']:.0f} us"
        f"\nfresh request id lookup: p50 {results['lookup_p50_us']:.1f} us, CPU {results['lookup_cpu_us']:.1f} us"
        f"\n200 starts in one instant: {results['burst_transactions']:.0f} transactions"
        f"\n{BACK_TO_BACK} starts back to back, CPU per start by thread (µs): "
        + ", ".join(f"{key[4:-7]} {us:.0f}" for key, us in results.items() if key.startswith("b2b_"))
    )
    assert results["burst_transactions"] < 20  # they share commits
