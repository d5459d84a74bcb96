"""Turn start under load (issue 35): a new turn's start while other conversations stream, next to the
floor and the bare granian app under the same load, every target of the issue a ratio of one run.

    .venv/bin/python -m pytest -q -s -p no:randomly benchmarks/test_turn_start_load.py

Four servers (five with BENCH_BEFORE_SRC), up at once, against one fake provider
(`support/stamp_provider.py`: it stamps the moment it holds a whole request, CLOCK_MONOTONIC, and
sends the stamp back as the first text):
- **ours**: the real `cursor-byok serve` (from BENCH_SRC, as `test_turn_start.py`), and with
  BENCH_BEFORE_SRC=<another checkout>/src a second one, **before**, from that tree, in the same
  rotation (a before/after pair seconds apart, under the same outside load);
- **floor**: `support/bare_turn_app.py`, granian + the append's decode + one prebuilt provider
  request through aiohttp + the answer's text as frames (no history, persistence or prompt);
- **durable**: `support/bare_durable_app.py`, the floor + the one commit every correct start makes
  before the model is called (the run request's bytes as one SQLite row, on the loop, WAL and
  synchronous=NORMAL as ours): the lower bound of a durable server; its commit's own loop CPU per
  held start is timed inside it, and the report says what of ours' excess over the floor it explains;
- **bare**: `support/bare_relay_app.py`, granian + the append's decode + the same prebuilt request,
  the provider's bytes relayed to RunSSE unchanged (the issue's "bare granian app").

Step by step, each step on every server before the next (their order rotating): spawn → ready
(median of BENCH_READY_SPAWNS alternating spawns); peak RSS (and PSS) over RSS_CONVERSATIONS conversations; BURST first
turns spread over one second; CPU per run start (HELD starts, each once the provider holds the one
before: `test_turn_start.cpu_per_start_by_thread`); then the load phases (BENCH_LOADS):
"idle" and, e.g., "fast:8" = 8 other conversations streaming back to back, each turn a 2,000-word
answer sent as fast as the server reads it, "w50:32" = 32 others streaming 2,000-word answers at 50
words/s. In each phase, once every background conversation has its first text: the server's CPU
per streamed word over WORD_WINDOW seconds, then SAMPLES probe turns (2,000-word user message, a
short answer, conversations of TURNS turns), each followed by the same prebuilt request sent
straight to the provider (the "direct call", under the same load): first append → provider has the
request, and added time to first token = the probe's TTFT percentile minus the direct calls'.
At a phase's end the provider ends the background answers in progress and the background
conversations stop after their turn.

Knobs: BENCH_LOADS="idle,fast:8,fast:32,w50:32", BENCH_LOAD_SAMPLES=100 (probes per phase),
BENCH_PROBE_GAP_MS=40 (a random pause up to this before each probe, so probes do not march in step
with the streams), BENCH_WORD_WINDOW_S=3, BENCH_LONG_WORDS=2000, BENCH_FAST_BATCH=1 (words per
provider write in fast streams), BENCH_BURST=200, BENCH_HELD=100, BENCH_RSS_CONVERSATIONS=100,
BENCH_TURNS_PER_CONVERSATION=3, BENCH_TARGETS="ours,durable,floor,bare" (with "before" second when
BENCH_BEFORE_SRC is set), BENCH_READY_SPAWNS=3, BENCH_SRC, BENCH_BEFORE_SRC; BENCH_GC=<path prefix> logs every garbage
collection of each server (`support/cprofile_site`, into `<prefix>-<server>.<pid>`) and reports,
per step, the collections per start (held starts; probes, the load's streams included) and per
1,000 streamed words (a load's measuring window), with their durations by generation. A short run (a smoke
check of the harness, not figures):
BENCH_LOADS=idle,fast:2,w50:2 BENCH_LOAD_SAMPLES=10 BENCH_BURST=10 BENCH_HELD=5 BENCH_RSS_CONVERSATIONS=5
"""
from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchmarks.test_gateway import _tree, rss_kib, wait_healthy
from benchmarks.test_turn_start import (
    BURST, CPROFILE, CPROFILE_SITE, FLOOR_APPS, HELD, HOST, MODEL, ROOT, RSS_CONVERSATIONS, SRC, TURNS, Client,
    Samples, burst, commit_cpu_us, concurrent, cpu_per_start_by_thread, cpu_seconds, direct_turn, durable_share,
    granian, journal_stats, pct, pss_kib, spawn, stop, stop_all, thread_cpu_by_name, thread_seconds, warm_provider_pool,
)
from benchmarks.support import gc_log
from benchmarks.support.bare_durable_app import DB_ENV
from benchmarks.support.background import CLIENTS
from benchmarks.support.rawhttp import Connection
from tests.harness.server import ModelSpec, ServerConfig, free_port

