"""Cold start: from spawning `cursor-byok serve` to its first answered request (/healthz), to ready
(the health check's first answer not marked as still starting), and, in a second start, to the
first token of a turn the IDE sends as soon as the health check answers; against the floor (a bare
granian + aiohttp + uvloop app, `support/bare_turn_app.py`, started by granian's own command line,
forwarding the turn to the same fake provider); in a third start, the first and second turns sent
half a second after it is ready (what a first turn still pays once); and the light commands
(`--help`, `--version`, `doctor`) from spawn to exit.

Rounds are interleaved (ours, floor, any variant, ours, ...) so load from elsewhere on the machine
falls on all alike; medians, and ours/floor per round. Wall time swings with the machine's load;
the CPU the server's processes used by their first answer (from /proc) much less.

    .venv/bin/python -m pytest -q benchmarks/test_cold_start.py -s
    BENCH_COLD_ROUNDS=15 (default 9)
    BENCH_COLD_VARIANTS="before=/path/to/other/src"   also run `serve` from other source trees

Bytecode matters here: where PYTHONDONTWRITEBYTECODE is set, a source tree without `__pycache__`
is compiled again by every process (`make bytecode` writes it; `python -m compileall -q DIR` for
another tree).
"""
from __future__ import annotations

import asyncio
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.support.cold_start import CONFIG, HOST, Start, cold_start, first_token, turns_after_ready
from tests.fakes import FakeProviderServer

ROUNDS = int(os.environ.get("BENCH_COLD_ROUNDS", "9"))
VARIANTS = dict(v.split("=", 1) for v in os.environ.get("BENCH_COLD_VARIANTS", "").split(",") if v)


def serve_start(which: str, src: str | None, provider: FakeProviderServer) -> Start:
    """One start to ready, one to a first token, one for two turns after ready: in one Start."""
    previous = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = src
    try:
        start = cold_start(which)
        turn = asyncio.run(first_token(which, provider))
        start.first_token, start.first_token_cpu = turn.first_token, turn.first_token_cpu
        start.turn_after_ready, start.second_turn = asyncio.run(turns_after_ready(which, provider))
        return start
    finally:
        if src is not None:
            if previous is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = previous


def command_run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of a command, to its exit."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:6.0f} ({min(values) * 1000:.0f}–{max(values) * 1000:.0f})"


@pytest.mark.timeout(1800)
@pytest.mark.benchmark(group="cold-start")
def test_cold_start_vs_floor(benchmark, tmp_path: Path) -> None:
    targets: dict[str, tuple[str, str | None]] = {"ours": ("ours", None), "floor": ("floor", None)}
    targets.update({name: ("ours", src) for name, src in VARIANTS.items()})
    samples: dict[str, list[Start]] = {name: [] for name in targets}

    def rounds() -> None:
        with FakeProviderServer() as provider:
            for name, (which, src) in targets.items():  # a warm-up each (the page cache)
                serve_start(which, src, provider)
            for _ in range(ROUNDS):
                for name, (which, src) in targets.items():
                    samples[name].append(serve_start(which, src, provider))

    load = os.getloadavg()[0]
    benchmark.pedantic(rounds, rounds=1, iterations=1)

    print("\nserve: spawn → first answered /healthz → ready; (another start) → first token; (a third) two turns")
    print(f"0.5 s after ready, append → first token; {ROUNDS} rounds,")
    print(f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after; median (min–max), ms")
    columns = {
        "health": "health", "ready": "ready", "health_cpu": "CPU to health", "ready_cpu": "CPU to ready", "first_token": "first token",
        "first_token_cpu": "CPU to token", "turn_after_ready": "1st turn, ready", "second_turn": "2nd turn, ready",
    }
    print(f"{'':>8} | " + " | ".join(f"{title:>18}" for title in columns.values()))
    for name, values in samples.items():
        print(f"{name:>8} | " + " | ".join(f"{median_ms([getattr(v, key) for v in values]):>18}" for key in columns))
    for name in samples:
        if name != "floor":
            ratios = {
                key: statistics.median(getattr(a, key) / getattr(b, key) for a, b in zip(samples[name], samples["floor"]))
                for key in columns
            }
            print(f"{name}/floor per round: " + ", ".join(f"{columns[k]} {v:.2f}" for k, v in ratios.items()))

    exe = str(Path(sys.executable).with_name("cursor-byok"))
    config = tmp_path / "config.toml"
    config.write_text(CONFIG.format(host=HOST, port=9, data=tmp_path / "data"))
    print("light commands: spawn → exit, median (min–max)")
    for name, src in {"ours": None, **VARIANTS}.items():
        env = {**os.environ, "CURSOR_BYOK_TEST_KEY": "sk-bench", **({"PYTHONPATH": src} if src else {})}
        for argv in ([exe, "--help"], [exe, "--version"], [exe, "doctor", "--config", str(config)]):
            runs = [command_run(argv, env) for _ in range(ROUNDS)]
            print(f"{name:>8} {argv[1]:>9}: wall {median_ms([r[0] for r in runs])} ms, CPU {median_ms([r[1] for r in runs])} ms")
    assert all(samples.values())
