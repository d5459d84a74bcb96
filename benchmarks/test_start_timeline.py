"""A lone turn start, step by step: where its wall time goes, ours next to the floor's.

    .venv/bin/python -m pytest -q -s -p no:randomly benchmarks/test_start_timeline.py

The idle probe of `test_turn_start_load.py` (conversations of TURNS turns, one turn at a time, a
random pause of up to 40 ms before each, the same prebuilt request sent straight to the provider after each),
against ours, the durable floor (`support/bare_durable_app.py`, whose commit is a step) and the floor
(`support/bare_turn_app.py`), each stamping the steps of every start
(`support/start_timeline.py`, on through BENCH_TIMELINE_OUT). Per step: its p50 time since the IDE
sent the turn's first append, and, ours only, the loop thread's CPU since the step before and the
wall time beyond it (waits: thread hops, other processes on the CPU). The client's own stamps frame
it: the provider has the whole request (`~provider`), the first text reaches the IDE (`~first text`).

The IDE sends RunSSE just before the append, so granian hands both to the loop at once: a start
whose RunSSE the server had taken before the append was even sent (the client's write preempted by
the server) is counted apart, as those starts skip the two requests' interleaving.

With BENCH_TIMELINE_LOAD (a load of `test_turn_start_load.py`, e.g. "w50:32": 32 other conversations
streaming at 50 words/s) every server has that load on while its turns are timed, and the report
adds where the slowest turns lost their time: for the turns whose first text came last (the slowest
`TAIL` share), the median gap before each step against all turns' median gap (a step the streams'
deltas held up shows a gap beyond its own loop CPU).

Knobs: those of the idle probe (BENCH_LOAD_SAMPLES=100 probe turns per server, the first WARM_UP left
out; BENCH_PROBE_GAP_MS=40), BENCH_TIMELINE_LOAD, BENCH_SRC.
"""
from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchmarks.support.bare_durable_app import DB_ENV
from benchmarks.test_turn_start import CPROFILE_SITE, FLOOR_APPS, HOST, MODEL, ROOT, SRC, Client, granian, spawn, stop
from benchmarks.test_turn_start_load import FAST_BATCH, LONG_WORDS, PROBE_CHUNKS, PROBE_INTERVAL_MS, Phase, probe
from benchmarks.test_gateway import wait_healthy
from tests.harness.server import ModelSpec, ServerConfig, free_port

WARM_UP = 10  # turns left out: the first of a fresh server's
PROVIDER, FIRST_TEXT = "~provider", "~first text"
EARLIEST_NS = 2_000_000  # how long before the append is sent a stamp may be its turn's (its RunSSE's)
LOAD = os.environ.get("BENCH_TIMELINE_LOAD", "")  # e.g. "w50:32": other conversations streaming meanwhile
TAIL = 0.05  # the share of turns, slowest first text first, whose gaps the report sets apart


@dataclass
class Turn:
    sent: int  # the first append sent (monotonic ns)
    provider: int  # the provider has the whole request
    first_text: int  # the first text delta reached the IDE
    after: int  # stamps before it are not this turn's (the previous turn's end, or just before it was sent)
    ended: int  # its stream read to the end
    new: bool  # a new conversation's first turn (else a follow-up, with the turns before as history)


@dataclass(frozen=True)
class Stamp:
    ns: int  # monotonic
    cpu: int  # the loop thread's CPU clock
    voluntary: int  # its context switches so far: waits of its own (a lock, the GIL, I/O)
    involuntary: int  # ... and preemptions (another thread or process had the CPU)
    step: str


@dataclass
class Stamps:
    """One server's stamps (`support/start_timeline.py`), in time order."""

    rows: list[Stamp] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> Stamps:
        rows = []
        for line in path.read_text().splitlines():
            *numbers, step = line.split()
            ns, cpu, voluntary, involuntary = map(int, numbers)
            rows.append(Stamp(ns, cpu, voluntary, involuntary, step))
        return cls(sorted(rows, key=lambda s: s.ns))

    def of(self, turn: Turn) -> list[Stamp]:
        """The turn's steps: the first stamp of each step from its RunSSE on to its first text."""
        seen: set[str] = set()
        out = []
        for row in self.rows:
            if row.ns < turn.after or row.ns > turn.first_text or row.step in seen:
                continue
            seen.add(row.step)
            out.append(row)
        return out