LOADS = os.environ.get("BENCH_LOADS", "idle,fast:8,fast:32,w50:32").split(",")
SAMPLES = int(os.environ.get("BENCH_LOAD_SAMPLES", "100"))
PROBE_GAP = float(os.environ.get("BENCH_PROBE_GAP_MS", "40")) / 1000
WORD_WINDOW = float(os.environ.get("BENCH_WORD_WINDOW_S", "3"))
LONG_WORDS = os.environ.get("BENCH_LONG_WORDS", "2000")
FAST_BATCH = os.environ.get("BENCH_FAST_BATCH", "1")
BEFORE_SRC = os.environ.get("BENCH_BEFORE_SRC", "")  # a second tree of ours, "before", measured in the same rotation
TARGETS = os.environ.get("BENCH_TARGETS", "ours,before,durable,floor,bare" if BEFORE_SRC else "ours,durable,floor,bare").split(",")
OURS = {"ours": SRC, "before": BEFORE_SRC}  # our servers by name: the cursor_byok tree each runs
GC_LOG = os.environ.get("BENCH_GC", "")  # a path prefix: each server's collections logged there
READY_SPAWNS = int(os.environ.get("BENCH_READY_SPAWNS", "3"))
PROBE_CHUNKS, PROBE_INTERVAL_MS = "2", "5"  # a probe's answer: the stamp, then 2 words 5 ms apart


@dataclass
class Phase:
    """One load phase's figures for one server."""

    probes: Samples = field(default_factory=Samples)
    direct: Samples = field(default_factory=Samples)
    words_per_s: float = 0.0
    cpu_us_per_word: float = 0.0
    cpu_us_per_word_by_thread: dict[str, float] = field(default_factory=dict)  # by thread name
    words: int = 0  # streamed in the measuring window
    word_window_ns: tuple[int, int] = (0, 0)
    probe_window_ns: tuple[int, int] = (0, 0)


async def probe(port: int, provider_port: int, client: type[Client]) -> Phase:
    """SAMPLES probe turns, one at a time, each followed by a direct call to the provider."""
    phase = Phase()
    direct = await Connection.open(HOST, provider_port)
    conversation: Client | None = None
    started = time.monotonic_ns()
    for n in range(SAMPLES):
        if n % TURNS == 0:
            if conversation is not None:
                conversation.close()
            conversation = await client(port).open()
        assert conversation is not None
        await asyncio.sleep(random.uniform(0, PROBE_GAP))
        phase.probes.add(await conversation.turn())
        phase.direct.add(await direct_turn(direct))
    assert conversation is not None
    conversation.close()
    direct.close()
    phase.probe_window_ns = (started, time.monotonic_ns())
    return phase


