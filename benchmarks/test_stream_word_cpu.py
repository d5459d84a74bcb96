"""CPU per streamed word, side by side: servers streaming at once, each measured over the same windows.

    BENCH_BEFORE_SRC=<another checkout>/src .venv/bin/python -m pytest -q -s -p no:randomly benchmarks/test_stream_word_cpu.py

The load phases of `test_turn_start_load.py` measure one server at a time, seconds apart: on a
shared machine the outside load moves between them by more than a change of a few µs per word.
Here every server (ours from BENCH_SRC, **before** from BENCH_BEFORE_SRC, the **floor**
`support/bare_turn_app.py`) has its own COUNT background conversations streaming 2,000-word
answers at 50 words/s from one stamp provider (`support/background.py`, as the "w50:32" load), all
at the same time; then WINDOWS windows of WINDOW_S seconds, in each of which every server's CPU
per streamed word is read over the same stretch: the process's, and its event loop thread's
(schedstat), and the loop thread's context switches per word (/proc status). Reported: each window's figures and the median per server, and the median of the
per-window ratios to the first server (a ratio of two figures taken under the same load).

Knobs: BENCH_STREAM_TARGETS="ours,before,floor" ("ours,floor" without BENCH_BEFORE_SRC),
BENCH_STREAM_COUNT=32, BENCH_STREAM_WINDOWS=8, BENCH_STREAM_WINDOW_S=3, BENCH_SRC, BENCH_BEFORE_SRC.
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

from benchmarks.test_gateway import _tree
from benchmarks.test_turn_start import MODEL, ROOT, SRC, cpu_seconds, loop_thread_seconds, spawn, stop_all
from benchmarks.test_turn_start_load import OURS, server_command, stamp_provider
from tests.harness.server import ModelSpec, ServerConfig, free_port

BEFORE_SRC = os.environ.get("BENCH_BEFORE_SRC", "")
TARGETS = os.environ.get("BENCH_STREAM_TARGETS", "ours,before,floor" if BEFORE_SRC else "ours,floor").split(",")
COUNT = int(os.environ.get("BENCH_STREAM_COUNT", "32"))
WINDOWS = int(os.environ.get("BENCH_STREAM_WINDOWS", "8"))
WINDOW_S = float(os.environ.get("BENCH_STREAM_WINDOW_S", "3"))


@dataclass
class Streamer:
    name: str
    port: int
    proc: subprocess.Popen[bytes] | None = None
    background: asyncio.subprocess.Process | None = None
    per_word: list[float] = field(default_factory=list)  # process CPU µs per word, by window
    loop_per_word: list[float] = field(default_factory=list)  # event loop thread's
    voluntary_per_word: list[float] = field(default_factory=list)  # the loop thread's context switches: it waited
    involuntary_per_word: list[float] = field(default_factory=list)  # … it was preempted

    async def ask(self, command: str) -> str:
        assert self.background is not None and self.background.stdin is not None and self.background.stdout is not None
        self.background.stdin.write(command.encode() + b"\n")
        await self.background.stdin.drain()
        return (await self.background.stdout.readline()).decode().strip()


async def start_streams(s: Streamer, provider_port: int) -> None:
    assert s.proc is not None
    s.background = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.support.background", str(s.port), str(provider_port), "frames", "w50", str(COUNT),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert s.background.stdout is not None
    assert (await s.background.stdout.readline()).strip() == b"streaming"


def loop_switches(pid: int) -> tuple[int, int]:
    """The event loop thread's context switches so far: voluntary (it waited: for I/O, or for the
    interpreter lock another thread held) and involuntary (preempted)."""
    p = _tree(pid)[-1]
    fields = dict(line.split(":\t") for line in Path(f"/proc/{p}/task/{p}/status").read_text().splitlines() if ":\t" in line)
    return int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"])


async def windows(streamers: list[Streamer], provider_port: int) -> None:
    await asyncio.gather(*(start_streams(s, provider_port) for s in streamers))
    try:
        for _ in range(WINDOWS):
            marks = [(cpu_seconds(s.proc.pid), loop_thread_seconds(s.proc.pid), loop_switches(s.proc.pid), int(await s.ask("words")))  # type: ignore[union-attr]
                     for s in streamers]
            await asyncio.sleep(WINDOW_S)  # a measuring window, not a wait for anything
            for s, (cpu, loop, (voluntary, forced), words) in zip(streamers, marks):
                streamed = max(int(await s.ask("words")) - words, 1)
                now = loop_switches(s.proc.pid)  # type: ignore[union-attr]
                s.voluntary_per_word.append((now[0] - voluntary) / streamed)
                s.involuntary_per_word.append((now[1] - forced) / streamed)
                s.per_word.append((cpu_seconds(s.proc.pid) - cpu) * 1e6 / streamed)  # type: ignore[union-attr]
                s.loop_per_word.append((loop_thread_seconds(s.proc.pid) - loop) * 1e6 / streamed)  # type: ignore[union-attr]
    finally:
        for s in streamers:
            if s.background is not None and s.background.returncode is None:
                s.background.kill()
                await s.background.wait()


@pytest.mark.timeout(1800)
@pytest.mark.benchmark(group="stream-word-cpu")
def test_stream_word_cpu(benchmark, tmp_path: Path) -> None:
    # Its arguments as the load benchmark's: short answers (2 chunks 5 ms apart), 2,000-word long ones, 1 word a write.
    env, provider, root = stamp_provider("2", "5", "2000", "1")
    provider_port = int(root.rsplit(":", 1)[1])
    config = ServerConfig(
        data_dir=tmp_path,
        models=[ModelSpec(id=model, provider="openai-chat", base_url=f"{root}{prefix}/v1", max_output_tokens=1000)
                for model, prefix in ((MODEL, ""), ("w50", "/w50"))],
        continuation_window_seconds=0.02,
        extra_server={"max_transports": 4096},
    )
    streamers = [Streamer(name, free_port()) for name in TARGETS]

    def run_all() -> None:
        for s in streamers:
            if s.name in OURS:
                config.data_dir = tmp_path / s.name
                config.data_dir.mkdir()
                (config.data_dir / "config.toml").write_text(config.toml(s.port))
            cmd, health = server_command(s.name, s.port, tmp_path / s.name / "config.toml")
            path = f"{ROOT}:{OURS.get(s.name, SRC)}:{ROOT / 'benchmarks' / 'support' / 'cprofile_site'}"
            s.proc, _ = spawn(cmd, {**env, "PYTHONPATH": path}, s.port, health, tmp_path / f"{s.name}.log")
        asyncio.run(windows(streamers, provider_port))

    load_before = os.getloadavg()[0]
    started = time.monotonic()
    try:
        benchmark.pedantic(run_all, rounds=1, iterations=1)
    finally:
        stop_all([s.proc for s in streamers], provider)
    first = streamers[0]
    print(f"\nCPU per streamed word, µs, {len(streamers)} servers × {COUNT} streams at 50 words/s at once,"
          f" {WINDOWS} windows of {WINDOW_S:g} s (process / event loop thread)")
    for s in streamers:
        print(f"  {s.name:>6}: " + "  ".join(f"{p:5.1f}/{q:4.1f}" for p, q in zip(s.per_word, s.loop_per_word))
              + f"  | median {statistics.median(s.per_word):5.1f} / {statistics.median(s.loop_per_word):5.1f};"
              f" loop thread's context switches per word {statistics.median(s.voluntary_per_word):.2f} voluntary,"
              f" {statistics.median(s.involuntary_per_word):.2f} involuntary")
        benchmark.extra_info[f"{s.name}_cpu_us_per_word"] = round(statistics.median(s.per_word), 2)
        benchmark.extra_info[f"{s.name}_loop_cpu_us_per_word"] = round(statistics.median(s.loop_per_word), 2)
    for s in streamers[1:]:
        ratio = statistics.median(a / b for a, b in zip(first.per_word, s.per_word))
        loop_ratio = statistics.median(a / b for a, b in zip(first.loop_per_word, s.loop_per_word))
        print(f"  {first.name} / {s.name}, median of the windows' ratios: process {ratio:.3f}, event loop {loop_ratio:.3f}")
    print(f"machine load (1-minute average) {load_before:.2f} at the start, {os.getloadavg()[0]:.2f} at the end,"
          f" {time.monotonic() - started:.0f} s; ours from {SRC}" + (f", before from {BEFORE_SRC}" if BEFORE_SRC else ""))
