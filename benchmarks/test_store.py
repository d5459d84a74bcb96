"""Checkpoint persistence under load: the batching Store vs one transaction per write.

Workload: 1,000 conversations run concurrently as asyncio tasks, 20 steps each; a step appends
one 1–4 KiB history event and puts a 1–4 KiB checkpoint, then awaits both commit futures (the
runtime waits like this before sending the checkpoint frame). That is 40,000 durable writes.
Commit latency is enqueue → future resolved, per write. The naive baseline uses the same schema,
pragmas (WAL, synchronous=NORMAL) on one connection thread (each write one hop to it, as aiosqlite
does), but commits every write on its own.

    PYTHONPATH=src .venv/bin/python -m pytest -q benchmarks/test_store.py -s \
        --benchmark-columns=min,median,mean,ops --benchmark-sort=name
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import random
import sqlite3
import statistics
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from cursor_byok.store import CheckpointKind, ConversationRecord, EventKind, NewEvent, Store

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is a dependency on every platform we run
    uvloop = None

CONVERSATIONS = 1_000
STEPS = 20
WRITES = CONVERSATIONS * STEPS * 2

_POOL = os.urandom(8192)
_rng = random.Random(1234)
# (event size, checkpoint size) per conversation and step, identical for every variant.
SIZES = [[(_rng.randint(1024, 4096), _rng.randint(1024, 4096)) for _ in range(STEPS)]
         for _ in range(CONVERSATIONS)]

RESULTS: dict[str, dict[str, float]] = {}


def _payload(size: int, salt: int) -> bytes:
    start = salt % 4096
    return _POOL[start:start + size]


def _summary(
    name: str, elapsed: float, cpu: float, latencies: list[float], transactions: int
) -> dict[str, float]:
    latencies.sort()
    result = {
        "writes": len(latencies),
        "seconds": elapsed,
        "cpu_us_per_write": cpu / len(latencies) * 1e6,  # all threads; steadier on a shared box
        "commits_per_s": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "max_ms": latencies[-1] * 1000,
        "mean_ms": statistics.fmean(latencies) * 1000,
        "transactions": transactions,
    }
    RESULTS[name] = result
    return result


def _run(main: Callable[[], Coroutine[Any, Any, dict[str, float]]]) -> dict[str, float]:
    if uvloop is not None:
        return uvloop.run(main())
    return asyncio.run(main())


async def _batched(path: Path, synchronous: str) -> dict[str, float]:
    store = await Store.open(path, synchronous=synchronous)
    for c in range(CONVERSATIONS):
        store.upsert_conversation(ConversationRecord(f"conv-{c}", 1, 1))
    await store.flush()
    latencies: list[float] = []
    before = store.stats.transactions

    def timed(future: asyncio.Future[Any]) -> asyncio.Future[Any]:
        started = time.perf_counter()
        future.add_done_callback(lambda _: latencies.append(time.perf_counter() - started))
        return future

    async def conversation(c: int) -> None:
        conv = f"conv-{c}"
        for step, (event_size, state_size) in enumerate(SIZES[c]):
            event = NewEvent(f"s{step}", EventKind.ASSISTANT_TEXT, _payload(event_size, c + step))
            appended = timed(store.append_events(conv, [event]))
            checkpoint = timed(store.put_checkpoint(conv, _payload(state_size, c * 7 + step),
                                                    kind=CheckpointKind.STEP, run_id="run"))
            await appended
            await checkpoint

    started, cpu_started = time.perf_counter(), time.process_time()
    await asyncio.gather(*(conversation(c) for c in range(CONVERSATIONS)))
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    transactions = store.stats.transactions - before
    await store.close()
    return _summary(f"store_{synchronous.lower()}", elapsed, cpu, latencies, transactions)


async def _naive(path: Path, synchronous: str) -> dict[str, float]:
    # Same schema and pragmas; then every write is its own (autocommit) transaction.
    await (await Store.open(path)).close()
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.executemany(
        "INSERT INTO conversations (conversation_id, created_at_ms, updated_at_ms) VALUES (?, 1, 1)",
        [(f"conv-{c}",) for c in range(CONVERSATIONS)],
    )
    thread = concurrent.futures.ThreadPoolExecutor(max_workers=1)  # the connection's one thread
    loop = asyncio.get_running_loop()
    latencies: list[float] = []

    async def timed(sql: str, row: tuple[Any, ...]) -> None:
        started = time.perf_counter()
        await loop.run_in_executor(thread, conn.execute, sql, row)
        latencies.append(time.perf_counter() - started)

    event_sql = (
        "INSERT INTO history_events (conversation_id, seq, event_id, kind, run_id, payload, "
        "created_at_ms) VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM history_events "
        "WHERE conversation_id = ?1), ?2, 'assistant_text', 'run', ?3, 1)"
    )
    checkpoint_sql = (
        "INSERT INTO checkpoints (conversation_id, seq, through_event_seq, run_id, kind, state, "
        "created_at_ms) VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM checkpoints "
        "WHERE conversation_id = ?1), ?2, 'run', 'step', ?3, 1)"
    )

    async def conversation(c: int) -> None:
        conv = f"conv-{c}"
        for step, (event_size, state_size) in enumerate(SIZES[c]):
            await timed(event_sql, (conv, f"s{step}", _payload(event_size, c + step)))
            await timed(checkpoint_sql, (conv, step + 1, _payload(state_size, c * 7 + step)))

    started, cpu_started = time.perf_counter(), time.process_time()
    await asyncio.gather(*(conversation(c) for c in range(CONVERSATIONS)))
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    thread.shutdown()
    conn.close()
    return _summary(f"naive_{synchronous.lower()}", elapsed, cpu, latencies, len(latencies))


def _report(benchmark: Any, name: str) -> None:
    benchmark.extra_info.update(RESULTS[name])
    r = RESULTS[name]
    print(f"\n{name}: {r['writes']:.0f} writes in {r['seconds']:.2f}s = {r['commits_per_s']:,.0f} "
          f"commits/s; latency p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
          f"max {r['max_ms']:.1f} ms; {r['transactions']:.0f} transactions; "
          f"{r['cpu_us_per_write']:.0f} us CPU per write")


@pytest.mark.parametrize("synchronous", ["NORMAL", "FULL"])
def test_store_batched(benchmark: Any, tmp_path: Path, synchronous: str) -> None:
    benchmark.pedantic(lambda: _run(lambda: _batched(tmp_path / "batched.db", synchronous)),
                       rounds=1, iterations=1)
    _report(benchmark, f"store_{synchronous.lower()}")


@pytest.mark.parametrize("synchronous", ["NORMAL", "FULL"])
def test_store_naive_one_transaction_per_write(
    benchmark: Any, tmp_path: Path, synchronous: str
) -> None:
    benchmark.pedantic(lambda: _run(lambda: _naive(tmp_path / "naive.db", synchronous)),
                       rounds=1, iterations=1)
    _report(benchmark, f"naive_{synchronous.lower()}")


def test_store_ratio(tmp_path: Path) -> None:
    """Ratios from this run (variants deselected with -k are re-run here)."""
    for sync in ("normal", "full"):
        if f"store_{sync}" not in RESULTS:
            _run(lambda: _batched(tmp_path / f"batched-{sync}.db", sync.upper()))
        if f"naive_{sync}" not in RESULTS:
            _run(lambda: _naive(tmp_path / f"naive-{sync}.db", sync.upper()))
        batched, naive = RESULTS[f"store_{sync}"], RESULTS[f"naive_{sync}"]
        assert batched["writes"] == naive["writes"] == WRITES
        print(f"\nsynchronous={sync.upper()}: batched/naive commits/s "
              f"{batched['commits_per_s'] / naive['commits_per_s']:.1f}x; p99 latency naive/batched "
              f"{naive['p99_ms'] / batched['p99_ms']:.1f}x; CPU per write naive/batched "
              f"{naive['cpu_us_per_write'] / batched['cpu_us_per_write']:.1f}x")