async def load_phase(port: int, provider_port: int, pid: int, kind: str, load: str) -> Phase:
    if load == "idle":
        return await probe(port, provider_port, CLIENTS[kind])
    model, count = load.split(":")
    background = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.support.background", str(port), str(provider_port), kind, model, count,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert background.stdin is not None and background.stdout is not None
    stdin, stdout = background.stdin, background.stdout

    async def ask(command: str) -> str:
        stdin.write(command.encode() + b"\n")
        await stdin.drain()
        return (await stdout.readline()).decode().strip()

    try:
        assert (await stdout.readline()).strip() == b"streaming"
        if CPROFILE:
            os.kill(_tree(pid)[-1], signal.SIGUSR1)  # cprofile_site profiles the loop thread over the window
        cpu, threads, words, started = cpu_seconds(pid), thread_seconds(pid), int(await ask("words")), time.monotonic_ns()
        await asyncio.sleep(WORD_WINDOW)  # a measuring window, not a wait for anything
        streamed, ended = int(await ask("words")) - words, time.monotonic_ns()
        spent, by_thread = cpu_seconds(pid) - cpu, thread_cpu_by_name(threads, thread_seconds(pid))
        if CPROFILE:
            os.kill(_tree(pid)[-1], signal.SIGUSR2)
            print(f"profile of {load}'s streaming window: {streamed} words")
        phase = await probe(port, provider_port, CLIENTS[kind])
        phase.words_per_s, phase.cpu_us_per_word = streamed / ((ended - started) / 1e9), spent * 1e6 / max(streamed, 1)
        phase.words, phase.word_window_ns = streamed, (started, ended)
        phase.cpu_us_per_word_by_thread = {name: seconds * 1e6 / max(streamed, 1) for name, seconds in by_thread.items()}
        assert await ask("stop") == "stopped"
    finally:
        if background.returncode is None:
            background.kill()
        await background.wait()
    return phase


@dataclass
class Server:
    name: str
    port: int
    kind: str  # how its RunSSE speaks: "frames" or "relay" (support/background.py)
    proc: subprocess.Popen[bytes] | None = None
    ready_seconds: list[float] = field(default_factory=list)  # spawn → ready, each spawn
    peak_rss_kib: int = 0
    peak_pss_kib: int = 0
    burst: Samples = field(default_factory=Samples)
    cpu_us_per_start: float = 0.0
    loop_cpu_us_per_start: float = 0.0
    commit_cpu_us_per_start: float = 0.0  # the durable floor's: its commit's own loop CPU
    held_window_ns: tuple[int, int] = (0, 0)
    phases: dict[str, Phase] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def client(self) -> type[Client]:
        return CLIENTS[self.kind]

    @property
    def ready(self) -> float:
        return statistics.median(self.ready_seconds)


async def warm_up(server: Server, provider_port: int) -> None:
    first = await server.client(server.port).open()
    await first.turn()
    first.close()


async def peak_memory(server: Server, provider_port: int) -> None:
    """Peak RSS (and PSS) while RSS_CONVERSATIONS conversations take their turns, 8 at a time."""
    work = asyncio.ensure_future(concurrent(server.port, 8, RSS_CONVERSATIONS * TURNS, client=server.client))
    while True:
        server.peak_rss_kib, server.peak_pss_kib = max(server.peak_rss_kib, rss_kib(server.pid)), max(server.peak_pss_kib, pss_kib(server.pid))
        if work.done():
            return await work
        await asyncio.sleep(0.05)  # a sampling interval


async def start_burst(server: Server, provider_port: int) -> None:
    server.burst = await burst(server.port, BURST, client=server.client)


async def cpu_per_start(server: Server, provider_port: int) -> None:
    await warm_provider_pool(server.port, provider_port, HELD, client=server.client)
    clients = [await server.client(server.port).open() for _ in range(HELD)]
    journaled = await journal_stats(server.port) if server.name == "durable" else None
    started = time.monotonic_ns()
    rates = await cpu_per_start_by_thread(provider_port, server.pid, clients)
    server.held_window_ns = (started, time.monotonic_ns())
    server.cpu_us_per_start, server.loop_cpu_us_per_start = rates.process, rates.loop
    if journaled is not None:
        server.commit_cpu_us_per_start = await commit_cpu_us(server.port, journaled)
    for c in clients:
        c.close()


def phase_step(load: str) -> Callable[[Server, int], Awaitable[None]]:
    async def step(server: Server, provider_port: int) -> None:
        server.phases[load] = await load_phase(server.port, provider_port, server.pid, server.kind, load)

    return step


