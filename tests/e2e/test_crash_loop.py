"""The crash loop: the real `serve` SIGKILLed at random moments of a conversation's turns (while the
model streams, while tools run, with a result in flight, while the final checkpoint waits, during a
background completion, or anywhere), restarted on the same data dir, and the scripted IDE coming
back as Cursor does: it sends again what got no 200, reads the same request id's stream again, and
retries the turn when that stream has nothing for it.

After every restart: no process of the old server left, one listener, `PRAGMA integrity_check` ok,
every acknowledged input in the history once, every finished turn answered once, every tool call
answered once (with the IDE's result when that had been acknowledged), no exec run twice, and the
conversation goes on.
"""
from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.fakes import FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess, listeners

from .crash_loop import KINDS, MODEL, PHASES, LoopModel, check_history, input_key, read_history, turn_message

TURN_TIMEOUT = 30.0


@pytest.fixture
def config(tmp_path: Path, provider: FakeProviderServer) -> ServerConfig:
    provider.respond_with(LoopModel())
    return ServerConfig(
        data_dir=tmp_path / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
        runsse_wait_seconds=1.0,
        continuation_window_seconds=0.1,
        extra_server={"blob_ack_timeout_seconds": 1.0, "recovery_wait_seconds": 5.0},
    )


class Loop:
    def __init__(self, server: ServerProcess, workspace: Path, seed: int) -> None:
        self.server = server
        self.rng = random.Random(seed)
        self.conv = uuid.uuid4().hex
        self.ide = ScriptedIDE(server.base_url, workspace)
        self.ide.tolerate_crashes = True
        self.inputs: list[str] = []  # history keys of the inputs the server acknowledged
        self.answered: list[str] = []  # turns that finished
        self.phases: Counter[str] = Counter()
        self.kills = 0
        self.retries = 0
        self.database = server.config.data_dir / "state.db"
        for n in range(1000):
            (workspace / f"t{n}.txt").write_text(f"T{n}-CONTENT\n")

    async def turn(self, n: int, kill: bool) -> None:
        phase = self.rng.choice(list(PHASES)) if kill else ""
        kind = PHASES.get(phase) or self.rng.choice(KINDS)
        message = turn_message(self.conv, n, kind)
        rid = uuid.uuid4().hex
        log = StreamLog()
        self.ide.hold_kv = phase == "checkpointing"
        self.ide.hold_execs = phase in ("result in flight", "one result acknowledged")
        reader = asyncio.create_task(self.ide.stream(rid, log))
        await self.ide.append(rid, message)
        if kill:
            await self.kill_at(phase, kind, log, rid)
            self.phases[phase] += 1
            await asyncio.wait_for(reader, 10)
            log = await self.come_back(rid)
        else:
            await asyncio.wait_for(reader, TURN_TIMEOUT)
        while log.terminal is not None or not log.finished:  # the turn is the IDE's to send again
            self.retries += 1
            assert self.retries < 500, "retries do not converge"
            message.run_request.run_id = uuid.uuid4().hex  # a new Cursor run, the same input
            log = await self.ide.turn(message, timeout=TURN_TIMEOUT)
        key = input_key(message)
        if any(m.HasField("run_request") and input_key(m) == key for _, _, m in self.ide.acked):
            self.inputs.append(key)
        self.answered.append(str(n))

    async def kill_at(self, phase: str, kind: str, log: StreamLog, rid: str) -> None:
        """SIGKILL the main process once the turn is in `phase` (if it gets there: a turn without
        tools is killed wherever it is when the wait ends), at a random moment within it."""
        started = time.monotonic()

        def reached() -> bool:
            if log.finished or time.monotonic() - started > 3.0:
                return True
            if phase in ("modeling", "background completion"):
                return bool(log.text)
            if phase == "tools":
                return any(m.HasField("exec_server_message") for m in log.messages)
            if phase == "result in flight":
                return bool(self.ide.held)
            if phase == "one result acknowledged":
                return len(self.ide.held) == 2
            if phase == "checkpointing":
                return "turn_ended" in log.kinds()
            return time.monotonic() - started > self.rng.uniform(0.0, 0.8)

        while not reached():
            await asyncio.sleep(0.002)
        if phase == "result in flight" and self.ide.held:
            # The IDE sends the results; the server dies while they are on their way.
            self.ide.hold_execs = False
            sends = asyncio.create_task(self.ide.release_held())
            await asyncio.sleep(self.rng.uniform(0.0, 0.004))
        elif phase == "one result acknowledged" and len(self.ide.held) == 2:
            # One result is in (200); the server dies before the IDE sends the other.
            first = self.ide.held.pop(self.rng.randrange(2))
            for reply in self.ide.execute(first[1]):
                await self.ide.append(first[0], reply)
            sends = None
        else:
            sends = None
            await asyncio.sleep(self.rng.uniform(0.0, 0.05))
        self.server.kill_main()
        self.kills += 1
        if sends is not None:
            await sends
        assert self.server.survivors() == [], "a process of the killed server lives on"
        assert listeners(self.server.port) == 0

    async def come_back(self, rid: str) -> StreamLog:
        """Restart, then the IDE as after a restart: resend, finish what it held, read again."""
        self.server.start()
        assert listeners(self.server.port) == 1
        ide = self.ide
        await ide.reconnect()
        ide.hold_kv = ide.hold_execs = False
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(rid, log))
        await ide.resend_unacked()
        await ide.release_held()
        return await asyncio.wait_for(reader, TURN_TIMEOUT)

    def check(self) -> None:
        history, verdict = read_history(self.database, self.conv)
        assert verdict == "ok", verdict
        acked_results = {m.exec_client_message.exec_id for _, _, m in self.ide.acked if m.HasField("exec_client_message")}
        check_history(history, self.inputs, self.answered, acked_results)
        executed = Counter((ex.exec_id, ex.WhichOneof("message")) for ex in self.ide.exec_log)
        assert all(count == 1 for count in executed.values()), [k for k, c in executed.items() if c > 1]


async def crash_loop(config: ServerConfig, workspace: Path, kills: int, seed: int) -> Loop:
    server = ServerProcess(config).start()
    loop = Loop(server, workspace, seed)
    try:
        n = 0
        while loop.kills < kills:
            await loop.turn(n, kill=True)
            loop.check()
            n += 1
        await loop.turn(n, kill=False)  # the conversation goes on
        loop.check()
    finally:
        await loop.ide.close()
        server.stop()
    log = server.log_path.read_text(errors="replace")
    print(
        f"\ncrash loop: {loop.kills} kills, {n + 1} turns, {loop.retries} retried turns, phases {dict(loop.phases)}; "
        f"{log.count('journaled streams resumed')} starts resumed journaled streams, {log.count('tool batch cut by the restart rebuilt')} "
        f"tool batches rebuilt; {len(loop.ide.acked)} appends acknowledged, {len(loop.inputs)} inputs checked"
    )
    return loop


@pytest.mark.timeout(600)
async def test_crash_loop(config: ServerConfig, workspace: Path) -> None:
    await crash_loop(config, workspace, kills=20, seed=12)


@pytest.mark.soak
@pytest.mark.timeout(3600)
async def test_crash_loop_soak(config: ServerConfig, workspace: Path) -> None:
    await crash_loop(config, workspace, kills=200, seed=1212)
