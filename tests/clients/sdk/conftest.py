"""The SDK interop fixtures: Node and the SDK (installed once per machine), a fake provider, a
stand-in for Cursor's backend and the real server between them."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import FakeProviderServer
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

from .client import NodeUnavailable, SdkDriver, find_node, install_sdk, stand_in_upstream

MODEL = "byok-sdk"


@pytest.fixture(scope="session")
def sdk_install() -> tuple[str, Path]:
    """(node, SDK package dir). Skipped, loudly, only where Node or the SDK cannot be installed."""
    try:
        return find_node(), install_sdk()
    except NodeUnavailable as exc:
        pytest.skip(f"CURSOR SDK INTEROP NOT RUN: {exc}")


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeProviderServer]:
    with stand_in_upstream() as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, shared_provider: FakeProviderServer, upstream: FakeProviderServer) -> Iterator[ServerProcess]:
    cfg = ServerConfig(
        data_dir=tmp_path_factory.mktemp("sdk") / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=shared_provider.url + "/v1")],
        upstream=upstream.url,
        continuation_window_seconds=None,  # what users run: the turn-end test measures it
    )
    with ServerProcess(cfg) as proc:
        yield proc


@pytest.fixture
def sdk(sdk_install: tuple[str, Path], server: ServerProcess, tmp_path: Path) -> SdkDriver:
    home = tmp_path / "home"
    home.mkdir()
    node, package = sdk_install
    return SdkDriver(node=node, sdk=package, backend=server.base_url, home=home)
