"""The soak: many conversations at once against the real `serve`, turn after turn, with tools,
streams that disconnect and read again, and cancels. Every RunSSE read to its end gets exactly one
terminal, every turn not cancelled gets its answer, and once the warm-up is over resident memory
grows by less than 5 % and the open file descriptors come back to where they were (both measured
after what finished turns keep in memory has expired)."""
from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.fakes import FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, cancel_message
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

from .crash_loop import MODEL, LoopModel, turn_message
from .edge_support import open_fds, server_rss

KINDS = ("text", "tools", "tools", "reconnect", "cancel")
IDLE_SECONDS = 1.0  # what a finished turn keeps in memory expires after this (defaults: minutes)
SETTLE_SECONDS = 12.0  # the idle time plus two sweeps (every 5 s): everything idle has expired
TURN_TIMEOUT = 60.0


@dataclass
class Tally:
    streams: int = 0  # RunSSEs read to their end
    bad_streams: list[str] = field(default_factory=list)  # … without exactly one terminal
    kinds: Counter[str] = field(default_factory=Counter)
    cancelled: int = 0  # cancels that arrived before the turn's end
    wrong: list[str] = field(default_factory=list)  # turns without their answer

    def ended(self, log: StreamLog, what: str) -> None:
        self.streams += 1
        if log.terminals != 1 or log.broken:
            self.bad_streams.append(f"{what}: {log.terminals} terminals, broken={log.broken}")


class Conversation:
    def __init__(self, server: ServerProcess, workspace: Path, seed: int, tally: Tally) -> None:
        self.ide = ScriptedIDE(server.base_url, workspace)
        self.conv = uuid.uuid4().hex
        self.rng = random.Random(seed)
        self.tally = tally

    async def turn(self, n: int) -> None:
        kind = self.rng.choice(KINDS)
        self.tally.kinds[kind] += 1
        message = turn_message(self.conv, n, "tools" if kind == "tools" or self.rng.random() < 0.5 else "text")
        rid = uuid.uuid4().hex
        what = f"{self.conv} turn {n} {kind}"
        log = StreamLog()
        stop = asyncio.Event()
        reader = asyncio.create_task(self.ide.stream(rid, log, stop=stop if kind == "reconnect" else None))
        resp = await self.ide.append(rid, message)
        assert resp.status_code == 200, resp.text
        if kind == "reconnect":
            # The stream goes away mid-turn (the run goes on) and the IDE reads it again.
            await self.until(lambda: bool(log.messages) or log.finished)
            stop.set()
            await asyncio.wait_for(reader, TURN_TIMEOUT)
            if not log.finished:
                log = await asyncio.wait_for(self.ide.stream(rid, StreamLog()), TURN_TIMEOUT)
        elif kind == "cancel":
            await self.until(lambda: bool(log.text) or log.finished)
            await self.ide.append(rid, cancel_message())
            await asyncio.wait_for(reader, TURN_TIMEOUT)
        else:
            await asyncio.wait_for(reader, TURN_TIMEOUT)
        self.tally.ended(log, what)
        if log.terminal is not None and log.terminal.code == "canceled" and kind == "cancel":
            self.tally.cancelled += 1
        elif log.terminal is not None or not log.text.endswith(f"answer {n}"):
            self.tally.wrong.append(f"{what}: {log.terminal} {log.text[-40:]!r}")

    @staticmethod
    async def until(condition: object) -> None:
        deadline = time.monotonic() + TURN_TIMEOUT
        while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
            await asyncio.sleep(0.005)


async def settled(server: ServerProcess, conversations: list[Conversation]) -> tuple[int, int]:
    """Close every IDE connection, let what finished turns keep expire: (RSS, open fds)."""
    for c in conversations:
        await c.ide.reconnect()
    await asyncio.sleep(SETTLE_SECONDS)
    assert server.proc is not None
    return server_rss(server), open_fds(server.proc.pid)


async def soak(tmp_path: Path, provider: FakeProviderServer, workspace: Path, *, conversations: int, turns: int, warm_up: int, seed: int) -> None:
    provider.respond_with(LoopModel(chunk_delay=0.02))
    for n in range(turns):
        (workspace / f"t{n}.txt").write_text(f"T{n}-CONTENT\n")
    config = ServerConfig(
        data_dir=tmp_path / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
        runsse_wait_seconds=2.0,
        output_retention_seconds=IDLE_SECONDS,
        continuation_window_seconds=0.1,
        extra_server={"runtime_idle_seconds": IDLE_SECONDS, "transport_idle_seconds": IDLE_SECONDS, "blob_ack_timeout_seconds": 2.0},
    )
    tally = Tally()
    convs: list[Conversation] = []
    with ServerProcess(config) as server:
        convs = [Conversation(server, workspace, seed * 1000 + i, tally) for i in range(conversations)]

        async def run(turn_numbers: range) -> None:
            async def one(c: Conversation) -> None:
                for n in turn_numbers:
                    await c.turn(n)

            await asyncio.gather(*(one(c) for c in convs))

        try:
            started = time.monotonic()
            await run(range(warm_up))
            warm_rss, warm_fds = await settled(server, convs)
            await run(range(warm_up, turns))
            took = time.monotonic() - started
            end_rss, end_fds = await settled(server, convs)
        finally:
            for c in convs:
                await c.ide.close()
        growth = (end_rss - warm_rss) / warm_rss
        print(
            f"\nsoak: {conversations} conversations x {turns} turns in {took:.0f} s, turn kinds {dict(tally.kinds)}, "
            f"{tally.cancelled} cancelled in flight, {tally.streams} RunSSEs read to their end, {len(tally.bad_streams)} without one terminal; "
            f"RSS after warm-up {warm_rss / 2**20:.1f} MiB, at the end {end_rss / 2**20:.1f} MiB ({growth:+.1%}); "
            f"open fds {warm_fds} -> {end_fds}"
        )
        assert not tally.bad_streams, tally.bad_streams[:5]
        assert not tally.wrong, tally.wrong[:5]
        assert growth < 0.05
        assert end_fds <= warm_fds


@pytest.mark.timeout(600)
async def test_soak(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    await soak(tmp_path, provider, workspace, conversations=12, turns=8, warm_up=3, seed=12)


@pytest.mark.soak
@pytest.mark.timeout(3600)
async def test_soak_full(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    await soak(tmp_path, provider, workspace, conversations=50, turns=20, warm_up=4, seed=1212)
