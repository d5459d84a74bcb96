"""A turn's end as the IDE sees it: from the last step's `step_completed` to `turn_ended`, and to the
last checkpoint frame, over sequential turns of one conversation (RunSSE + BidiAppend; as Cursor
does, the client acks each set_blob as it reads it and sends the last checkpoint it got with the
next run request). The wire order (PROTOCOL.md 2.7) puts the
final checkpoint's blobs and their acks before `turn_ended`: this is what that wait costs.

    .venv/bin/python -m pytest -q benchmarks/test_turn_end.py -s -p no:randomly    (BENCH_TURNS=200)

BENCH_SRC runs the server from another checkout's `src` (a before/after pair, one run each).
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

from benchmarks.support.rawhttp import Connection
from benchmarks.test_gateway import ROOT, wait_healthy
from benchmarks.test_run_stream import cpu_seconds
from benchmarks.test_tool_roundtrip import agent_messages, blob_ack, pct
from cursor_byok.protocol import agent_pb2 as pb
from tests.harness.ide import BIDI_APPEND, append_body, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess, free_port

TURNS = int(os.environ.get("BENCH_TURNS", "200"))
SRC = os.environ.get("BENCH_SRC")  # the cursor_byok source tree the server runs (default: this one)


async def one_turn(port: int, conversation: str, turn: int, state: pb.ConversationStateStructure) -> tuple[int, int, list[int]]:
    """(step_completed → turn_ended, step_completed → last checkpoint, each blob ack's BidiAppend
    round trip) of one turn, in ns. `state`: the checkpoint the IDE holds, sent with the run request
    and replaced by the turn's last."""
    rid = uuid.uuid4().hex
    appender = await Connection.open("127.0.0.1", port)
    streamer = await Connection.open("127.0.0.1", port)
    seqno = 0
    marks: dict[str, int] = {}
    acks: list[int] = []

    async def append(message: pb.AgentClientMessage) -> None:
        nonlocal seqno
        sent = time.perf_counter_ns()
        status, _ = await appender.post(BIDI_APPEND, append_body(rid, seqno, message))
        seqno += 1
        assert status == 200
        if message.HasField("kv_client_message"):
            acks.append(time.perf_counter_ns() - sent)

    async def read() -> None:
        async for arrived, msg in agent_messages(streamer, rid):
            kind = msg.WhichOneof("message")
            if kind == "interaction_update":
                update = msg.interaction_update.WhichOneof("message")
                if update in ("step_completed", "turn_ended"):
                    marks[update] = arrived
            elif kind == "conversation_checkpoint_update":
                marks["checkpoint"] = arrived
                state.CopyFrom(msg.conversation_checkpoint_update)
            elif kind == "kv_server_message":
                await append(blob_ack(msg.kv_server_message))

    reader = asyncio.create_task(read())
    request = run_request(f"question {turn}", model="bench", conversation_id=conversation, message_id=f"m{turn}")
    request.run_request.conversation_state.CopyFrom(state)  # as Cursor does
    await append(request)
    await reader
    appender.close()
    streamer.close()
    return marks["turn_ended"] - marks["step_completed"], marks["checkpoint"] - marks["step_completed"], acks


async def turns(port: int) -> list[tuple[int, int, list[int]]]:
    conversation, state = uuid.uuid4().hex, pb.ConversationStateStructure()
    return [await one_turn(port, conversation, i, state) for i in range(TURNS)]


@pytest.mark.timeout(1800)
@pytest.mark.benchmark(group="turn-end")
def test_turn_end_latency(benchmark, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}"}
    provider_port = free_port()
    provider = subprocess.Popen([sys.executable, "-m", "benchmarks.support.stamp_provider", str(provider_port), "2", "1"], env=env, cwd=ROOT)
    config = ServerConfig(
        data_dir=tmp_path / "data",
        models=[ModelSpec(id="bench", provider="openai-chat", base_url=f"http://127.0.0.1:{provider_port}/v1")],
        continuation_window_seconds=0.0,
    )
    ours = ServerProcess(config, env={"PYTHONPATH": SRC} if SRC else None)
    results: list[tuple[int, int, list[int]]] = []
    try:
        ours.start()
        wait_healthy(f"{ours.base_url}/healthz")
        cpu_before = cpu_seconds(ours.proc.pid)

        def run() -> None:
            results.extend(asyncio.run(turns(ours.port)))

        benchmark.pedantic(run, rounds=1, iterations=1)
        cpu = cpu_seconds(ours.proc.pid) - cpu_before
    finally:
        ours.stop()
        provider.terminate()
        provider.wait(10)
    assert len(results) == TURNS
    ended = [r[0] for r in results]
    last = [r[1] for r in results]
    acks = [a for r in results for a in r[2]]
    info = {
        "blob_acks_per_turn": len(acks) / TURNS, "ack_append_p50_ms": pct(acks, 0.5), "ack_append_p90_ms": pct(acks, 0.9),
        "ended_p50_ms": pct(ended, 0.5), "ended_p90_ms": pct(ended, 0.9),
        "checkpoint_p50_ms": pct(last, 0.5), "checkpoint_p90_ms": pct(last, 0.9),
        "server_cpu_ms_per_turn": cpu / TURNS * 1000,
    }
    benchmark.extra_info.update(info)
    print(f"\n{TURNS} sequential turns of one conversation ({SRC or 'this tree'}); load {Path('/proc/loadavg').read_text().split()[:3]}")
    print(f"step_completed → turn_ended:      p50 {info['ended_p50_ms']:.2f} ms  p90 {info['ended_p90_ms']:.2f} ms")
    print(f"step_completed → last checkpoint: p50 {info['checkpoint_p50_ms']:.2f} ms  p90 {info['checkpoint_p90_ms']:.2f} ms")
    print(f"blob acks per turn {info['blob_acks_per_turn']:.1f}, each one's BidiAppend: p50 {info['ack_append_p50_ms']:.2f} ms  p90 {info['ack_append_p90_ms']:.2f} ms")
    print(f"server CPU per turn (whole process): {info['server_cpu_ms_per_turn']:.2f} ms")
