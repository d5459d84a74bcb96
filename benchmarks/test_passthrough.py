"""Upstream passthrough latency: sequential unary requests on one keep-alive connection, straight
to a stand-in origin, through a bare granian app that forwards them with the same HTTP client, and
through the real `cursor-byok serve` (its upstream pointed at the stand-in), in one run.

What ours adds to every request Cursor sends for a model it does not serve locally is the
difference to "direct"; against "bare-forward" it is the cost of our own routing and header rules.

    .venv/bin/python -m pytest -q benchmarks/test_passthrough.py -s      (BENCH_REQUESTS=2000)
"""
from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.support.rawhttp import Connection
from benchmarks.test_gateway import ROOT, wait_healthy
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess, free_port

REQUESTS = int(os.environ.get("BENCH_REQUESTS", "2000"))
PATH = "/aiserver.v1.AiService/StreamCpp"
BODY = b"\x0a\x20" + b"r" * 300


async def timed_requests(port: int) -> list[float]:
    conn = await Connection.open("127.0.0.1", port)
    out: list[float] = []
    try:
        for _ in range(REQUESTS):
            started = time.perf_counter()
            status, _ = await conn.post(PATH, BODY)
            out.append(time.perf_counter() - started)
            assert status == 200, status
    finally:
        conn.close()
    return sorted(out[50:])  # past warm-up (connection pools, caches)


def summary(samples: list[float]) -> tuple[float, float]:
    return statistics.median(samples) * 1e3, samples[int(len(samples) * 0.99)] * 1e3


@pytest.mark.timeout(900)
@pytest.mark.benchmark(group="passthrough")
def test_passthrough_latency_vs_direct(benchmark, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}"}
    origin_port, bare_port = free_port(), free_port()
    origin = subprocess.Popen([sys.executable, "-m", "benchmarks.support.origin", str(origin_port)], env=env, cwd=ROOT)
    env["BENCH_ORIGIN_URL"] = f"http://127.0.0.1:{origin_port}"
    bare = subprocess.Popen(
        [sys.executable, "-m", "granian", "--interface", "asgi", "--loop", "uvloop", "--host", "127.0.0.1", "--port", str(bare_port),
         "--workers", "1", "--no-ws", "benchmarks.support.bare_forward_app:app"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    config = ServerConfig(
        data_dir=tmp_path / "data",
        models=[ModelSpec(id="local-only", provider="openai-chat", base_url="http://127.0.0.1:9/v1")],
        upstream=f"http://127.0.0.1:{origin_port}",
    )
    ours = ServerProcess(config)
    results: dict[str, list[float]] = {}
    try:
        ours.start()
        wait_healthy(f"http://127.0.0.1:{bare_port}/healthz")

        def run_all() -> None:
            results["direct"] = asyncio.run(timed_requests(origin_port))
            results["bare-forward"] = asyncio.run(timed_requests(bare_port))
            results["ours"] = asyncio.run(timed_requests(ours.port))

        benchmark.pedantic(run_all, rounds=1, iterations=1)
    finally:
        ours.stop()
        for proc in (bare, origin):
            proc.terminate()
            proc.wait(10)
    rows = {name: summary(samples) for name, samples in results.items()}
    for name, (p50, p99) in rows.items():
        benchmark.extra_info[f"{name}_p50_ms"] = round(p50, 3)
        benchmark.extra_info[f"{name}_p99_ms"] = round(p99, 3)
    print(f"\n{REQUESTS} sequential unary requests on one keep-alive connection")
    for name, (p50, p99) in rows.items():
        print(f"{name:14}p50 {p50:7.3f} ms   p99 {p99:7.3f} ms")
    added = rows["ours"][0] - rows["direct"][0]
    print(f"added by ours (p50): {added:.3f} ms; ours / bare-forward p50: {rows['ours'][0] / rows['bare-forward'][0]:.2f}")