async def measure(servers: list[Server], provider_port: int) -> None:
    """Each step on every server before the next step, the servers' order rotating from step to
    step: the figures a ratio compares are taken seconds apart, under the same outside load."""
    steps = [warm_up, peak_memory, start_burst, cpu_per_start, *(phase_step(load) for load in LOADS)]
    for n, step in enumerate(steps):
        for server in servers[n % len(servers):] + servers[:n % len(servers)]:
            await step(server, provider_port)


def server_command(name: str, port: int, config_path: Path) -> tuple[list[str], str]:
    """How to start a target (ours from `config_path`), and the path its readiness is asked on."""
    if name in OURS:
        return [str(Path(sys.executable).with_name("cursor-byok")), "serve", "--config", str(config_path)], "/__byok-api__/healthz"
    return granian(FLOOR_APPS[name], port), "/healthz"


def stamp_provider(*args: str) -> tuple[dict[str, str], subprocess.Popen[bytes], str]:
    """The fake provider (`benchmarks.support.stamp_provider` with `args`) started and healthy: the
    servers' environment (pointing at it), its process, its root URL."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{SRC}", "CURSOR_BYOK_TEST_KEY": "sk-bench"}
    port = free_port()
    provider = subprocess.Popen([sys.executable, "-m", "benchmarks.support.stamp_provider", str(port), *args],
                                env=env, cwd=ROOT)
    root = f"http://{HOST}:{port}"
    env["BENCH_PROVIDER_URL"] = f"{root}/v1"
    wait_healthy(f"{root}/control/count")
    return env, provider, root


@pytest.mark.timeout(3600)
@pytest.mark.benchmark(group="turn-start-load")
def test_turn_start_under_load(benchmark, tmp_path: Path) -> None:
    load_before = os.getloadavg()[0]
    env, provider, root = stamp_provider(PROBE_CHUNKS, PROBE_INTERVAL_MS, LONG_WORDS, FAST_BATCH)
    provider_port = int(root.rsplit(":", 1)[1])
    config = ServerConfig(
        data_dir=tmp_path,
        models=[ModelSpec(id=model, provider="openai-chat", base_url=f"{root}{prefix}/v1", max_output_tokens=1000)
                for model, prefix in ((MODEL, ""), ("fast", "/fast"), ("w50", "/w50"))],
        continuation_window_seconds=0.02,
        extra_server={"max_transports": 4096},
    )
    servers = [Server(name, free_port(), "relay" if name == "bare" else "frames") for name in TARGETS]
    for server in servers:
        if server.name in OURS:
            config.data_dir = tmp_path / server.name
            config.data_dir.mkdir()
            (config.data_dir / "config.toml").write_text(config.toml(server.port))

    def run_all() -> None:
        for spawned in range(READY_SPAWNS):  # spawns alternate between the servers; the last ones stay up
            for server in servers:
                cmd, health = server_command(server.name, server.port, tmp_path / server.name / "config.toml")
                path = f"{ROOT}:{OURS.get(server.name, SRC)}:{CPROFILE_SITE}"
                site_env = {"BENCH_GC_OUT": f"{GC_LOG}-{server.name}"} if GC_LOG else {}
                if CPROFILE:
                    site_env["BENCH_CPROFILE_OUT"] = f"{CPROFILE}-{server.name}"
                proc_env = {**env, "PYTHONPATH": path, DB_ENV: str(tmp_path / "durable.db"), **site_env}
                server.proc, ready = spawn(cmd, proc_env, server.port, health, tmp_path / f"{server.name}.log")
                server.ready_seconds.append(ready)
                if spawned < READY_SPAWNS - 1:
                    stop(server.proc)
        asyncio.run(measure(servers, provider_port))

    try:
        benchmark.pedantic(run_all, rounds=1, iterations=1)
    finally:
        stop_all([server.proc for server in servers], provider)
    report(benchmark.extra_info, {server.name: server for server in servers})
    print(f"machine load (1-minute average) {load_before:.2f} at the start, {os.getloadavg()[0]:.2f} at the end;"
          f" ours from {SRC}" + (f", before from {BEFORE_SRC}" if BEFORE_SRC else ""))


def _added(phase: Phase, q: float) -> float:
    """Added time to first token at quantile q, ms: the probes' TTFT minus the direct calls'."""
    return pct(phase.probes.ttft_ns, q) - pct(phase.direct.ttft_ns, q)


def report(info: dict[str, object], servers: dict[str, Server]) -> None:
    names = list(servers)
    print(f"\nturn start under load: {SAMPLES} probes per phase, 2,000-word user messages, background answers of"
          f" {LONG_WORDS} words ({FAST_BATCH} per provider write when fast), {TURNS} turns per conversation")
    print("ms, p50 / p99; added TTFT = probe TTFT − direct call's TTFT in the same phase")
    for load in LOADS:
        print(f"-- {load}")
        for name in names:
            phase = servers[name].phases[load]
            p = phase.probes
            line = (f"  {name:>7}: append→provider {pct(p.to_provider_ns, 0.5):7.2f} / {pct(p.to_provider_ns, 0.99):7.2f}"
                    f" | TTFT {pct(p.ttft_ns, 0.5):7.2f} / {pct(p.ttft_ns, 0.99):7.2f}"
                    f" | added {_added(phase, 0.5):+7.2f} / {_added(phase, 0.99):+7.2f}"
                    f" | direct TTFT {pct(phase.direct.ttft_ns, 0.5):.2f} / {pct(phase.direct.ttft_ns, 0.99):.2f}")
            if phase.words_per_s:
                threads = ", ".join(f"{thread} {us:.1f}" for thread, us in sorted(phase.cpu_us_per_word_by_thread.items(), key=lambda t: -t[1]) if us >= 0.5)
                line += f" | {phase.words_per_s:,.0f} words/s, CPU {phase.cpu_us_per_word:.1f} µs/word ({threads})"
            print(line)
            info.update({f"{name}_{load}_to_provider_p50_ms": round(pct(p.to_provider_ns, 0.5), 3),
                         f"{name}_{load}_to_provider_p99_ms": round(pct(p.to_provider_ns, 0.99), 3),
                         f"{name}_{load}_added_ttft_p50_ms": round(_added(phase, 0.5), 3),
                         f"{name}_{load}_added_ttft_p99_ms": round(_added(phase, 0.99), 3),
                         f"{name}_{load}_cpu_us_per_word": round(phase.cpu_us_per_word, 2)})
    for name in names:
        s = servers[name]
        print(f"{name:>7}: {BURST} within 1 s, append→provider {pct(s.burst.to_provider_ns, 0.5):.2f} / {pct(s.burst.to_provider_ns, 0.99):.2f} ms;"
              f" CPU per start {s.cpu_us_per_start:,.0f} µs (event loop thread {s.loop_cpu_us_per_start:,.0f});"
              f" peak RSS over {RSS_CONVERSATIONS} conversations {s.peak_rss_kib / 1024:.1f} MiB (PSS {s.peak_pss_kib / 1024:.1f});"
              f" spawn → ready {s.ready * 1000:.0f} ms" + (f"; its commit's own loop CPU {s.commit_cpu_us_per_start:.0f} µs per start" if name == "durable" else ""))
        info.update({f"{name}_burst_p50_ms": round(pct(s.burst.to_provider_ns, 0.5), 3), f"{name}_burst_p99_ms": round(pct(s.burst.to_provider_ns, 0.99), 3),
                     f"{name}_cpu_us_per_start": round(s.cpu_us_per_start), f"{name}_peak_rss_mib": round(s.peak_rss_kib / 1024, 1),
                     f"{name}_ready_ms": round(s.ready * 1000)})
    if GC_LOG:
        collections(servers)
    if {"floor", "bare"} <= set(servers):
        for name in OURS:
            if name in servers:
                targets(servers[name], servers["floor"], servers["bare"], servers.get("durable"))
    if {"durable", "floor"} <= set(servers):
        durable, floor = servers["durable"], servers["floor"]
        for name in OURS:
            if name in servers:
                durable_share(info, name, durable.commit_cpu_us_per_start,
                              *((s.cpu_us_per_start, s.loop_cpu_us_per_start) for s in (servers[name], durable, floor)))


def collections(servers: dict[str, Server]) -> None:
    """Each server's garbage collections per step (its own log, BENCH_GC)."""
    print("garbage collections: count (per start or per 1,000 streamed words), wall ms p50/p99/max, by generation")
    for name, s in servers.items():
        windows = [(f"{HELD} held starts", s.held_window_ns, HELD, "start")]
        for load, phase in s.phases.items():
            if phase.words:
                windows.append((f"{load} streaming", phase.word_window_ns, phase.words / 1000, "kword"))
            windows.append((f"{load} probes", phase.probe_window_ns, SAMPLES, "start"))
        for label, (start, end), per, unit in windows:
            print(f"  {name:>6} {label:<18} {gc_log.summary(gc_log.read(f'{GC_LOG}-{name}', start, end), per, unit)}")


