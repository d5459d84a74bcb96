"""The captures in `tests/fixtures/captures/` replay against today's server with no divergence:
each was recorded from a real client session (`sessions.py`), and each replays with its provider
answering as it did then (`provider.json`)."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import FakeProviderServer
from tests.harness.capture import replay
from tests.harness.server import ServerProcess

from .sdk_session import SDK_SESSION
from .sessions import FIXTURES, SESSIONS, enqueue, server_config

CAPTURED = sorted(p for p in FIXTURES.iterdir() if p.is_dir()) if FIXTURES.exists() else []


def test_every_recorded_session_has_its_fixture() -> None:
    assert {p.name for p in CAPTURED} >= {*SESSIONS, SDK_SESSION}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, shared_provider: FakeProviderServer) -> Iterator[ServerProcess]:
    with ServerProcess(server_config(tmp_path_factory.mktemp("fixtures") / "server", shared_provider)) as proc:
        yield proc


@pytest.mark.parametrize("fixture", CAPTURED, ids=[p.name for p in CAPTURED])
def test_a_fixture_replays_with_no_divergence(fixture: Path, server: ServerProcess, provider: FakeProviderServer) -> None:
    enqueue(provider, json.loads((fixture / "provider.json").read_text()))
    files = sorted(fixture.glob("0*.json"))
    result = replay([fixture], server.base_url)  # the folder, as a user passes it: provider.json is not a capture
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"no divergence ({len(files)} stream(s) replayed, 0 skipped)" in result.stdout, result.stdout