class TimedClient(Client):
    """The benchmark's IDE, keeping each turn's client-side stamps."""

    turns: list[Turn] = []
    taken = 0  # turns this conversation has taken

    async def read(self, rid: str, sent: int) -> tuple[int, int]:
        result = await super().read(rid, sent)
        after = max(self.turns[-1].ended if self.turns else 0, sent - EARLIEST_NS)
        self.turns.append(Turn(sent, sent + result[0], sent + result[1], after, time.monotonic_ns(), not self.taken))
        self.taken += 1
        return result


@dataclass
class Timeline:
    name: str
    direct_first_ns: list[int]
    since_sent: dict[str, list[float]] = field(default_factory=dict)  # step → µs after the append was sent
    cpu: dict[str, list[float]] = field(default_factory=dict)  # step → loop CPU µs since the step before
    off_cpu: dict[str, list[float]] = field(default_factory=dict)  # step → wall µs beyond that CPU
    switches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # step → (voluntary, involuntary) since the step before
    provider_split: dict[str, list[float]] = field(default_factory=dict)  # kind of turn → append → provider µs
    gaps: list[tuple[float, dict[str, float]]] = field(default_factory=list)  # per turn: first text µs, step → µs since the step before

    def add(self, turn: Turn, steps: list[Stamp]) -> None:
        previous: Stamp | None = None
        gaps: dict[str, float] = {}
        for s in steps:
            self.since_sent.setdefault(s.step, []).append((s.ns - turn.sent) / 1e3)
            gaps[s.step] = (s.ns - (turn.sent if previous is None else previous.ns)) / 1e3
            if previous is not None:
                self.cpu.setdefault(s.step, []).append((s.cpu - previous.cpu) / 1e3)
                self.off_cpu.setdefault(s.step, []).append(((s.ns - previous.ns) - (s.cpu - previous.cpu)) / 1e3)
                self.switches.setdefault(s.step, []).append((s.voluntary - previous.voluntary, s.involuntary - previous.involuntary))
            previous = s
        gaps[FIRST_TEXT] = (turn.first_text - (turn.sent if previous is None else previous.ns)) / 1e3
        self.gaps.append(((turn.first_text - turn.sent) / 1e3, gaps))
        to_provider = (turn.provider - turn.sent) / 1e3
        self.since_sent.setdefault(PROVIDER, []).append(to_provider)
        self.since_sent.setdefault(FIRST_TEXT, []).append((turn.first_text - turn.sent) / 1e3)
        before = any(s.step == "in:RunSSE" and s.ns < turn.sent for s in steps)
        for kind in (
            "RunSSE taken before the append was sent" if before else "RunSSE and append interleaved",
            "a new conversation's first turn" if turn.new else "a follow-up turn",
        ):
            self.provider_split.setdefault(kind, []).append(to_provider)

    def report(self) -> None:
        turns = len(self.since_sent[PROVIDER])
        direct = statistics.median(self.direct_first_ns) / 1e3
        print(f"\n{self.name}: {turns} lone turns; added TTFT p50 {statistics.median(self.since_sent[FIRST_TEXT]) - direct:.0f} µs"
              f" (direct call's first chunk {direct:.0f} µs)")
        print(f"  {'step':<16} {'p50 µs since sent':>18} {'loop CPU since prev':>20} {'beyond CPU p50 / mean / p95':>28}"
              f" {'switched: own / preempted':>26}")
        for step, values in sorted(self.since_sent.items(), key=lambda kv: statistics.median(kv[1])):
            cpu = self.cpu.get(step)
            extra = ""
            if cpu:
                off = sorted(self.off_cpu[step])
                switches = self.switches[step]
                own = sum(v > 0 for v, _ in switches) / len(switches)
                preempted = sum(i > 0 for _, i in switches) / len(switches)
                beyond = f"{statistics.median(off):>10.0f} / {statistics.mean(off):>6.0f} / {off[int(len(off) * 0.95)]:>6.0f}"
                extra = f"{statistics.median(cpu):>20.0f} {beyond} {own:>15.0%} / {preempted:>7.0%}"
            print(f"  {step:<16} {statistics.median(values):>18.0f} {extra}")
        for what, values in self.provider_split.items():
            print(f"  {what}: {len(values)} turns, append → provider p50 {statistics.median(values):.0f} µs")
        if LOAD:
            self.report_tail()

    def report_tail(self) -> None:
        """The slowest turns' gaps before each step against every turn's (median µs)."""
        ranked = sorted(self.gaps, key=lambda turn: turn[0], reverse=True)
        slow = ranked[: max(1, int(len(ranked) * TAIL))]
        print(f"  the slowest {len(slow)} turns (first text {slow[-1][0]:.0f}–{slow[0][0]:.0f} µs after the append was sent):"
              " median gap before each step, µs, slowest / all")
        steps = sorted(self.since_sent, key=lambda step: statistics.median(self.since_sent[step]))
        for step in steps:
            tail = [gaps[step] for _, gaps in slow if step in gaps]
            every = [gaps[step] for _, gaps in self.gaps if step in gaps]
            if tail and every:
                print(f"    {step:<16} {statistics.median(tail):>8.0f} / {statistics.median(every):>6.0f}")


