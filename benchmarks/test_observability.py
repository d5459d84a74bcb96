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
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from benchmarks.test_gateway import FRAMES, INTERVAL_MS, ROOT, TRANSPORTS, scenario
from benchmarks.test_turn_start import HOST, Client, concurrent, cpu_per_start, pct, warm_provider_pool
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess, free_port

ROUNDS = int(os.environ.get("BENCH_OBS_ROUNDS", "3"))
HELD = int(os.environ.get("BENCH_HELD", "100"))
SAMPLES = int(os.environ.get("BENCH_TURN_SAMPLES", "96"))
OFF = "[observability]\nenabled = false\n"


@contextlib.contextmanager
def running(
    tmp_path: Path, provider: list[str], prepare: Callable[[str, ServerConfig], None] | None = None, **server: object
) -> Iterator[tuple[int, dict[str, ServerProcess]]]:
    """A provider (`python -m` these arguments, its port inserted first) and `cursor-byok serve`
    twice on it: observability on and off (or, with `prepare(name, config)` to set them apart, the
    same config twice). Yields the provider's port and the two servers."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}"}
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", provider[0], str(port), *provider[1:]], env=env, cwd=ROOT)
    both: dict[str, ServerProcess] = {}
    try:
        listening(port)
        for name, extra in (("on", ""), ("off", OFF if prepare is None else "")):
            config = ServerConfig(
                data_dir=tmp_path / name,
                models=[ModelSpec(id="bench", provider="openai-chat", base_url=f"http://{HOST}:{port}/v1", max_output_tokens=1000)],
                continuation_window_seconds=0.02,
                extra_server=dict(server),
                extra_toml=extra,
            )
            if prepare is not None:
                prepare(name, config)
            both[name] = ServerProcess(config, env=env).start()
        yield port, both
    finally:
        for target in both.values():
            target.stop()
        proc.terminate()
        proc.wait(10)


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


def alternating(n: int) -> tuple[str, str]:
    """Round n's order: on first in even rounds, off first in odd ones."""
    return ("on", "off") if n % 2 == 0 else ("off", "on")


def report(benchmark, title: str, rows: dict[str, str], cpu: dict[str, list[float]], p50_ratio: float, what: str) -> None:  # type: ignore[no-untyped-def]
    cpu_ratio = statistics.median(cpu["on"]) / statistics.median(cpu["off"])
    benchmark.extra_info.update(cpu_ratio=round(cpu_ratio, 3), p50_ratio=round(p50_ratio, 3))
    print(f"\n{title}")
    for name in ("on", "off"):
        print(f"  observability {name:3}: {rows[name]}")
    print(f"  on/off (medians): CPU {what} {cpu_ratio:.3f}, p50 latency {p50_ratio:.3f}")


