"""One server per data dir and per port, and no process outlives the server.

A crash of the main `serve` process (SIGKILL, as the OOM killer does: only that process) must take
everything it started with it, release the port and the data dir, and let a restart serve every
turn. A second `serve` on the same data dir or the same port must refuse to start with one line.
"""
from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path

import pytest

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess, listeners

MODEL = "byok-owner"


@pytest.fixture
def config(tmp_path: Path, provider: FakeProviderServer) -> ServerConfig:
    return ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")])


def wait_for_no_survivors(server: ServerProcess, within: float) -> list[int]:
    deadline = time.monotonic() + within
    while (left := server.survivors()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


async def turns_in_a_row(server: ServerProcess, provider: FakeProviderServer, workspace: Path, count: int) -> None:
    conv = uuid.uuid4().hex
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        for i in range(count):
            provider.enqueue(OPENAI_CHAT.text([f"answer {i}"]))
            log = await ide.turn(run_request(f"question {i}", model=MODEL, conversation_id=conv), timeout=15)
            assert (log.terminals, log.terminal, log.text) == (1, None, f"answer {i}"), (i, log.terminal)
    finally:
        await ide.close()


async def test_sigkill_of_the_main_process_leaves_nothing_and_a_restart_serves_every_turn(
    config: ServerConfig, provider: FakeProviderServer, workspace: Path
) -> None:
    server = ServerProcess(config).start()
    await turns_in_a_row(server, provider, workspace, 1)
    server.kill_main()
    assert wait_for_no_survivors(server, within=1.0) == []
    assert listeners(server.port) == 0
    server.start()  # same config, same port, same data dir
    try:
        assert listeners(server.port) == 1
        await turns_in_a_row(server, provider, workspace, 12)
    finally:
        assert server.stop() == 0


def one_line(result) -> str:  # type: ignore[no-untyped-def]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1 and len(lines) == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize("same_port", [False, True], ids=["other-port", "same-port"])
def test_a_second_serve_on_the_same_data_dir_names_the_running_one(config: ServerConfig, same_port: bool) -> None:
    first = ServerProcess(config).start()
    try:
        second = ServerProcess(config)
        if same_port:
            second.port = first.port
        line = one_line(second.run_to_exit())
        assert first.proc is not None
        assert f"PID {first.proc.pid}" in line and f"127.0.0.1:{first.port}" in line, line
        assert listeners(first.port) == 1
    finally:
        assert first.stop() == 0


def test_a_second_serve_on_the_same_port_refuses_with_one_line(config: ServerConfig, tmp_path: Path) -> None:
    first = ServerProcess(config).start()
    try:
        other = ServerConfig(data_dir=tmp_path / "other", models=config.models)
        second = ServerProcess(other)
        second.port = first.port
        line = one_line(second.run_to_exit())
        assert f"127.0.0.1:{first.port}" in line and "in use" in line, line
        assert listeners(first.port) == 1
    finally:
        assert first.stop() == 0


@pytest.mark.parametrize("reuse_port", [False, True], ids=["plain", "so-reuseport"])
def test_a_port_held_by_another_program_refuses_with_one_line(config: ServerConfig, reuse_port: bool) -> None:
    with socket.socket() as holder:
        if reuse_port:  # a program that itself allows sharing: we still never share
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        server = ServerProcess(config)
        server.port = holder.getsockname()[1]
        line = one_line(server.run_to_exit())
        assert f"127.0.0.1:{server.port}" in line and "in use" in line, line
        assert listeners(server.port) == 1


def test_the_listening_socket_is_never_shared(config: ServerConfig) -> None:
    server = ServerProcess(config).start()
    try:
        with socket.socket() as intruder:
            intruder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            with pytest.raises(OSError):
                intruder.bind(("127.0.0.1", server.port))
    finally:
        assert server.stop() == 0
