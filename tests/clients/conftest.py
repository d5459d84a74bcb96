"""Clients written by others (Buf's Connect runtimes) against the real server: one server per
module with a fake provider behind it, as in tests/e2e."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import FakeProviderServer
from tests.fakes.fixtures import provider, shared_provider  # noqa: F401  (fixtures)
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

MODEL = "byok-clients"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, shared_provider: FakeProviderServer) -> Iterator[ServerProcess]:
    config = ServerConfig(
        data_dir=tmp_path_factory.mktemp("server") / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=shared_provider.url + "/v1")],
        runsse_wait_seconds=3.0,
    )
    with ServerProcess(config) as proc:
        yield proc


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws
