"""The store on PostgreSQL vs the embedded SQLite store, same machine, one run: the checkpoint
workload of test_store.py (1,000 conversations × 20 steps, each step an event and a checkpoint
awaited: 40,000 durable writes, group-committed) and the turn start of test_store_turn_start.py
(the writes a start queues → its input durable; a fresh request id's lookup; 200 starts in one
instant), each on both backends.

PostgreSQL is a throwaway local cluster (tests/harness/postgres.py) on loopback TCP; it runs twice:
without fsync (as SQLite's synchronous=NORMAL, which syncs no commit) and with fsync (as FULL).

    .venv/bin/python -m pytest -q benchmarks/test_store_backends.py -s -p no:randomly
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.test_store import RESULTS, _batched, _run
from benchmarks.test_store_turn_start import _measure
from tests.harness.postgres import PostgresCluster

BACKENDS = ("sqlite", "postgres", "postgres_fsync")


@pytest.fixture(scope="module")
def clusters() -> Iterator[dict[str, PostgresCluster]]:
    started: dict[str, PostgresCluster] = {}
    try:
        started["postgres"] = PostgresCluster.start()
        started["postgres_fsync"] = PostgresCluster.start(fsync=True)
        yield started
    finally:
        for cluster in started.values():
            cluster.stop()


def _location(backend: str, clusters: dict[str, PostgresCluster], path: Path) -> Path | str:
    return path if backend == "sqlite" else clusters[backend].create_database("bench")


def test_store_backends_write_commit(tmp_path: Path, clusters: dict[str, PostgresCluster]) -> None:
    rows = {}
    for backend, sync in (("sqlite", "NORMAL"), ("sqlite", "FULL"), ("postgres", "NORMAL"), ("postgres_fsync", "NORMAL")):
        name = f"{backend}_{sync.lower()}" if backend == "sqlite" else backend
        location = _location(backend, clusters, tmp_path / f"{name}.db")
        _run(lambda: _batched(location, sync))  # type: ignore[arg-type]
        rows[name] = RESULTS.pop(f"store_{sync.lower()}")
    print("\nbackend: commits/s, latency p50/p99 ms, transactions, CPU µs per write (this process)")
    for name, r in rows.items():
        print(f"{name}: {r['commits_per_s']:,.0f}/s, p50 {r['p50_ms']:.1f}, p99 {r['p99_ms']:.1f}, "
              f"{r['transactions']:.0f} tx, {r['cpu_us_per_write']:.0f} µs")
    print(f"postgres/sqlite_normal commits/s {rows['postgres']['commits_per_s'] / rows['sqlite_normal']['commits_per_s']:.2f}x; "
          f"postgres_fsync/sqlite_full {rows['postgres_fsync']['commits_per_s'] / rows['sqlite_full']['commits_per_s']:.2f}x")
    assert all(r["writes"] == 40_000 for r in rows.values())


def test_store_backends_turn_start(tmp_path: Path, clusters: dict[str, PostgresCluster]) -> None:
    results: dict[str, dict[str, Any]] = {}
    for backend in BACKENDS:
        results[backend] = asyncio.run(_measure(_location(backend, clusters, tmp_path / "state.db")))  # type: ignore[arg-type]
    print("\nbackend: start p50/p99 µs, CPU µs per start, fresh lookup p50 µs, 200-start burst transactions")
    for backend, r in results.items():
        threads = ", ".join(f"{key[4:-7]} {us:.0f}" for key, us in r.items() if key.startswith("b2b_") and us >= 1)
        print(f"{backend}: {r['start_p50_us']:.0f}/{r['start_p99_us']:.0f}, {r['start_cpu_us']:.0f}, "
              f"{r['lookup_p50_us']:.0f}, {r['burst_transactions']:.0f}; back to back, CPU µs per start by thread: {threads}")
    sqlite = results["sqlite"]
    for backend in BACKENDS[1:]:
        r = results[backend]
        print(f"{backend}/sqlite: start p50 {r['start_p50_us'] / sqlite['start_p50_us']:.1f}x, "
              f"CPU per start {r['start_cpu_us'] / sqlite['start_cpu_us']:.1f}x")
        assert r["burst_transactions"] < 20  # they share commits on PostgreSQL too
