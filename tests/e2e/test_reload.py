"""SIGHUP reloads the config: models, aliases, prices, model limits and the log level, without
dropping a stream; a config with problems keeps the running one and says what is wrong."""
from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from pathlib import Path

import httpx

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

USABLE_MODELS = "/agent.v1.AgentService/GetUsableModels"


async def listed(server: ServerProcess) -> bytes:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        resp = await client.post(USABLE_MODELS, content=b"", headers={"content-type": "application/proto"})
    assert resp.status_code == 200, resp.text
    return resp.content


def wait_for_line(server: ServerProcess, text: str, count: int = 1, timeout: float = 10.0) -> list[str]:
    """The log lines holding `text`, once there are `count` of them (the server wrote them)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [line for line in server.log_path.read_text(errors="replace").splitlines() if text in line]
        if len(lines) >= count:
            return lines
        assert server.proc is not None and server.proc.poll() is None, f"the server exited:\n{server.log()}"
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.02)


async def test_sighup_adds_a_model_without_dropping_an_open_stream(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id="m", provider="openai-chat", base_url=provider.url + "/v1")])
    server = ServerProcess(config).start()
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        assert b"m2" not in await listed(server)
        slow = OPENAI_CHAT.text(["s "] * 100)
        slow.chunk_delay = 0.02
        provider.enqueue(slow)
        log = StreamLog()
        rid = uuid.uuid4().hex
        reader = asyncio.create_task(ide.stream(rid, log))
        await ide.append(rid, run_request("go", model="m", conversation_id=uuid.uuid4().hex))
        while not log.text:  # the stream is open and streaming
            await asyncio.sleep(0.01)

        config.models.append(ModelSpec(id="m2", provider="openai-chat", base_url=provider.url + "/v1", model="second-model"))
        server.config_path.write_text(config.toml(server.port))
        assert server.proc is not None
        server.proc.send_signal(signal.SIGHUP)
        await asyncio.to_thread(wait_for_line, server, "config reloaded")

        assert b"m2" in await listed(server)
        provider.enqueue(OPENAI_CHAT.text(["from m2"]))
        turn = await ide.turn(run_request("hi", model="m2", conversation_id=uuid.uuid4().hex))
        assert turn.text == "from m2" and turn.terminal is None
        assert json.loads(provider.requests[-1].body)["model"] == "second-model"

        await asyncio.wait_for(reader, 30)
        assert log.text == "s " * 100 and log.terminals == 1 and log.terminal is None and not log.broken
    finally:
        await ide.close()
        server.stop()
    assert server.proc.returncode == 0


async def test_sighup_with_a_broken_config_keeps_the_running_one(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id="m", provider="openai-chat", base_url=provider.url + "/v1")])
    server = ServerProcess(config).start()
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        good = server.config_path.read_text()
        # two problems: an unknown key, and a provider kind that does not exist
        server.config_path.write_text(good + '\n[[models]]\nid = "bad"\nprovider = "nope"\nmodel = "x"\ncolour = "red"\n')
        assert server.proc is not None
        server.proc.send_signal(signal.SIGHUP)
        lines = await asyncio.to_thread(wait_for_line, server, "config not reloaded", 2)
        assert any("colour" in line for line in lines) and any("provider" in line for line in lines), lines
        assert all(str(server.config_path) in line for line in lines)

        listing = await listed(server)
        assert b"bad" not in listing and b"m" in listing
        provider.enqueue(OPENAI_CHAT.text(["still here"]))
        turn = await ide.turn(run_request("hi", model="m", conversation_id=uuid.uuid4().hex))
        assert turn.text == "still here"
    finally:
        await ide.close()
        server.stop()
    assert server.proc.returncode == 0


async def test_sighup_sets_the_log_level_from_the_config(tmp_path: Path, provider: FakeProviderServer) -> None:
    config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id="m", provider="openai-chat", base_url=provider.url + "/v1")])
    server = ServerProcess(config).start()
    try:
        with FakeProviderServer(keep_alive=True) as other:
            # a model on a new provider: its connection warm-up is logged at debug level only
            config.models.append(ModelSpec(id="m2", provider="openai-chat", base_url=other.url + "/v1"))
            config.extra_toml = '[observability]\nlog_level = "debug"\n'
            server.config_path.write_text(config.toml(server.port))
            assert server.proc is not None
            server.proc.send_signal(signal.SIGHUP)
            await asyncio.to_thread(other.wait_for_probes, 1, 15)
            await asyncio.to_thread(wait_for_line, server, f"connection to {other.url} is warm")
    finally:
        server.stop()
    assert server.proc.returncode == 0
