"""Storage faults against the real server: a read-only data dir, a full disk, a damaged database.

At start each is one clear line and exit 1; during a run the append that could not be stored is
refused and the affected run ends with a Connect `unavailable` error (never a silent success that
was not saved) and the server recovers once the fault is gone; `doctor` explains each. The read-only and full file systems are real ones (a
read-only bind mount, a size-limited tmpfs), mounted in the server's own user and mount namespaces.
"""
from __future__ import annotations

import asyncio
import errno
import json
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess, in_mount_namespace

MODEL = "byok-storage"


@pytest.fixture
def config(tmp_path: Path, provider: FakeProviderServer) -> ServerConfig:
    state = tmp_path / "state"
    state.mkdir()
    return ServerConfig(data_dir=tmp_path / "data", state_dir=state, models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")])


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1 and len(lines) == 1, (result.returncode, result.stderr)
    return lines[0]


def doctor_line(result: subprocess.CompletedProcess[str], name: str) -> str:
    [line] = [line for line in result.stdout.splitlines() if line.split(":")[0].split(None, 1)[-1] == name]
    return line


async def turn(server: ServerProcess, workspace: Path, conv: str, text: str) -> StreamLog:
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        return await ide.turn(run_request(text, model=MODEL, conversation_id=conv), timeout=20)
    finally:
        await ide.close()


async def a_conversation(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    server = ServerProcess(config).start()
    provider.enqueue(OPENAI_CHAT.text(["kept answer"]))
    log = await turn(server, workspace, uuid.uuid4().hex, "kept question")
    assert log.terminal is None
    assert server.stop() == 0


async def test_a_damaged_database_is_one_line_at_start_and_doctor_explains(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    await a_conversation(config, provider, workspace)
    assert config.state_dir is not None
    database = config.state_dir / "state.db"
    with open(database, "r+b") as fh:
        fh.write(b"this is not what SQLite wrote" * 4)  # over the header
    server = ServerProcess(config)
    line = one_line(server.run_to_exit())
    assert str(database) in line and "database damaged" in line and "cursor-byok db repair" in line, line
    doctor = server.run_to_exit("doctor")
    assert doctor.returncode == 1
    assert doctor_line(doctor, "database").startswith("FAIL") and "database damaged" in doctor_line(doctor, "database")


async def test_a_read_only_data_dir_is_one_line_at_start_and_doctor_explains(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    await a_conversation(config, provider, workspace)
    state = config.state_dir
    server = ServerProcess(config, wrap=in_mount_namespace(f"mount --bind {state} {state}", f"mount -o remount,bind,ro {state}"))
    line = one_line(server.run_to_exit())
    assert f"data dir {state}" in line and "Read-only file system" in line and "writable" in line, line
    doctor = server.run_to_exit("doctor")
    assert doctor.returncode == 1
    assert doctor_line(doctor, "data dir").startswith("FAIL") and "not writable" in doctor_line(doctor, "data dir")


def test_a_full_disk_is_one_line_at_start(config: ServerConfig) -> None:
    state = config.state_dir
    fill = f"dd if=/dev/zero of={state}/filler bs=64k 2>/dev/null || true"
    server = ServerProcess(config, wrap=in_mount_namespace(f"mount -t tmpfs -o size=1m tmpfs {state}", fill))
    line = one_line(server.run_to_exit())
    assert str(state) in line and "space left" in line.lower() and line.endswith("free disk space"), line


def fill(directory: Path) -> Path:
    """Write zeros into `directory` until its file system is full."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(bytes(64 * 1024))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


async def test_a_disk_that_fills_up_fails_the_affected_run_and_the_server_recovers(
    config: ServerConfig, provider: FakeProviderServer, workspace: Path
) -> None:
    state = config.state_dir
    server = ServerProcess(config, wrap=in_mount_namespace(f"mount -t tmpfs -o size=4m tmpfs {state}")).start()
    try:
        assert server.proc is not None
        seen_by_us = Path(f"/proc/{server.proc.pid}/root{state}")  # the server's tmpfs, from outside
        conv = uuid.uuid4().hex
        provider.enqueue(OPENAI_CHAT.text(["alpha answer"]))
        assert (await turn(server, workspace, conv, "alpha question")).terminal is None

        filler = fill(seen_by_us)
        provider.enqueue(OPENAI_CHAT.text(["bravo answer"]))
        ide = ScriptedIDE(server.base_url, workspace)
        try:
            rid, failed = uuid.uuid4().hex, StreamLog()
            reader = asyncio.create_task(ide.stream(rid, failed))
            refused = await ide.append(rid, run_request("bravo question", model=MODEL, conversation_id=conv))
            await asyncio.wait_for(reader, 20)
        finally:
            await ide.close()
        # Not stored, so not acknowledged: the IDE is told to send it again, and why.
        assert refused.status_code == 503 and refused.json()["code"] == "unavailable", refused.text
        assert "no space left" in refused.json()["message"] and "send it again" in refused.json()["message"]
        assert failed.terminals == 1 and failed.terminal is not None
        assert failed.terminal.code == "unavailable" and "no space left" in failed.terminal.message, failed.terminal

        doctor = ServerProcess(ServerConfig(data_dir=config.data_dir / "doctor", state_dir=seen_by_us)).run_to_exit("doctor")
        assert doctor_line(doctor, "data dir").startswith("FAIL") and "no space left" in doctor_line(doctor, "data dir")
        assert "held by cursor-byok serve" in doctor_line(doctor, "data dir lock")

        with provider._lock:  # whether the failed run got as far as the model is not the point here
            provider._replies.clear()
        filler.unlink()
        provider.enqueue(OPENAI_CHAT.text(["charlie answer"]))
        recovered = await turn(server, workspace, conv, "charlie question")
        assert recovered.terminals == 1 and recovered.terminal is None and recovered.text == "charlie answer"
        history = json.dumps(provider.requests[-1].json()["messages"])
        assert all(said in history for said in ("alpha question", "alpha answer", "charlie question")), history
    finally:
        assert server.stop() == 0
