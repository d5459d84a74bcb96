"""The soak: many conversations at once against the real `serve`, turn after turn, with tools,
streams that disconnect and read again, and cancels. Every RunSSE read to its end gets exactly one
terminal, every turn not cancelled gets its answer, the inbound journal is empty once every stream
has ended, and once the warm-up is over the open file descriptors come back to where they were and
(in the long run) resident memory grows by less than 5 %, both measured after what finished turns
keep in memory has expired."""
from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, cancel_message
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

from .crash_loop import MODEL, LoopModel, turn_message
from .edge_support import open_fds, server_rss

KINDS = ("text", "tools", "tools", "reconnect", "cancel")
IDLE_SECONDS = 1.0  # what a finished turn keeps in memory expires after this (defaults: minutes)
TRANSPORT_IDLE_SECONDS = 6.0  # a finished stream's transport (one whose run goes on never expires)
RETENTION_SECONDS = 4.0  # a finished stream's output, for a RunSSE that reads it again: longer than that takes
SETTLE_SECONDS = 12.0  # the longest idle time plus a sweep (every 5 s): everything idle has expired
TURN_TIMEOUT = 60.0


@dataclass
class Tally:
    streams: int = 0  # RunSSEs read to their end
    bad_streams: list[str] = field(default_factory=list)  # … without exactly one terminal
    kinds: Counter[str] = field(default_factory=Counter)
    cancelled: int = 0  # cancels that arrived before the turn's end
    reread: int = 0  # streams read again after their connection dropped
    wrong: list[str] = field(default_factory=list)  # turns without their answer

    def ended(self, log: StreamLog, what: str) -> None:
        self.streams += 1
        if log.terminals != 1 or log.broken:
            self.bad_streams.append(f"{what}: {log.terminals} terminals, broken={log.broken}")


class Conversation:
    def __init__(self, server: ServerProcess, workspace: Path, seed: int, tally: Tally) -> None:
        self.ide = ScriptedIDE(server.base_url, workspace)
        self.ide.resend_attempts = 2
        self.conv = uuid.uuid4().hex
        self.rng = random.Random(seed)
        self.tally = tally
        # As Cursor: the last checkpoint the server sent goes back with the next run request (the
        # blobs it names are held, so the server does not push the whole history again each turn).
        self.state: pb.ConversationStateStructure | None = None

    def keep_checkpoint(self, log: StreamLog) -> StreamLog:
        for m in log.messages:
            if m.WhichOneof("message") == "conversation_checkpoint_update":
                self.state = m.conversation_checkpoint_update
        return log

    async def turn(self, n: int) -> None:
        kind = self.rng.choice(KINDS)
        self.tally.kinds[kind] += 1
        message = turn_message(self.conv, n, "tools" if kind == "tools" or self.rng.random() < 0.5 else "text")
        if self.state is not None:
            message.run_request.conversation_state.CopyFrom(self.state)
        rid = uuid.uuid4().hex
        what = f"{self.conv} turn {n} {kind}"
        log = StreamLog()
        stop = asyncio.Event()
        reader = asyncio.create_task(self.ide.stream(rid, log, stop=stop if kind == "reconnect" else None))
        resp = await self.ide.append(rid, message)
        assert resp.status_code == 200, resp.text
        if kind == "reconnect":
            # The stream goes away mid-turn (the run goes on) and the IDE reads it again.
            await self.until(lambda: bool(log.messages) or reader.done())
            stop.set()
            await asyncio.wait_for(reader, TURN_TIMEOUT)
            self.keep_checkpoint(log)
            if not log.finished:
                log = await asyncio.wait_for(self.ide.stream(rid, StreamLog()), TURN_TIMEOUT)
        elif kind == "cancel":
            await self.until(lambda: bool(log.text) or reader.done())
            await self.ide.append(rid, cancel_message())
            await asyncio.wait_for(reader, TURN_TIMEOUT)
        else:
            await asyncio.wait_for(reader, TURN_TIMEOUT)
        self.keep_checkpoint(log)
        while log.broken and not log.finished:  # the connection dropped under the stream: read it again
            self.tally.reread += 1
            log = self.keep_checkpoint(await asyncio.wait_for(self.ide.stream(rid, StreamLog()), TURN_TIMEOUT))
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


