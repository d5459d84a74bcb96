"""Scale: the same figures on an empty database and on a year of heavy use, in one run.

    .venv/bin/python -m pytest -q benchmarks/test_scale.py -s -p no:timeout

The big database (`tests.harness.synthetic_history.py`: 100k conversations × 10 turns × 10 history
events = 1M request bindings, 1M runs, 10M events, plus each turn's checkpoint and usage row) is
built once, straight through the store's schema, and kept under BENCH_SCALE_DIR (default: the
system temp dir's `cursor-byok-bench-scale`), one per schema version and size; the server uses it
in place. The "empty" database holds only the old conversations this run continues. Each round
starts a fresh server on the empty database, then two on the big one: with its file read into the
OS page cache first (as on a machine that uses it daily: "big"), and with the file dropped from the
page cache first (`posix_fadvise(DONTNEED)` on that file only: "big, cold"), where every page a
figure touches for the first time is a disk read. Per server:

- cold start: spawn → health answered, and spawn → the first turn's first token; the server's CPU
  by the health answer;
- idle memory: RSS and PSS of the server after that first turn (and a short settle);
- turn start (the IDE's first append → the provider holds the model request, stamped by
  `benchmarks/support/stamp_provider.py`): SAMPLES new conversations, then SAMPLES old
  conversations continued (each one's first turn since the start: its history is loaded);
- size per turn: the database's used pages (page_count − freelist_count) before and after those
  turns, divided by the turns;
- `conversations list` with the server stopped: the CLI's wall time, and the store's first page
  and a page 1,000 pages deep measured inside one process (keyset cursor where the store has one,
  else LIMIT/OFFSET).

A second test, `test_growth_per_turn_along_one_conversation`, runs BENCH_SCALE_LONG_TURNS=200 turns
of one conversation on an empty database and prints what a turn adds to each table (with its
indexes, by SQLite's dbstat, so at page granularity) early and late in it.

Knobs: BENCH_SCALE_CONVERSATIONS=100000, BENCH_SCALE_TURNS=10, BENCH_SCALE_EVENTS=10,
BENCH_SCALE_ROUNDS=5, BENCH_SCALE_SAMPLES=30, BENCH_SCALE_DIR, BENCH_SRC (run the servers, the
schema and the CLI from another checkout's `src`, for a before/after pair).
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.harness.synthetic_history import conversation_id
from benchmarks.test_turn_start import ROOT, SRC, Client, cpu_seconds, pss_kib, stop
from benchmarks.test_gateway import rss_kib, wait_healthy
from tests.harness.server import ModelSpec, ServerConfig, free_port

CONVERSATIONS = int(os.environ.get("BENCH_SCALE_CONVERSATIONS", "100000"))
TURNS = int(os.environ.get("BENCH_SCALE_TURNS", "10"))
EVENTS = int(os.environ.get("BENCH_SCALE_EVENTS", "10"))
ROUNDS = int(os.environ.get("BENCH_SCALE_ROUNDS", "5"))
SAMPLES = int(os.environ.get("BENCH_SCALE_SAMPLES", "30"))
CACHE = Path(os.environ.get("BENCH_SCALE_DIR", Path(tempfile.gettempdir()) / "cursor-byok-bench-scale"))
HOST = "127.0.0.1"
MODEL = "bench"
HEALTH = "/__byok-api__/healthz"
LIST_PROBE = """
import asyncio, inspect, sys, time
from cursor_byok.store import Store

async def main(path):
    store = await Store.open(path, read_only=True)
    try:
        page = store.list_conversations
        started = time.perf_counter()
        first = await page(50)
        first_ms = (time.perf_counter() - started) * 1e3
        items = getattr(first, "conversations", first)
        if "after" not in inspect.signature(page).parameters:  # no keyset cursor: by offset
            started = time.perf_counter()
            await page(50, 50 * 1000)
        else:  # walk to the cursor of that page (as deep as there are pages), then time the page
            cursor = first.next or f"{2**62}.~"
            for _ in range(999):
                cursor = (await page(50, after=cursor)).next or cursor
            started = time.perf_counter()
            await page(50, after=cursor)
        deep_ms = (time.perf_counter() - started) * 1e3
        print(len(items), first_ms, deep_ms)
    finally:
        await store.close()

