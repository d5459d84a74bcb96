"""What capture costs while it records, and that it costs nothing measurable while it is off:

- the tap's loop work per body chunk (in process): a route sending 500 chunks, called directly (what
  the gateway does with capture off: one attribute check) and through `Capture.around`;
- the streaming benchmark of test_gateway.py against two servers in the same run, capture on and
  off, rounds alternating so load on a shared machine falls on both.

    .venv/bin/python -m pytest -q benchmarks/test_capture.py -s

Knobs: BENCH_CAPTURE_ROUNDS=2 (alternating pairs), BENCH_TRANSPORTS/BENCH_APPENDS/BENCH_FRAMES/
BENCH_INTERVAL_MS as in test_gateway.py.
"""
from __future__ import annotations

import asyncio
import os
import statistics
from pathlib import Path

import pytest

from benchmarks.test_gateway import FRAMES, TRANSPORTS
from benchmarks.test_observability import STREAMING_PROVIDER, running, streaming_rounds
from cursor_byok.capture import Capture, CaptureSettings, Redactor, write_active
from tests.harness.server import ServerConfig

ROUNDS = int(os.environ.get("BENCH_CAPTURE_ROUNDS", "2"))
CHUNKS = 500


async def _route(scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def]
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    chunk = b"\0\0\0\0\x10" + b"x" * 16
    for _ in range(CHUNKS):
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _receive() -> dict:
    return {"type": "http.request", "body": b"\0\0\0\0\x02\x0a\x00", "more_body": False}


async def _send(message: dict) -> None:
    return None


SCOPE = {"type": "http", "method": "POST", "path": "/agent.v1.AgentService/RunSSE", "headers": [(b"content-type", b"application/connect+proto")]}


@pytest.mark.benchmark(group="capture")
@pytest.mark.parametrize("mode", ["off", "on"])
def test_tap_cost_per_chunk(benchmark, tmp_path: Path, mode: str) -> None:
    capture = Capture(CaptureSettings("bench"), tmp_path / "captures", Redactor((), with_content=False)) if mode == "on" else None
    if capture is not None:
        capture._done = lambda exchange: None  # type: ignore[method-assign]  # the loop's share only: no decoding thread competing
    loop = asyncio.new_event_loop()

    def one_request() -> None:
        if capture is None:
            loop.run_until_complete(_route(SCOPE, _receive, _send))
        else:
            loop.run_until_complete(capture.around(SCOPE, _receive, _send, _route))

    try:
        benchmark(one_request)
    finally:
        loop.close()
        if capture is not None:
            capture.stop()
    per_chunk = benchmark.stats.stats.median / CHUNKS * 1e6
    benchmark.extra_info["us_per_chunk"] = round(per_chunk, 3)
    print(f"\ncapture {mode}: {per_chunk:.3f} µs per chunk (median request / {CHUNKS} chunks)")


@pytest.mark.timeout(3600)
@pytest.mark.benchmark(group="capture")
def test_capture_cost_on_streaming(benchmark, tmp_path: Path) -> None:
    def capture_on(name: str, config: ServerConfig) -> None:
        if name == "on":
            write_active(config.data_dir, CaptureSettings("bench"))

    with running(tmp_path, STREAMING_PROVIDER, capture_on, max_transports=TRANSPORTS * 4) as (_, both):
        cpu, p50 = streaming_rounds(benchmark, both, ROUNDS)
    written = len(list((tmp_path / "on" / "captures" / "bench").glob("*.json")))
    cpu_ratio = statistics.median(cpu["on"]) / statistics.median(cpu["off"])
    p50_ratio = statistics.median(p50["on"]) / statistics.median(p50["off"])
    benchmark.extra_info.update(cpu_ratio=round(cpu_ratio, 3), p50_ratio=round(p50_ratio, 3), files=written)
    print(f"\nstreaming, {TRANSPORTS} transports x {FRAMES} deltas, {ROUNDS} rounds each (alternating); {written} capture files")
    for name in ("on", "off"):
        print(f"  capture {name:3}: CPU µs/delta {', '.join(f'{v:.1f}' for v in cpu[name])};  p50 ms {', '.join(f'{v:.2f}' for v in p50[name])}")
    print(f"  on/off (medians): CPU per delta {cpu_ratio:.3f}, p50 latency {p50_ratio:.3f}")
