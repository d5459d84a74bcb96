"""Fixtures for runtime tests: the real store, service and output hub in this process, against a
fake provider server (tests/harness/inprocess.py)."""
from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes import FakeProviderServer
from tests.fakes.fixtures import provider, shared_provider  # noqa: F401  (fixtures)
from tests.harness.inprocess import Rig


@pytest.fixture
async def rig(tmp_path: Path, provider: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    monkeypatch.setenv("CURSOR_BYOK_STRICT_PREFIX", "1")
    opened = await Rig(tmp_path, provider).start()
    try:
        yield opened
    finally:
        await opened.close()