def streaming_rounds(benchmark, both: dict[str, ServerProcess], rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:  # type: ignore[no-untyped-def]
    """test_gateway's streaming scenario on the two servers, `rounds` alternating pairs: CPU µs
    per delta and p50 ms of each run, by server."""
    cpu: dict[str, list[float]] = {"on": [], "off": []}
    p50: dict[str, list[float]] = {"on": [], "off": []}

    def run() -> None:
        for n in range(rounds):
            for name in alternating(n):
                target = both[name]
                out = asyncio.run(scenario(HOST, target.port, "bench", target.proc.pid))  # type: ignore[union-attr]
                assert not out.errors and out.frames == TRANSPORTS * FRAMES, out.errors[:3]
                cpu[name].append(out.row()["cpu_us_per_delta"])
                p50[name].append(out.row()["p50_ms"])

    benchmark.pedantic(run, rounds=1, iterations=1)
    return cpu, p50


STREAMING_PROVIDER = ["benchmarks.support.ts_provider", str(FRAMES), str(INTERVAL_MS)]


@pytest.mark.timeout(3600)
@pytest.mark.benchmark(group="observability")
def test_recording_cost_on_streaming(benchmark, tmp_path: Path) -> None:
    with running(tmp_path, STREAMING_PROVIDER, max_transports=TRANSPORTS * 4) as (_, both):
        cpu, p50 = streaming_rounds(benchmark, both, ROUNDS)
    rows = {n: f"CPU µs/delta {', '.join(f'{v:.1f}' for v in cpu[n])};  p50 ms {', '.join(f'{v:.2f}' for v in p50[n])}" for n in cpu}
    ratio = statistics.median(p50["on"]) / statistics.median(p50["off"])
    report(benchmark, f"streaming, {TRANSPORTS} transports x {FRAMES} deltas, {ROUNDS} rounds each (alternating)", rows, cpu, ratio, "per delta")


@pytest.mark.timeout(3600)
@pytest.mark.benchmark(group="observability")
def test_recording_cost_on_turn_start(benchmark, tmp_path: Path) -> None:
    cpu: dict[str, list[float]] = {"on": [], "off": []}
    latency: dict[str, list[int]] = {"on": [], "off": []}
    with running(tmp_path, ["benchmarks.support.stamp_provider", "10", "20"], max_transports=4096) as (provider_port, both):
        async def prepare(port: int) -> None:
            first = await Client(port).open()
            await first.turn()
            first.close()
            await warm_provider_pool(port, provider_port, HELD)

        async def one_round(target: ServerProcess) -> tuple[float, list[int]]:
            clients = [await Client(target.port).open() for _ in range(HELD)]
            spent, _ = await cpu_per_start(provider_port, target.proc.pid, clients)  # type: ignore[union-attr]
            for c in clients:
                c.close()
            return spent, (await concurrent(target.port, 1, max(1, SAMPLES // ROUNDS))).to_provider_ns

        def run() -> None:
            for target in both.values():
                asyncio.run(prepare(target.port))
            for n in range(ROUNDS):
                for name in alternating(n):
                    spent, samples = asyncio.run(one_round(both[name]))
                    cpu[name].append(spent)
                    latency[name] += samples
                    time.sleep(0.5)

        benchmark.pedantic(run, rounds=1, iterations=1)
    rows = {n: f"CPU µs per run start {', '.join(f'{v:.0f}' for v in cpu[n])};  append→provider p50 {pct(latency[n], 0.5):.2f} ms,"
               f" p99 {pct(latency[n], 0.99):.2f} ms" for n in cpu}
    ratio = pct(latency["on"], 0.5) / pct(latency["off"], 0.5)
    report(benchmark, f"turn start: {HELD} held run starts x {ROUNDS} rounds each (alternating), {SAMPLES} one-conversation turns",
           rows, cpu, ratio, "per run start")


@pytest.mark.benchmark(group="observability")
def test_observer_work_per_run(benchmark) -> None:
    """The event loop's share of recording one run with two provider calls and a tool call (run
    start, call records, usage row, metrics, the run line; the store's writes are only enqueued here,
    their SQL runs on the writer thread): the figure to set against a run start's ~2.5 ms of CPU."""
    import logging

    from cursor_byok.config import parse
    from cursor_byok.conversation import ObservedRun, ObservedTool
    from cursor_byok.observability import Metrics, Recorder
    from cursor_byok.providers import ProviderCall, Usage

    config = parse({"models": [{"id": "bench", "provider": "openai-chat", "model": "m"}]})
    recorder = Recorder(config, None, Metrics())
    logging.getLogger("cursor_byok.runs").setLevel(logging.WARNING)  # the line's formatting is the handler's, not measured

    def one_run() -> None:
        run = ObservedRun("c", "r", "cr", "q", "bench", model=config.models[0])
        recorder.run_started(run)
        for phase in ("preparing", "modeling"):
            run.phases.append((phase, time.monotonic_ns()))
        for step in (1, 2):
            call = ProviderCall("cycle", step)
            call.started_ns = call.response_ns = call.first_event_ns = call.first_token_ns = call.ended_ns = time.monotonic_ns()
            call.status, call.usage, call.stop_reason = 200, Usage(input_tokens=1000, output_tokens=50, cache_read_tokens=800), "end_turn"
            recorder.provider_call(run, call)
            if step == 1:
                recorder.tool_finished(run, ObservedTool("t1", "Read", 0, 3, False))
        recorder.run_finished(run, "succeeded", None, None)

    benchmark(one_run)
