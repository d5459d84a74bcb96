"""Fixtures for runtime tests: the real store, service and output hub in this process, against a
fake provider server (tests/harness/inprocess.py)."""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.fakes import FakeProviderServer
from tests.harness.inprocess import Rig


@pytest.fixture(scope="module")
def shared_provider() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        yield server


@pytest.fixture
def provider(shared_provider: FakeProviderServer) -> FakeProviderServer:
    with shared_provider._lock:
        shared_provider.requests.clear()
        shared_provider._replies.clear()
    shared_provider.respond_with(None)
    return shared_provider


@pytest.fixture
async def rig(tmp_path: Path, provider: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    monkeypatch.setenv("CURSOR_BYOK_STRICT_PREFIX", "1")
    opened = await Rig(tmp_path, provider).start()
    try:
        yield opened
    finally:
        await opened.close()
