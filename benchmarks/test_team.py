"""Several instances on one PostgreSQL database (issue 37) against the single SQLite server.

Every setup runs the same workload in one process run, on the same machine: CONVERSATIONS
conversations at once, each TURNS turns in a row (a fake OpenAI-chat provider answering at once),
after one warm-up turn each. Reported per setup: turns/s over the whole workload, and time to first
token (the run request's append sent → the stream's first text delta) p50/p90, with what it adds to
the SQLite server's.

- sqlite ×1: one server on its embedded store (the default);
- postgres ×N, affinity: N instances on one database, each turn's RunSSE and appends on the
  instance its request id hashes to (a balancer hashing `x-request-id`); a conversation's turns
  move between instances (each move: the idle owner lets the conversation go);
- postgres ×2, no affinity: every turn's RunSSE on one instance and its appends on the other
  (everything crosses: appends forwarded to the owner, output relayed back).

    .venv/bin/python -m pytest -q -s -p no:randomly benchmarks/test_team.py
    BENCH_TEAM_CONVERSATIONS=8 BENCH_TEAM_TURNS=10 (defaults); BENCH_TEAM_ONLY=0,4 (setups by index)
"""
from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
import zlib
from collections.abc import Callable
from pathlib import Path

import httpx

from cursor_byok.protocol import RUN_SSE_PATH
from tests.conftest import postgres_cluster  # noqa: F401  (the fixture)
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.balancer import balanced_client
from tests.harness.ide import ScriptedIDE, StreamLog, run_request
from tests.harness.postgres import PostgresCluster
from tests.harness.server import ServerProcess, one_model_config

CONVERSATIONS = int(os.environ.get("BENCH_TEAM_CONVERSATIONS", "8"))
TURNS = int(os.environ.get("BENCH_TEAM_TURNS", "10"))
MODEL = "byok-team"


class FirstText(list):
    """A stream's messages that note when the first text delta came."""

    at: float | None = None

    def append(self, item: object) -> None:
        if self.at is None and item.WhichOneof("message") == "interaction_update":  # type: ignore[attr-defined]
            if item.interaction_update.WhichOneof("message") == "text_delta":  # type: ignore[attr-defined]
                self.at = time.perf_counter()
        super().append(item)


def with_affinity(urls: list[str]) -> Callable[[httpx.Request], str]:
    """Each request to the instance its request id hashes to (the IDE sends it as x-request-id)."""

    def pick(request: httpx.Request) -> str:
        return urls[zlib.crc32(request.headers["x-request-id"].encode()) % len(urls)]

    return pick


def without_affinity(urls: list[str]) -> Callable[[httpx.Request], str]:
    def pick(request: httpx.Request) -> str:
        return urls[0] if request.url.path == RUN_SSE_PATH else urls[1]

    return pick


async def one_turn(ide: ScriptedIDE, conv: str, n: int) -> float:
    """A turn under a fresh request id; its time to first token (s)."""
    rid = uuid.uuid4().hex
    log = StreamLog(messages=FirstText())
    ide.client.headers["x-request-id"] = rid
    sent = time.perf_counter()
    reader = asyncio.create_task(ide.stream(rid, log))
    assert (await ide.append(rid, run_request(f"question {n}", model=MODEL, conversation_id=conv, message_id=f"m{n}"))).status_code == 200
    await asyncio.wait_for(reader, 60)
    assert log.terminal is None and log.messages.at is not None, (log.kinds(), log.terminal)
    return log.messages.at - sent


async def workload(rule: Callable[[httpx.Request], str], workspace: Path) -> tuple[float, list[float]]:
    ides = []
    for _ in range(CONVERSATIONS):
        ide = ScriptedIDE("http://127.0.0.1:9", workspace)
        await ide.client.aclose()
        ide.client = balanced_client(rule)
        ides.append((ide, uuid.uuid4().hex))
    try:
        await asyncio.gather(*(one_turn(ide, conv, 0) for ide, conv in ides))  # warm-up
        ttfts: list[float] = []

        async def conversation(ide: ScriptedIDE, conv: str) -> None:
            for n in range(1, TURNS + 1):
                ttfts.append(await one_turn(ide, conv, n))

        started = time.perf_counter()
        await asyncio.gather(*(conversation(ide, conv) for ide, conv in ides))
        return len(ttfts) / (time.perf_counter() - started), ttfts
    finally:
        for ide, _ in ides:
            await ide.close()


def test_instances_on_one_database_against_the_sqlite_server(tmp_path: Path, postgres_cluster: PostgresCluster) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    rows = []
    with FakeProviderServer() as provider:
        provider.respond_with(lambda request: OPENAI_CHAT.text(["answer"]))
        setups: list[tuple[str, str | None, int, Callable[[list[str]], Callable[[httpx.Request], str]]]] = [
            ("sqlite ×1", None, 1, with_affinity),
            ("postgres ×1", "pg", 1, with_affinity),
            ("postgres ×2, affinity", "pg", 2, with_affinity),
            ("postgres ×4, affinity", "pg", 4, with_affinity),
            ("postgres ×2, no affinity", "pg", 2, without_affinity),
        ]
        only = os.environ.get("BENCH_TEAM_ONLY")  # e.g. "0,4": the setups by index (0 is the baseline)
        for index, (name, store, count, rule) in enumerate(setups):
            if only is not None and str(index) not in only.split(","):
                continue
            url = postgres_cluster.create_database() if store else None
            extra = f'[store]\nurl = "{url}"\n' if url else ""
            servers = [
                ServerProcess(one_model_config(tmp_path / f"{len(rows)}-{i}", provider.url, MODEL, extra_toml=extra, runsse_wait_seconds=30.0))
                for i in range(count)
            ]
            try:
                for server in servers:
                    server.start(timeout=60)
                rate, ttfts = asyncio.run(workload(rule([s.base_url for s in servers]), workspace))
            finally:
                for server in servers:
                    server.stop()
            cut = statistics.quantiles(ttfts, n=10)
            rows.append((name, rate, statistics.median(ttfts) * 1000, cut[8] * 1000))
            print(f"\n{name}: {rate:.1f} turns/s", flush=True)
    base = rows[0]
    print(f"\n{CONVERSATIONS} conversations × {TURNS} turns, one run")
    print("| setup | turns/s | TTFT p50 ms | TTFT p90 ms | added TTFT p50 ms |")
    print("|---|---|---|---|---|")
    for name, rate, p50, p90 in rows:
        print(f"| {name} | {rate:.1f} | {p50:.1f} | {p90:.1f} | {p50 - base[2]:+.1f} |")