async def settled(server: ServerProcess, conversations: list[Conversation]) -> Sample:
    """Close every IDE connection, let what finished turns keep expire, then measure."""
    for c in conversations:
        await c.ide.reconnect()
    await asyncio.sleep(SETTLE_SECONDS)
    assert server.proc is not None
    database = server.config.data_dir / "state.db"
    with contextlib.closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        journaled = conn.execute("SELECT count(*) FROM inbound_appends").fetchone()[0]
    return Sample(server_rss(server), open_fds(server.proc.pid), journaled)


@dataclass
class Sample:
    rss: int
    fds: int
    journaled: int  # rows in the inbound journal

    def __str__(self) -> str:
        return f"{self.rss / 2**20:.1f} MiB, {self.fds} fds, {self.journaled} journal rows"


async def soak(
    tmp_path: Path, provider: FakeProviderServer, workspace: Path, *, conversations: int, marks: tuple[int, ...], seed: int, check_rss: bool
) -> None:
    """`conversations` at once, each taking turns up to each of `marks` (turn counts) in step and
    sampled there; the first mark ends the warm-up, the last is the end. `check_rss`: memory growth
    is judged (only the long run has turns enough to tell growth from warm-up)."""
    provider.respond_with(LoopModel(chunk_delay=0.02))
    for n in range(marks[-1]):
        (workspace / f"t{n}.txt").write_text(f"T{n}-CONTENT\n")
    config = ServerConfig(
        data_dir=tmp_path / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
        runsse_wait_seconds=2.0,
        output_retention_seconds=RETENTION_SECONDS,
        continuation_window_seconds=0.1,
        extra_server={"runtime_idle_seconds": IDLE_SECONDS, "transport_idle_seconds": TRANSPORT_IDLE_SECONDS, "blob_ack_timeout_seconds": 2.0},
    )
    tally = Tally()
    samples: list[Sample] = []
    with ServerProcess(config) as server:
        convs = [Conversation(server, workspace, seed * 1000 + i, tally) for i in range(conversations)]

        async def take_turns(turn_numbers: range) -> None:
            async def one(c: Conversation) -> None:
                for n in turn_numbers:
                    await c.turn(n)

            await asyncio.gather(*(one(c) for c in convs))

        took = 0.0
        try:
            for begin, end in zip((0, *marks), marks):
                started = time.monotonic()
                await take_turns(range(begin, end))
                took += time.monotonic() - started
                samples.append(await settled(server, convs))
        finally:
            for c in convs:
                await c.ide.close()
    warm, last = samples[0], samples[-1]
    growth = (last.rss - warm.rss) / warm.rss
    print(
        f"\nsoak: {conversations} conversations x {marks[-1]} turns ({took:.0f} s of turns), turn kinds {dict(tally.kinds)}, "
        f"{tally.cancelled} cancelled in flight, {tally.streams} RunSSEs read to their end, {len(tally.bad_streams)} without one terminal, {tally.reread} read again after their connection dropped; "
        f"after warm-up ({marks[0]} turns) {warm}; then " + "; ".join(f"after {m} turns {s}" for m, s in zip(marks[1:], samples[1:]))
        + f"; RSS growth {growth:+.1%}"
    )
    assert not tally.bad_streams, tally.bad_streams[:5]
    assert not tally.wrong, tally.wrong[:5]
    assert all(s.journaled == 0 for s in samples)  # every stream ended: nothing left to apply again
    assert growth < 0.05 or not check_rss
    assert last.fds <= warm.fds


@pytest.mark.timeout(600)
async def test_soak(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    await soak(tmp_path, provider, workspace, conversations=12, marks=(3, 8), seed=12, check_rss=False)


@pytest.mark.soak
@pytest.mark.timeout(3600)
async def test_soak_full(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    await soak(tmp_path, provider, workspace, conversations=50, marks=(5, 10, 15, 20), seed=1212, check_rss=True)