def targets(ours: Server, floor: Server, bare: Server, durable: Server | None) -> None:
    """The issue's targets, each as read off this run; with the durable floor in the run, beside each
    target that is a ratio to the floor ours over the durable floor (and the durable floor over the
    floor), beside the others the durable floor's own figure."""
    rows: list[tuple[str, Callable[[Server], float], float, bool]] = []  # what, a server's figure, limit, over the floor's
    if "idle" in ours.phases:
        rows.append(("1 conversation: append→provider p50, × floor", lambda s: pct(s.phases["idle"].probes.to_provider_ns, 0.5), 2.0, True))
        rows.append(("1 conversation: added TTFT p50, ms", lambda s: _added(s.phases["idle"], 0.5), 2.5, False))
    for load in ours.phases:
        if load.startswith("fast:"):
            for q, label in ((0.5, "p50"), (0.99, "p99")):
                rows.append((f"{load.split(':')[1]} streaming fast: TTFT {label}, × bare app",
                             lambda s, load=load, q=q: pct(s.phases[load].probes.ttft_ns, q) / pct(bare.phases[load].probes.ttft_ns, q), 5.0, False))
        elif load.startswith("w50:"):
            rows.append((f"{load.split(':')[1]} streaming at 50 words/s: added TTFT p99, ms", lambda s, load=load: _added(s.phases[load], 0.99), 5.0, False))
    rows.append((f"{BURST} within 1 s: append→provider p99, × floor", lambda s: pct(s.burst.to_provider_ns, 0.99), 10.0, True))
    rows.append(("CPU per start, × floor", lambda s: s.cpu_us_per_start, 1.5, True))
    rows.append((f"peak RSS over {RSS_CONVERSATIONS} conversations, MiB", lambda s: s.peak_rss_kib / 1024, 90.0, False))
    rows.append(("spawn → ready, × bare app", lambda s: s.ready / bare.ready, 1.2, False))
    print(f"targets (issue 35), {ours.name}" + (" | beside: ours × durable (durable × floor), else durable's own" if durable else "") + ":")
    for what, figure, limit, over_floor in rows:
        measured = figure(ours) / figure(floor) if over_floor else figure(ours)
        line = f"  {what:<52} {measured:8.2f}  ≤ {limit:<5g} {'met' if measured <= limit else 'NOT met':<8}"
        if durable is not None:
            line += (f" | {figure(ours) / figure(durable):.2f} ({figure(durable) / figure(floor):.2f})" if over_floor
                     else f" | {figure(durable):.2f}")
        print(line)
    for load, phase in ours.phases.items():
        if phase.cpu_us_per_word:
            print(f"  report: CPU per streamed word ({load}), × bare app {phase.cpu_us_per_word / bare.phases[load].cpu_us_per_word:.2f},"
                  f" × floor {phase.cpu_us_per_word / floor.phases[load].cpu_us_per_word:.2f}")
