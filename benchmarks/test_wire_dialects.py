"""What serving gRPC-Web and honouring the client's deadline add to a Connect request, against the
request guard's own cost, measured in one run; and what a gRPC-Web stream pays once, at its end.

    .venv/bin/python -m pytest -q benchmarks/test_wire_dialects.py --benchmark-columns=min,median,mean,ops -s

A Connect request pays the content-type look-up (`is_grpc_web`) and, on BidiAppend, a Deadline
with no timeout; its frames are sent as before (no wrapper). Only a gRPC-Web response goes through
the send wrapper, whose one rewrite (the Connect end-of-stream frame into the trailer frame)
happens on the last chunk.
"""
from __future__ import annotations

import asyncio

import pytest

from benchmarks.test_guard import IDE_HEADERS
from cursor_byok.config import parse
from cursor_byok.gateway.deadline import Deadline
from cursor_byok.gateway.grpc_web import is_grpc_web
from cursor_byok.gateway.guard import AGENT_TYPES, RequestGuard
from cursor_byok.protocol import agent_pb2, connect_end_to_trailer, encode_server_messages, end_stream_ok

N = 100_000


def _per_request(benchmark, run, label: str) -> float:
    benchmark.pedantic(run, rounds=5, iterations=1)
    us = benchmark.stats.stats.min / N * 1e6
    benchmark.extra_info["us_per_request"] = round(us, 3)
    print(f"\n{label}: {us:.3f} µs per request")
    return us


@pytest.mark.benchmark(group="dialects")
def test_guard_check_alone(benchmark) -> None:
    guard = RequestGuard(parse({"server": {"port": 8787}}), proxy_secret="secret-mark-0123456789", auth_token="")
    scope = {"method": "POST", "path": "/aiserver.v1.BidiService/BidiAppend", "headers": IDE_HEADERS}

    def run() -> None:
        check = guard.check
        for _ in range(N):
            check(scope, AGENT_TYPES)

    _per_request(benchmark, run, "guard.check (the reference)")


@pytest.mark.benchmark(group="dialects")
def test_connect_request_dialect_and_deadline(benchmark) -> None:
    scope = {"method": "POST", "path": "/aiserver.v1.BidiService/BidiAppend", "headers": IDE_HEADERS}

    async def main() -> None:
        def run() -> None:
            for _ in range(N):
                is_grpc_web(scope)
                Deadline.of(None)

        _per_request(benchmark, run, "is_grpc_web + Deadline.of(None), a Connect append")

    asyncio.run(main())


@pytest.mark.benchmark(group="dialects")
def test_grpc_web_end_rewrite(benchmark) -> None:
    """The last chunk of a run's stream: 16 deltas and the end frame, rewritten once per stream."""
    deltas = []
    for i in range(16):
        msg = agent_pb2.AgentServerMessage()
        msg.interaction_update.text_delta.text = f"token {i} "
        deltas.append(msg)
    chunk = encode_server_messages(deltas) + end_stream_ok()

    def run() -> None:
        for _ in range(N):
            connect_end_to_trailer(chunk)

    _per_request(benchmark, run, "connect_end_to_trailer, once per gRPC-Web stream")
