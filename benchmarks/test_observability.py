"""What recording costs: the streaming and turn-start benchmarks against two servers in the same run,
one with observability on (the default: call records, run rows, metrics, run log line) and one with
`[observability] enabled = false`. Rounds alternate on/off so load on a shared machine falls on both.

    .venv/bin/python -m pytest -q benchmarks/test_observability.py -s

Knobs: BENCH_OBS_ROUNDS=3 (alternating pairs), BENCH_TRANSPORTS/BENCH_APPENDS/BENCH_FRAMES/
BENCH_INTERVAL_MS as in test_gateway.py, BENCH_HELD=100 (run starts measured per round),
BENCH_TURN_SAMPLES=96 (turns for the one-conversation latency).
"""
from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.test_gateway import FRAMES, INTERVAL_MS, ROOT, TRANSPORTS, scenario, wait_healthy
from benchmarks.test_turn_start import HOST, Client, concurrent, cpu_per_start, pct, warm_provider_pool
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess, free_port

ROUNDS = int(os.environ.get("BENCH_OBS_ROUNDS", "3"))
HELD = int(os.environ.get("BENCH_HELD", "100"))
SAMPLES = int(os.environ.get("BENCH_TURN_SAMPLES", "96"))
OFF = "[observability]\nenabled = false\n"


def servers(tmp_path: Path, provider_port: int, env: dict[str, str], **server: object) -> dict[str, ServerProcess]:
    """`cursor-byok serve` twice on the same provider: observability on and off."""
    out: dict[str, ServerProcess] = {}
    try:
        for name, extra in (("on", ""), ("off", OFF)):
            config = ServerConfig(
                data_dir=tmp_path / name,
                models=[ModelSpec(id="bench", provider="openai-chat", base_url=f"http://{HOST}:{provider_port}/v1", max_output_tokens=1000)],
                continuation_window_seconds=0.02,
                extra_server=dict(server),
                extra_toml=extra,
            )
            out[name] = ServerProcess(config, env=env).start()
    except BaseException:
        for started in out.values():
            started.stop()
        raise
    return out


def listening(port: int) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection((HOST, port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def ratio(on: list[float], off: list[float]) -> float:
    return statistics.median(on) / statistics.median(off)


@pytest.mark.timeout(3600)
@pytest.mark.benchmark(group="observability")
def test_recording_cost_on_streaming(benchmark, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}", "CURSOR_BYOK_TEST_KEY": "sk-bench"}
    provider_port = free_port()
    provider = subprocess.Popen([sys.executable, "-m", "benchmarks.support.ts_provider", str(provider_port), str(FRAMES), str(INTERVAL_MS)], env=env, cwd=ROOT)
    listening(provider_port)
    both = servers(tmp_path, provider_port, env, max_transports=TRANSPORTS * 4)
    cpu: dict[str, list[float]] = {"on": [], "off": []}
    p50: dict[str, list[float]] = {"on": [], "off": []}
    try:
        def run() -> None:
            for _ in range(ROUNDS):
                for name in ("on", "off") if len(cpu["on"]) % 2 == 0 else ("off", "on"):
                    target = both[name]
                    out = asyncio.run(scenario(HOST, target.port, "bench", target.proc.pid))  # type: ignore[union-attr]
                    assert not out.errors and out.frames == TRANSPORTS * FRAMES, out.errors[:3]
                    row = out.row()
                    cpu[name].append(row["cpu_us_per_delta"])
                    p50[name].append(row["p50_ms"])

        benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        for target in both.values():
            target.stop()
        provider.terminate()
        provider.wait(10)
    info = benchmark.extra_info
    info.update(cpu_ratio=round(ratio(cpu["on"], cpu["off"]), 3), p50_ratio=round(ratio(p50["on"], p50["off"]), 3))
    print(f"\nstreaming, {TRANSPORTS} transports x {FRAMES} deltas, {ROUNDS} rounds each (alternating)")
    for name in ("on", "off"):
        print(f"  observability {name:3}: CPU µs/delta {', '.join(f'{v:.1f}' for v in cpu[name])};  p50 ms {', '.join(f'{v:.2f}' for v in p50[name])}")
    print(f"  on/off (medians): CPU per delta {info['cpu_ratio']:.3f}, p50 latency {info['p50_ratio']:.3f}")


@pytest.mark.timeout(3600)
@pytest.mark.benchmark(group="observability")
def test_recording_cost_on_turn_start(benchmark, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}", "CURSOR_BYOK_TEST_KEY": "sk-bench"}
    provider_port = free_port()
    provider = subprocess.Popen([sys.executable, "-m", "benchmarks.support.stamp_provider", str(provider_port), "10", "20"], env=env, cwd=ROOT)
    wait_healthy(f"http://{HOST}:{provider_port}/control/count")
    both = servers(tmp_path, provider_port, env, max_transports=4096)
    cpu: dict[str, list[float]] = {"on": [], "off": []}
    latency: dict[str, list[int]] = {"on": [], "off": []}
    try:
        async def prepare(port: int) -> None:
            first = await Client(port).open()
            await first.turn()
            first.close()
            await warm_provider_pool(port, provider_port, HELD)

        async def one_round(name: str) -> None:
            target = both[name]
            clients = [await Client(target.port).open() for _ in range(HELD)]
            cpu[name].append(await cpu_per_start(provider_port, target.proc.pid, clients))  # type: ignore[union-attr]
            for c in clients:
                c.close()
            latency[name] += (await concurrent(target.port, 1, max(1, SAMPLES // ROUNDS))).to_provider_ns

        def run() -> None:
            for name in ("on", "off"):
                asyncio.run(prepare(both[name].port))
            for n in range(ROUNDS):
                for name in ("on", "off") if n % 2 == 0 else ("off", "on"):
                    asyncio.run(one_round(name))
                    time.sleep(0.5)

        benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        for target in both.values():
            target.stop()
        provider.terminate()
        provider.wait(10)
    info = benchmark.extra_info
    on50, off50 = pct(latency["on"], 0.5), pct(latency["off"], 0.5)
    info.update(cpu_ratio=round(ratio(cpu["on"], cpu["off"]), 3), p50_ratio=round(on50 / off50, 3))
    print(f"\nturn start: {HELD} held run starts x {ROUNDS} rounds each (alternating), {SAMPLES} one-conversation turns")
    for name in ("on", "off"):
        print(f"  observability {name:3}: CPU µs per run start {', '.join(f'{v:.0f}' for v in cpu[name])};"
              f"  append→provider p50 {pct(latency[name], 0.5):.2f} ms, p99 {pct(latency[name], 0.99):.2f} ms")
    print(f"  on/off (medians): CPU per run start {info['cpu_ratio']:.3f}, append→provider p50 {info['p50_ratio']:.3f}")
