"""Graceful shutdown: SIGTERM ends every open RunSSE with exactly one terminal frame."""
from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess


import os

import pytest


def to_main(proc, sig: int) -> None:  # type: ignore[no-untyped-def]
    proc.send_signal(sig)


def to_group(proc, sig: int) -> None:  # type: ignore[no-untyped-def]
    os.killpg(proc.pid, sig)  # the server runs in its own session: its pid is the group id


@pytest.mark.parametrize(
    ("deliver", "sig"),
    [
        (to_main, signal.SIGTERM),  # docker stop, kill PID
        (to_group, signal.SIGINT),  # Ctrl-C in a terminal reaches the whole foreground group
        (to_group, signal.SIGTERM),  # systemd stop (KillMode=control-group)
    ],
    ids=["sigterm-main", "ctrl-c-group", "sigterm-group"],
)
async def test_stop_signal_ends_every_open_stream_with_one_terminal(
    deliver, sig: int, tmp_path: Path, provider: FakeProviderServer, workspace: Path  # type: ignore[no-untyped-def]
) -> None:
    config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id="m", provider="openai-chat", base_url=provider.url + "/v1")])
    server = ServerProcess(config).start()
    for _ in range(3):
        slow = OPENAI_CHAT.text(["s "] * 200)
        slow.chunk_delay = 0.05
        provider.enqueue(slow)
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        logs = [StreamLog() for _ in range(3)]
        readers = []
        for log in logs:
            rid = uuid.uuid4().hex
            readers.append(asyncio.create_task(ide.stream(rid, log)))
            await ide.append(rid, run_request("go", model="m", conversation_id=uuid.uuid4().hex))
        while not all(log.text for log in logs):
            await asyncio.sleep(0.02)
        assert server.proc is not None
        deliver(server.proc, sig)
        await asyncio.wait_for(asyncio.gather(*readers), 20)
        assert server.proc.wait(20) == 0
    finally:
        await ide.close()
    for log in logs:
        assert not log.broken and log.terminals == 1
        assert log.terminal is not None and log.terminal.code == "unavailable"
