"""End-to-end fixtures: the real server in a subprocess, a fake provider, a scripted IDE."""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.fakes import FakeProviderServer
from tests.harness.ide import ScriptedIDE
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

MODEL = "byok-test"


@pytest.fixture
def provider() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        yield server


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


@pytest.fixture
def server_config(tmp_path: Path, provider: FakeProviderServer) -> ServerConfig:
    return ServerConfig(
        data_dir=tmp_path / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
        runsse_wait_seconds=3.0,
    )


@pytest.fixture
def server(server_config: ServerConfig) -> Iterator[ServerProcess]:
    proc = ServerProcess(server_config).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest_asyncio.fixture
async def ide(server: ServerProcess, workspace: Path) -> AsyncIterator[ScriptedIDE]:
    client = ScriptedIDE(server.base_url, workspace)
    try:
        yield client
    finally:
        await client.close()
