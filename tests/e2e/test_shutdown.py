"""Graceful shutdown: SIGTERM ends every open RunSSE with exactly one terminal frame."""
from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

import httpx

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, gauge_reaches, run_request
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


async def test_a_reader_still_waiting_for_its_first_append_also_gets_unavailable(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id="m", provider="openai-chat", base_url=provider.url + "/v1")], runsse_wait_seconds=60)
    server = ServerProcess(config).start()
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(uuid.uuid4().hex, log))  # its append never comes
        await gauge_reaches(ide.client, "cursor_byok_runsse_waiting", 1)  # the server has read it
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(reader, 20)
        assert server.proc.wait(20) == 0
    finally:
        await ide.close()
    assert not log.broken and log.terminals == 1
    assert log.terminal is not None and (log.terminal.code, log.terminal.message) == ("unavailable", "server shutting down")


async def test_a_request_that_never_ends_does_not_hold_the_stop(tmp_path: Path) -> None:
    """An upstream that accepts and never answers: the passthrough request is cut at the stop
    deadline instead of holding the server until the upstream timeout (300 s)."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        config = ServerConfig(data_dir=tmp_path / "data", upstream=f"http://127.0.0.1:{silent.getsockname()[1]}")
        server = ServerProcess(config).start()
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            hanging = asyncio.create_task(client.post("/aiserver.v1.AiService/Anything", content=b"", headers={"content-type": "application/proto"}))
            await gauge_reaches(client, "cursor_byok_requests_in_flight", 2)  # it, and the scrape asking
            assert server.proc is not None
            server.proc.send_signal(signal.SIGTERM)
            assert server.proc.wait(20) == 0
            await asyncio.gather(hanging, return_exceptions=True)
    assert "Traceback" not in server.log()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
async def test_a_failed_provider_warm_up_never_breaks_the_stop(sig: int, tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    """A provider that answers the warm-up HEAD with a body (the client reads it as a broken
    response): the stop still exits 0 and leaves the database checkpointed and closed."""
    with FakeProviderServer(keep_alive=True, head_body=b"hello") as odd:
        models = [ModelSpec(id="m", provider="openai-chat", base_url=provider.url + "/v1"), ModelSpec(id="odd", provider="openai-chat", base_url=odd.url + "/v1")]
        config = ServerConfig(data_dir=tmp_path / "data", models=models)
        server = ServerProcess(config).start()
        await asyncio.to_thread(odd.wait_for_probes, 1)
        provider.enqueue(OPENAI_CHAT.text(["done"]))
        ide = ScriptedIDE(server.base_url, workspace)
        try:  # a whole turn after the probe was answered: its answer has been read by then
            log = await ide.turn(run_request("go", model="m", conversation_id=uuid.uuid4().hex))
        finally:
            await ide.close()
        assert log.text == "done"
        assert server.proc is not None
        os.killpg(server.proc.pid, sig)
        assert server.proc.wait(20) == 0, server.log()
    assert "(a bug)" not in server.log()
    database = config.data_dir / "state.db"
    wal = database.with_name("state.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0, f"{wal.stat().st_size} bytes of WAL left beside {database.stat().st_size}"
