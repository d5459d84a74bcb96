"""Tool round-trip overhead: sequential Read round trips (1 KiB results) through the real server,
against a bare granian app that echoes the same frames (no model, no tools) in the same run.

A round is timed at the client from the moment it starts sending a result to the moment the next
exec request arrives; the client's own work (decoding, building the reply) is outside that window.
For ours the window holds the server's work and the fake model's (instant) answer.

    .venv/bin/python -m pytest -q benchmarks/test_tool_roundtrip.py -s      (BENCH_ROUNDS=1000)
"""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from benchmarks.support.rawhttp import Connection
from benchmarks.test_gateway import ROOT, wait_healthy
from cursor_byok import hotpath
from cursor_byok.protocol import agent_pb2 as pb
from tests.harness.ide import BIDI_APPEND, RUN_SSE, append_body, envelope, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess, free_port

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1000"))
CONTENT = "x" * 1023 + "\n"


def read_reply(exec_msg: pb.ExecServerMessage) -> pb.AgentClientMessage:
    m = pb.AgentClientMessage()
    m.exec_client_message.id = exec_msg.id
    m.exec_client_message.exec_id = exec_msg.exec_id
    s = m.exec_client_message.read_result.success
    s.path = exec_msg.read_args.path
    s.content = CONTENT
    s.total_lines = 1
    s.file_size = len(CONTENT)
    return m


def blob_ack(kv: pb.KvServerMessage) -> pb.AgentClientMessage:
    ack = pb.AgentClientMessage()
    ack.kv_client_message.id = kv.id
    ack.kv_client_message.set_blob_result.SetInParent()
    return ack


async def agent_messages(streamer: Connection, rid: str) -> AsyncIterator[tuple[int, pb.AgentServerMessage]]:
    """The RunSSE's server messages for `rid`, each with its chunk's arrival (perf_counter ns),
    until its end-stream frame."""
    decoder = hotpath.FrameDecoder()
    async for chunk in streamer.stream(RUN_SSE, envelope(pb.BidiRequestId(request_id=rid).SerializeToString())):
        arrived = time.perf_counter_ns()
        for flags, payload in decoder.feed(chunk):
            if flags & hotpath.FLAG_END_STREAM:
                return
            yield arrived, pb.AgentServerMessage.FromString(payload)


async def rounds(port: int, model: str, echo: bool, time_acks: bool = True) -> list[int]:
    """Round-trip times over as many turns as it takes (the engine caps one run's model cycles).
    With `time_acks` a round starts at the client's last append, a blob ack included; without, at
    the tool result it answers (the whole round, as test_run_stream.py times it)."""
    times: list[int] = []
    conversation = uuid.uuid4().hex
    while len(times) < ROUNDS:
        times += await one_stream(port, model, echo, conversation, ROUNDS - len(times), time_acks)
    return times[:ROUNDS]


async def one_stream(port: int, model: str, echo: bool, conversation: str, wanted: int, time_acks: bool = True) -> list[int]:
    rid = uuid.uuid4().hex
    appender = await Connection.open("127.0.0.1", port)
    streamer = await Connection.open("127.0.0.1", port)
    seqno = 0
    sent_at: int | None = None
    times: list[int] = []

    async def append(message: pb.AgentClientMessage, timed: bool = True) -> None:
        nonlocal seqno, sent_at
        body = append_body(rid, seqno, message)
        seqno += 1
        sent_at = time.perf_counter_ns() if timed else sent_at
        status, _ = await appender.post(BIDI_APPEND, body)
        assert status == 200

    async def read() -> None:
        async for arrived, msg in agent_messages(streamer, rid):
            kind = msg.WhichOneof("message")
            if kind == "exec_server_message":
                if sent_at is not None:
                    times.append(arrived - sent_at)
                if len(times) >= wanted:
                    return  # enough: leave the rest of the run to the server
                await append(read_reply(msg.exec_server_message))
            elif kind == "kv_server_message":
                await append(blob_ack(msg.kv_server_message), timed=time_acks)

    reader = asyncio.create_task(read())
    if not echo:
        await append(run_request("read it over and over", model=model, conversation_id=conversation))
        sent_at = None  # the run request is not a tool result: time rounds from the first result on
    await reader
    appender.close()
    streamer.close()
    return times


def pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] / 1e6


@pytest.mark.timeout(1800)
@pytest.mark.benchmark(group="tools")
def test_tool_round_trips_vs_bare_echo(benchmark, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}"}
    provider_port, echo_port = free_port(), free_port()
    provider = subprocess.Popen([sys.executable, "-m", "benchmarks.support.tool_provider", str(provider_port), str(10**9), "/tmp/workspace/file.txt"], env=env, cwd=ROOT)
    echo = subprocess.Popen(
        [sys.executable, "-m", "granian", "--interface", "asgi", "--loop", "uvloop", "--host", "127.0.0.1", "--port", str(echo_port), "--workers", "1", "--no-ws", "benchmarks.support.echo_app:app"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id="bench", provider="openai-chat", base_url=f"http://127.0.0.1:{provider_port}/v1")])
    ours = ServerProcess(config)
    results: dict[str, list[int]] = {}
    try:
        ours.start()
        wait_healthy(f"http://127.0.0.1:{echo_port}/healthz")

        def run_both() -> None:
            results["bare"] = asyncio.run(rounds(echo_port, "bench", echo=True))
            results["ours"] = asyncio.run(rounds(ours.port, "bench", echo=False))

        benchmark.pedantic(run_both, rounds=1, iterations=1)
    finally:
        ours.stop()
        for proc in (provider, echo):
            proc.terminate()
            proc.wait(10)
    assert len(results["ours"]) == ROUNDS == len(results["bare"])
    o50, o99 = pct(results["ours"], 0.5), pct(results["ours"], 0.99)
    b50, b99 = pct(results["bare"], 0.5), pct(results["bare"], 0.99)
    benchmark.extra_info.update({"ours_p50_ms": o50, "ours_p99_ms": o99, "bare_p50_ms": b50, "bare_p99_ms": b99})
    print(f"\n{ROUNDS} sequential Read round trips, 1 KiB results")
    print(f"ours: p50 {o50:.2f} ms  p99 {o99:.2f} ms | bare echo: p50 {b50:.2f} ms  p99 {b99:.2f} ms | ratio p50 {o50 / b50:.1f}x")
    early = [t for i, t in enumerate(results["ours"]) if i % 199 < 20]  # the first rounds of each run
    print(f"ours, first 20 rounds of each run (short history): p50 {pct(early, 0.5):.2f} ms  p99 {pct(early, 0.99):.2f} ms")
    benchmark.extra_info["ours_short_history_p50_ms"] = pct(early, 0.5)