asyncio.run(main(sys.argv[1]))
"""


def src_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT}:{SRC}", "CURSOR_BYOK_TEST_KEY": "sk-bench"}


def schema_version() -> int:
    out = subprocess.run([sys.executable, "-c", "from cursor_byok.store import SCHEMA_VERSION; print(SCHEMA_VERSION)"],
                         env=src_env(), cwd=ROOT, check=True, capture_output=True, text=True)
    return int(out.stdout)


def build(path: Path, conversations: int, seed_from: int = 0) -> None:
    subprocess.run([sys.executable, "-m", "tests.harness.synthetic_history", str(path), str(conversations), str(TURNS), str(EVENTS),
                    str(seed_from)], env=src_env(), cwd=ROOT, check=True)


def big_database() -> Path:
    """The cached big database's data dir, built first if missing (into a scratch dir, renamed when
    complete, so an interrupted build is never mistaken for a finished one)."""
    data_dir = CACHE / f"v{schema_version()}-{CONVERSATIONS}x{TURNS}x{EVENTS}"
    if not (data_dir / "state.db").exists():
        scratch = CACHE / f"building-{os.getpid()}"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        started = time.monotonic()
        build(scratch / "state.db", CONVERSATIONS)
        print(f"\nbuilt {data_dir.name} in {time.monotonic() - started:.0f} s")
        scratch.rename(data_dir)
    return data_dir


def page_cache(database: Path, *, cached: bool) -> None:
    """Read the database's files into the OS page cache, or drop them from it (only these files)."""
    for path in database.parent.glob(database.name + "*"):
        with path.open("rb") as fh:
            if cached:
                while fh.read(1 << 24):
                    pass
            else:
                os.fsync(fh.fileno())  # written back first: dirty pages cannot be dropped
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def used_bytes(database: Path) -> int:
    with sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True) as conn:
        pages, free, size = (conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count", "page_size"))
    return (pages - free) * size


def file_bytes(database: Path) -> int:
    return sum(p.stat().st_size for p in database.parent.glob(database.name + "*"))


async def turn_starts(port: int, conversation_ids: list[str | None]) -> list[float]:
    """One turn per conversation (None: a new one), one after another: append → provider, in ms."""
    out = []
    for cid in conversation_ids:
        client = await Client(port).open()
        if cid is not None:
            client.conversation_id = cid
        to_provider, _ = await client.turn()
        client.close()
        out.append(to_provider / 1e6)
    return out


async def first_turn(port: int) -> None:
    await turn_starts(port, [None])


def healthy(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5) as s:
            s.sendall(f"GET {HEALTH} HTTP/1.1\r\nhost: {HOST}:{port}\r\nconnection: close\r\n\r\n".encode())
            return s.recv(64).startswith(b"HTTP/1.1 204")
    except OSError:
        return False


def _has_retention(src: str) -> bool:
    """The server under test has a [retention] table (a module, or a package since)."""
    package = Path(src) / "cursor_byok"
    return any("RetentionConfig" in p.read_text() for p in (package / "config.py", *(package / "config").glob("*.py")) if p.exists())


def write_config(data_dir: Path, port: int, provider_port: int, src: str = SRC) -> Path:
    """A benchmark server's config in `data_dir`, with retention off where the server has it: a
    pass would start deleting a synthetic history's older runs a minute in."""
    config = ServerConfig(
        data_dir=data_dir,
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=f"http://{HOST}:{provider_port}/v1", max_output_tokens=1000)],
        continuation_window_seconds=0.02,
    )
    config_path = data_dir / "bench-config.toml"
    retention = "\n[retention]\nruns_days = 0\ntraces_days = 0\nusage_days = 0\n"
    config_path.write_text(config.toml(port) + (retention if _has_retention(src) else ""))
    return config_path