async def loaded_probe(port: int, provider_port: int) -> Phase:
    """The probe turns, with BENCH_TIMELINE_LOAD's conversations streaming meanwhile (if set)."""
    if not LOAD:
        return await probe(port, provider_port, TimedClient)
    model, count = LOAD.split(":")
    background = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.support.background", str(port), str(provider_port), "frames", model, count,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert background.stdin is not None and background.stdout is not None
    try:
        assert (await background.stdout.readline()).strip() == b"streaming"
        phase = await probe(port, provider_port, TimedClient)
        background.stdin.write(b"stop\n")
        await background.stdin.drain()
        assert (await background.stdout.readline()).strip() == b"stopped"
    finally:
        if background.returncode is None:
            background.kill()
        await background.wait()
    return phase


@pytest.mark.timeout(900)
def test_start_timeline(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{SRC}:{CPROFILE_SITE}", "CURSOR_BYOK_TEST_KEY": "sk-bench"}
    provider_port = free_port()
    provider = subprocess.Popen([sys.executable, "-m", "benchmarks.support.stamp_provider", str(provider_port), PROBE_CHUNKS,
                                 PROBE_INTERVAL_MS, LONG_WORDS, FAST_BATCH], env=env, cwd=ROOT)
    env["BENCH_PROVIDER_URL"] = f"http://{HOST}:{provider_port}/v1"
    timelines = []
    try:
        wait_healthy(f"http://{HOST}:{provider_port}/control/count")
        for name in ("ours", "durable", "floor"):
            port = free_port()
            out = tmp_path / f"{name}.stamps"
            if name == "ours":
                config = ServerConfig(
                    data_dir=tmp_path / "data",
                    models=[ModelSpec(id=model, provider="openai-chat", base_url=f"http://{HOST}:{provider_port}{prefix}/v1", max_output_tokens=1000)
                            for model, prefix in ((MODEL, ""), ("fast", "/fast"), ("w50", "/w50"))],
                    continuation_window_seconds=0.02,
                    extra_server={"max_transports": 4096},
                )
                config.data_dir.mkdir()
                (config.data_dir / "config.toml").write_text(config.toml(port))
                cmd = [str(Path(sys.executable).with_name("cursor-byok")), "serve", "--config", str(config.data_dir / "config.toml")]
                health = "/__byok-api__/healthz"
            else:
                cmd, health = granian(FLOOR_APPS[name], port), "/healthz"
            proc, _ = spawn(cmd, {**env, "BENCH_TIMELINE_OUT": str(out), DB_ENV: str(tmp_path / "durable.db")}, port, health, tmp_path / f"{name}.log")
            TimedClient.turns = []
            try:
                phase = asyncio.run(loaded_probe(port, provider_port))
            finally:
                stop(proc)
            stamps = Stamps.read(out)
            timeline = Timeline(name, phase.direct.ttft_ns[WARM_UP:])
            for turn in TimedClient.turns[WARM_UP:]:
                timeline.add(turn, stamps.of(turn))
            timelines.append(timeline)
    finally:
        provider.terminate()
        provider.wait(10)
    print(f"\nload average {os.getloadavg()[0]:.2f}")
    for timeline in timelines:
        timeline.report()
        assert timeline.since_sent.get("write" if timeline.name == "ours" else "task"), "no start was stamped"
