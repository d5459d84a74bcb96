"""Tool round trips over the two agent transports, against the same server in one run: RunSSE +
one BidiAppend request per client message (HTTP/1.1), and one HTTP/2 `Run` stream (h2c) whose
request side carries the same messages.

A round is timed at the client from sending a Read result to the next exec request arriving, over
both transports (the whole round: the model call, the checkpoint and its blob acks). The RunSSE
client is test_tool_roundtrip.py's, told not to restart the clock at each blob ack as that file's
own figures do. The server's CPU per round comes from /proc.

    .venv/bin/python -m pytest -q benchmarks/test_run_stream.py -s      (BENCH_ROUNDS=1000)

BENCH_VIA=sse measures RunSSE + BidiAppend alone, and BENCH_SRC runs the server from another
checkout's `src`: with both, a before/after pair against a tree that has no `Run`.
"""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from benchmarks.test_gateway import ROOT
from benchmarks.test_tool_roundtrip import ROUNDS, blob_ack, pct, read_reply, rounds
from cursor_byok import hotpath
from cursor_byok.h2_client import H2Client
from cursor_byok.protocol import agent_pb2 as pb
from tests.harness.ide import RUN, envelope, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess, free_port

TRANSPORTS = os.environ.get("BENCH_VIA", "sse,run").split(",")
SRC = os.environ.get("BENCH_SRC")  # the cursor_byok source tree the server runs (default: this one)
LABELS = {"sse": "RunSSE + BidiAppend (HTTP/1.1)", "run": "Run (HTTP/2, h2c)"}


async def run_rounds(port: int, model: str) -> list[int]:
    times: list[int] = []
    conversation = uuid.uuid4().hex
    client = await H2Client.connect("127.0.0.1", port)
    try:
        while len(times) < ROUNDS:
            times += await one_run_stream(client, port, model, conversation, ROUNDS - len(times))
    finally:
        await client.close()
    return times[:ROUNDS]


async def one_run_stream(client: H2Client, port: int, model: str, conversation: str, wanted: int) -> list[int]:
    head = [(":method", "POST"), (":scheme", "http"), (":authority", f"127.0.0.1:{port}"), (":path", RUN)]
    stream = await client.request([*head, ("content-type", "application/connect+proto"), ("x-request-id", uuid.uuid4().hex)])
    decoder = hotpath.FrameDecoder()
    times: list[int] = []
    sent_at: int | None = None

    async def send(message: pb.AgentClientMessage, timed: bool) -> None:
        nonlocal sent_at
        sent_at = time.perf_counter_ns() if timed else sent_at
        await stream.send(envelope(message.SerializeToString()))

    await send(run_request("read it over and over", model=model, conversation_id=conversation), timed=False)
    while (chunk := await stream.read()) is not None:
        arrived = time.perf_counter_ns()
        for flags, payload in decoder.feed(chunk):
            if flags & hotpath.FLAG_END_STREAM:
                return times
            msg = pb.AgentServerMessage.FromString(payload)
            kind = msg.WhichOneof("message")
            if kind == "exec_server_message":
                if sent_at is not None:
                    times.append(arrived - sent_at)
                if len(times) >= wanted:
                    stream.reset()  # enough: the run goes on without us (a detach)
                    return times
                await send(read_reply(msg.exec_server_message), timed=True)
            elif kind == "kv_server_message":
                await send(blob_ack(msg.kv_server_message), timed=False)
    return times


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.timeout(1800)
@pytest.mark.benchmark(group="tools")
def test_tool_round_trips_run_stream_vs_runsse_and_appends(benchmark, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}"}
    provider_port = free_port()
    provider = subprocess.Popen([sys.executable, "-m", "benchmarks.support.tool_provider", str(provider_port), str(10**9), "/tmp/workspace/file.txt"], env=env, cwd=ROOT)
    config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id="bench", provider="openai-chat", base_url=f"http://127.0.0.1:{provider_port}/v1")])
    ours = ServerProcess(config, env={"PYTHONPATH": SRC} if SRC else None)
    results: dict[str, list[int]] = {}
    cpu: dict[str, float] = {}
    try:
        ours.start()
        assert ours.proc is not None
        pid = ours.proc.pid

        work = {"sse": lambda: rounds(ours.port, "bench", echo=False, time_acks=False), "run": lambda: run_rounds(ours.port, "bench")}

        def run_both() -> None:
            for name in TRANSPORTS:
                before = cpu_seconds(pid)
                results[name] = asyncio.run(work[name]())
                cpu[name] = cpu_seconds(pid) - before

        benchmark.pedantic(run_both, rounds=1, iterations=1)
    finally:
        ours.stop()
        provider.terminate()
        provider.wait(10)
    assert all(len(results[name]) == ROUNDS for name in TRANSPORTS)
    for name in TRANSPORTS:
        benchmark.extra_info[f"{name}_p50_ms"] = pct(results[name], 0.5)
        benchmark.extra_info[f"{name}_p99_ms"] = pct(results[name], 0.99)
        benchmark.extra_info[f"{name}_cpu_us_per_round"] = cpu[name] / ROUNDS * 1e6
    print(f"\n{ROUNDS} sequential Read round trips, 1 KiB results, one server")
    for name in TRANSPORTS:
        print(f"{LABELS[name]}: p50 {pct(results[name], 0.5):.2f} ms  p99 {pct(results[name], 0.99):.2f} ms  server CPU {cpu[name] / ROUNDS * 1e6:.0f} µs/round")
    if len(TRANSPORTS) == 2:
        print(f"ratio run/sse: p50 {pct(results['run'], 0.5) / pct(results['sse'], 0.5):.2f}  CPU {cpu['run'] / cpu['sse']:.2f}")
