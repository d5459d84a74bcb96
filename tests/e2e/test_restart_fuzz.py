"""A start never fails because of stored data, whatever came before the stop: the restart fuzz
(restart_fuzz.py) over the real server, bounded here; `make soak` runs it 500 times."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes import FakeProviderServer
from tests.harness.server import ServerConfig, one_model_config

from .restart_fuzz import MODEL, restart_fuzz


@pytest.fixture
def config(tmp_path: Path, provider: FakeProviderServer, store_url: str) -> ServerConfig:
    """On both store backends. A resumed run nobody comes back for ends soon: streams of earlier
    cycles do not pile up."""
    extra = {"recovery_wait_seconds": 1.0, "blob_ack_timeout_seconds": 1.0}
    return one_model_config(tmp_path / "data", provider.url, MODEL, extra_server=extra, store_url=store_url)


def check(figures) -> None:  # noqa: ANN001 - Figures
    print(figures.summary())
    assert not figures.lost, figures.lost
    assert not figures.kept, figures.kept
    assert figures.acknowledged and figures.refused


async def test_restarts_after_random_appends_and_stops_always_serve(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    check(await restart_fuzz(config, provider, workspace, restarts=20, seed=32))


@pytest.mark.soak
@pytest.mark.timeout(3600)
async def test_soak_restart_fuzz(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    """500 restarts. How long each start took is a figure of its summary (p50, p95, max, how many
    took over twice the median), recorded in benchmarks/results/reliability.md, not an assertion:
    on a shared machine a start's time is the machine's as much as the server's."""
    check(await restart_fuzz(config, provider, workspace, restarts=500, seed=3200))
