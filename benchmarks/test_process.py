"""Process model: how fast `cursor-byok serve` answers after it is started, and what memory it holds.

Each variant is started ROUNDS times, the variants interleaved so that load from elsewhere on the
machine falls on all of them alike. One round, timed from spawning `serve`:
- health: wall time until the health endpoint answers 204;
- first turn: wall time until a first RunSSE turn (against a local fake provider) has ended;
- CPU: user+system CPU the server's processes had used by the end of that first turn (less
  sensitive to a loaded machine than wall time);
- RSS and PSS (shared pages split between the processes that share them) of the server's
  processes (the main one and its children), after the first turn and again after 20 more turns.

    .venv/bin/python -m pytest -q benchmarks/test_process.py -s
    BENCH_PROCESS_ROUNDS=7 (default 5)
    BENCH_PROCESS_VARIANTS="worker=/path/to/src,other=/path/to/src"   also run `serve` from other
        source trees (for comparing process models; see results/process.md)
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, run_request
from benchmarks.test_gateway import _tree, cpu_seconds, rss_kib
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

ROUNDS = int(os.environ.get("BENCH_PROCESS_ROUNDS", "5"))
MORE_TURNS = 20


class VariantServer(ServerProcess):
    """`serve` run from another source tree (None: this checkout, as the tests run it)."""

    def __init__(self, config: ServerConfig, src: str | None) -> None:
        super().__init__(config)
        self.src = src

    def command(self) -> list[str]:
        if self.src is None:
            return super().command()
        return [sys.executable, "-m", "cursor_byok.cli", "serve", "--config", str(self.config_path)]

    def env(self) -> dict[str, str]:
        env = super().env()
        if self.src is not None:
            env["PYTHONPATH"] = self.src
        return env


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) summed over a process and its children."""
    pss = 0
    for p in _tree(pid):
        with contextlib.suppress(OSError):
            pss += next(int(line.split()[1]) for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines() if line.startswith("Pss:"))
    return rss_kib(pid), pss


async def one_round(server: VariantServer, provider: FakeProviderServer, workspace: Path) -> dict[str, float]:
    started = time.monotonic()
    server.config.data_dir.mkdir(parents=True, exist_ok=True)
    server.start(timeout=60)  # polls health every 50 ms
    health = time.monotonic() - started
    ide = ScriptedIDE(server.base_url, workspace)
    conv = uuid.uuid4().hex
    try:
        provider.enqueue(OPENAI_CHAT.text(["first"]))
        log = await ide.turn(run_request("hello", model="m", conversation_id=conv), timeout=60)
        first = time.monotonic() - started
        assert log.terminal is None
        assert server.proc is not None
        cpu = cpu_seconds(server.proc.pid)
        rss1, pss1 = memory_kib(server.proc.pid)
        for i in range(MORE_TURNS):
            provider.enqueue(OPENAI_CHAT.text([f"answer {i}"]))
            log = await ide.turn(run_request(f"q {i}", model="m", conversation_id=conv), timeout=60)
            assert log.terminal is None
        rss2, pss2 = memory_kib(server.proc.pid)
    finally:
        await ide.close()
        assert server.stop() == 0
    return {"health_s": health, "first_turn_s": first, "cpu_s": cpu, "rss_mib": rss1 / 1024, "pss_mib": pss1 / 1024, "rss_after_mib": rss2 / 1024, "pss_after_mib": pss2 / 1024}


def variants() -> dict[str, str | None]:
    found: dict[str, str | None] = {"this": None}
    for item in filter(None, os.environ.get("BENCH_PROCESS_VARIANTS", "").split(",")):
        name, _, src = item.partition("=")
        found[name.strip()] = src.strip()
    return found


@pytest.mark.timeout(1800)
@pytest.mark.benchmark(group="process")
def test_start_time_and_memory(benchmark, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    results: dict[str, list[dict[str, float]]] = {name: [] for name in variants()}
    with FakeProviderServer() as provider:

        def run_all() -> None:
            for r in range(ROUNDS):
                for name, src in variants().items():
                    config = ServerConfig(data_dir=tmp_path / f"{name}-{r}", models=[ModelSpec(id="m", provider="openai-chat", base_url=provider.url + "/v1")])
                    results[name].append(asyncio.run(one_round(VariantServer(config, src), provider, workspace)))

        benchmark.pedantic(run_all, rounds=1, iterations=1)
    print(f"\n{ROUNDS} rounds each, medians (min-max)")
    keys = ["health_s", "first_turn_s", "cpu_s", "rss_mib", "pss_mib", "rss_after_mib", "pss_after_mib"]
    print(f"{'':10}" + "".join(f"{k:>22}" for k in keys))
    for name, rows in results.items():
        cells = []
        for k in keys:
            values = [row[k] for row in rows]
            cells.append(f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})")
            benchmark.extra_info[f"{name}_{k}"] = round(statistics.median(values), 3)
        print(f"{name:10}" + "".join(f"{c:>22}" for c in cells))
