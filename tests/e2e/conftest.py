"""End-to-end fixtures: the real server in a subprocess, a fake provider, a scripted IDE."""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.fakes import FakeProviderServer
from tests.fakes.fixtures import provider, shared_provider  # noqa: F401  (fixtures)
from tests.harness.ide import TRANSPORTS, ScriptedIDE
from tests.harness.server import LIVE, ModelSpec, ServerConfig, ServerProcess

from .edge_support import EdgeServerConfig, free_port

MODEL = "byok-test"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


@pytest.fixture(scope="module")
def server_config(tmp_path_factory: pytest.TempPathFactory, shared_provider: FakeProviderServer) -> ServerConfig:
    return EdgeServerConfig(
        data_dir=tmp_path_factory.mktemp("server") / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=shared_provider.url + "/v1")],
        runsse_wait_seconds=1.5,
        extra_server={"blob_ack_timeout_seconds": 1.5},
        proxy_port=free_port(),  # the intercepting proxy beside it, for the run-via-proxy transport
    )


def proxy_of(server: ServerProcess) -> tuple[int, Path] | None:
    """(port, CA file) of the server's intercepting proxy, if it runs one."""
    port = getattr(server.config, "proxy_port", None)
    return (port, server.config.data_dir / "ca" / "ca.crt") if port is not None else None


@pytest.fixture(scope="module")
def server(server_config: ServerConfig) -> Iterator[ServerProcess]:
    with ServerProcess(server_config) as proc:
        yield proc


@pytest.fixture
def transport(request: pytest.FixtureRequest) -> str:
    """How the scripted IDE talks to the server: RunSSE + BidiAppend ("sse"), or one HTTP/2 Run
    stream per request id ("run"). A test runs over both with `both_transports`."""
    return getattr(request, "param", "sse")


both_transports = pytest.mark.parametrize("transport", TRANSPORTS, indirect=True)
# For a test that starts a server of its own (no proxy beside it): RunSSE + BidiAppend, and Run on h2c.
direct_transports = pytest.mark.parametrize("transport", TRANSPORTS[:2], indirect=True)


@pytest_asyncio.fixture
async def ide(server: ServerProcess, workspace: Path, transport: str) -> AsyncIterator[ScriptedIDE]:
    client = ScriptedIDE(server.base_url, workspace, transport=transport, proxy=proxy_of(server))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture(autouse=True)
def no_broken_invariants(tmp_path: Path) -> Iterator[None]:
    """Servers a test starts itself are stopped after it (even when it failed) and log under its
    tmp_path: fail the test if one broke an invariant."""
    before = set(LIVE)
    yield
    for server in LIVE - before:
        server.stop()
    broken = []
    for log in tmp_path.rglob("server.log"):
        broken += [line for line in log.read_text(errors="replace").splitlines() if any(m in line for m in ServerProcess.INVARIANT_ERRORS)]
    assert not broken, "server broke an invariant:\n" + "\n".join(broken)