def serve(data_dir: Path, provider_port: int, log: Path) -> tuple[subprocess.Popen[bytes], int, float]:
    port = free_port()
    config_path = write_config(data_dir, port, provider_port)
    exe = Path(sys.executable).with_name("cursor-byok")
    started = time.monotonic()
    proc = subprocess.Popen([str(exe), "serve", "--config", str(config_path)], env=src_env(), cwd=ROOT,
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    while not healthy(port):
        if proc.poll() is not None or time.monotonic() > started + 120:
            stop(proc)
            raise RuntimeError(f"the server did not come up:\n{log.read_text()[-4000:]}")
        time.sleep(0.002)
    return proc, port, time.monotonic() - started


def one_server(data_dir: Path, provider_port: int, old: list[str], log: Path) -> dict[str, float]:
    database = data_dir / "state.db"
    spawned = time.monotonic()
    proc, port, up = serve(data_dir, provider_port, log)
    figures: dict[str, float] = {"health_s": up, "cpu_at_health_s": cpu_seconds(proc.pid)}
    try:
        asyncio.run(first_turn(port))
        figures["first_turn_s"] = time.monotonic() - spawned
        time.sleep(0.5)
        figures["idle_rss_mib"] = rss_kib(proc.pid) / 1024
        figures["idle_pss_mib"] = pss_kib(proc.pid) / 1024
        before = used_bytes(database)
        figures["new_ms"] = statistics.median(asyncio.run(turn_starts(port, [None] * SAMPLES)))
        figures["old_ms"] = statistics.median(asyncio.run(turn_starts(port, list(old))))
        figures["kib_per_turn"] = (used_bytes(database) - before) / 1024 / (SAMPLES + len(old))
        figures["rss_after_mib"] = rss_kib(proc.pid) / 1024
    finally:
        stop(proc)
    figures.update(list_figures(data_dir))
    figures["db_gib"] = file_bytes(database) / 2**30
    return figures


def list_figures(data_dir: Path) -> dict[str, float]:
    config = data_dir / "bench-config.toml"
    exe = Path(sys.executable).with_name("cursor-byok")
    started = time.monotonic()
    subprocess.run([str(exe), "conversations", "list", "--config", str(config)], env=src_env(), cwd=ROOT, check=True,
                   capture_output=True)
    cli = time.monotonic() - started
    out = subprocess.run([sys.executable, "-c", LIST_PROBE, str(data_dir / "state.db")], env=src_env(), cwd=ROOT,
                         check=True, capture_output=True, text=True)
    _, first_ms, deep_ms = out.stdout.split()
    return {"list_cli_s": cli, "list_first_ms": float(first_ms), "list_deep_ms": float(deep_ms)}


FIGURES = [
    ("health_s", "cold start: spawn → health answered (s)", 1.2),
    ("first_turn_s", "cold start: spawn → first turn's first token (s)", 1.2),
    ("cpu_at_health_s", "server CPU by the health answer (s)", 1.2),
    ("idle_rss_mib", "idle RSS after the first turn (MiB)", 1.2),
    ("idle_pss_mib", "idle PSS after the first turn (MiB)", 1.2),
    ("new_ms", "turn start, new conversation, p50 (ms)", 1.2),
    ("old_ms", "turn start, old conversation continued, p50 (ms)", 1.2),
    ("kib_per_turn", "database growth per turn (KiB)", 1.2),
    ("list_cli_s", "`conversations list` (CLI wall, s)", 1.2),
    ("list_first_ms", "list: first page in the store (ms)", 1.2),
    ("list_deep_ms", "list: 1,000 pages deep (ms)", None),
    ("rss_after_mib", "RSS after all turns (MiB)", None),
    ("db_gib", "database size on disk (GiB)", None),
]


@pytest.mark.timeout(7200)
@pytest.mark.benchmark(group="scale")
def test_empty_vs_big_database(benchmark, tmp_path: Path) -> None:
    env = src_env()
    provider_port = free_port()
    provider = subprocess.Popen([sys.executable, "-m", "benchmarks.support.stamp_provider", str(provider_port), "2", "5"],
                                env=env, cwd=ROOT)
    try:
        wait_healthy(f"http://{HOST}:{provider_port}/control/count")
        big = big_database()
        results: dict[str, list[dict[str, float]]] = {"empty": [], "big": [], "big, cold": []}

        def run_all() -> None:
            for r in range(ROUNDS):
                # Old conversations nobody continued before (a continued one has grown a turn).
                first_old = random.randrange(CONVERSATIONS - SAMPLES)
                old = [conversation_id(i) for i in range(first_old, first_old + SAMPLES)]
                empty = tmp_path / f"empty-{r}"
                empty.mkdir()
                build(empty / "state.db", SAMPLES, first_old)
                for name, data_dir, cached in (("empty", empty, True), ("big", big, True), ("big, cold", big, False)):
                    page_cache(data_dir / "state.db", cached=cached)
                    results[name].append(one_server(data_dir, provider_port, old, tmp_path / f"{name}-{r}.log"))

        benchmark.pedantic(run_all, rounds=1, iterations=1)
    finally:
        provider.terminate()
        provider.wait(10)
    report(results)


def report(results: dict[str, list[dict[str, float]]]) -> None:
    print(f"\n{ROUNDS} rounds, medians; big = {CONVERSATIONS} conversations × {TURNS} turns × {EVENTS} events")
    print("| figure | empty | big | big / empty | big, cold | cold / empty | target (big / empty) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for key, label, target in FIGURES:
        empty, big, cold = (statistics.median(r[key] for r in results[name]) for name in ("empty", "big", "big, cold"))
        goal = f"≤ {target}×" if target else "report"
        print(f"| {label} | {empty:.3g} | {big:.3g} | {big / empty:.2f} | {cold:.3g} | {cold / empty:.2f} | {goal} |")
    print(json.dumps(results))


LONG_TURNS = int(os.environ.get("BENCH_SCALE_LONG_TURNS", "200"))


@pytest.mark.timeout(3600)
@pytest.mark.benchmark(group="scale")
def test_growth_per_turn_along_one_conversation(benchmark, tmp_path: Path) -> None:
    """What a turn adds to the database early in one conversation and late in it (LONG_TURNS turns
    of a short question and a short answer), per table: the one per-turn cost that grows with
    history is whatever a turn stores about the whole conversation so far."""
    from cursor_byok.store import database_stats
    from tests.harness.ide import ScriptedIDE, run_request

    provider_port = free_port()
    provider = subprocess.Popen([sys.executable, "-m", "benchmarks.support.stamp_provider", str(provider_port), "2", "1"], env=src_env(), cwd=ROOT)
    data_dir = tmp_path / "long"
    data_dir.mkdir()
    database = data_dir / "state.db"
    marks: dict[int, dict[str, int]] = {}
    try:
        wait_healthy(f"http://{HOST}:{provider_port}/control/count")
        proc, port, _ = serve(data_dir, provider_port, tmp_path / "long.log")

        async def turns() -> None:
            ide = ScriptedIDE(f"http://{HOST}:{port}", tmp_path)
            conversation = uuid.uuid4().hex
            try:
                for turn in range(LONG_TURNS + 1):
                    if turn in (1, 21, LONG_TURNS - 20, LONG_TURNS):
                        marks[turn] = database_stats(database, table_sizes=True).table_bytes
                    if turn < LONG_TURNS:
                        log = await ide.turn(run_request(f"question {turn}: what changed?", model=MODEL, conversation_id=conversation))
                        assert log.terminal is None, log.terminal
            finally:
                await ide.close()

        try:
            benchmark.pedantic(lambda: asyncio.run(turns()), rounds=1, iterations=1)
        finally:
            stop(proc)
    finally:
        provider.terminate()
        provider.wait(10)
    early, late = (1, 21), (LONG_TURNS - 20, LONG_TURNS)
    print(f"\nbytes a turn adds, per table: turns {early[0] + 1}-{early[1]} and {late[0] + 1}-{late[1]} of one conversation")
    print(f"| table (with its indexes) | early | late | size at turn {late[1]} |\n|---|---:|---:|---:|")
    def per_turn(table: str, first: int, last: int) -> float:
        def size(turn: int) -> int:
            return sum(marks[turn].values()) if table == "all" else marks[turn].get(table, 0)

        return (size(last) - size(first)) / (last - first)

    for table in [*sorted(marks[late[1]], key=lambda t: -marks[late[1]][t]), "all"]:
        size = sum(marks[late[1]].values()) if table == "all" else marks[late[1]][table]
        if per_turn(table, *early) or per_turn(table, *late) or table == "checkpoints":
            print(f"| {table} | {per_turn(table, *early):,.0f} | {per_turn(table, *late):,.0f} | {size:,} |")
