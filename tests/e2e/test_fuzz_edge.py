"""Bad input on every route of the real server (issue: fault suite, bad input): random and mutated
Connect envelopes, protobufs (valid shapes with random values, truncated, wrong wire types), hex
bodies, header sets and request targets. Never a 5xx, never a dead worker, every refusal a specific
Connect error. Bounded here (~30 s); `make soak` sends at least a million inputs."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.harness.server import ServerProcess

from .edge_support import edge_config, provider_and_upstream, server_processes, server_rss
from .junk import pour

MODEL = "byok-fuzz"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with provider_and_upstream() as (provider, upstream):
        cfg = edge_config(
            tmp_path_factory.mktemp("fuzz"),
            MODEL,
            provider,
            upstream,
            runsse_wait_seconds=0.5,
            output_retention_seconds=1.0,
            extra_server={"transport_idle_seconds": 5.0, "blob_ack_timeout_seconds": 1.0},
        )
        with ServerProcess(cfg) as proc:
            yield proc


async def fuzz(server: ServerProcess, *, seconds: float | None = None, inputs: int | None = None, connections: int = 6, seed: int = 12) -> dict[str, object]:
    workers = server_processes(server)
    rss_before = server_rss(server)
    stop = asyncio.Event()
    started = time.monotonic()
    task = asyncio.create_task(pour(server.port, f"127.0.0.1:{server.port}", MODEL, seed=seed, connections=connections, stop=stop, limit=inputs))
    if seconds is not None:
        await asyncio.sleep(seconds)
        stop.set()
    stats = await task
    elapsed = time.monotonic() - started
    figures = {
        "inputs": stats.sent,
        "seconds": round(elapsed, 1),
        "inputs/s": round(stats.sent / elapsed),
        "statuses": dict(sorted(stats.statuses.items(), key=str)),
        "kinds": dict(sorted(stats.kinds.items())),
        "rss MiB before": round(rss_before / 2**20, 1),
        "rss MiB after": round(server_rss(server) / 2**20, 1),
    }
    print("\nfuzz:", figures)
    assert not stats.server_errors, stats.server_errors[:10]
    assert not stats.unspecific, stats.unspecific[:10]
    assert server_processes(server) == workers  # no worker died or was replaced
    assert httpx.get(server.base_url + "/__byok-api__/healthz").status_code == 204
    assert "Traceback" not in server.log()
    return figures


async def test_bad_input_on_every_route(server: ServerProcess) -> None:
    figures = await fuzz(server, seconds=30.0)
    assert figures["inputs"] > 1000


@pytest.mark.soak
@pytest.mark.timeout(7200)
async def test_a_million_bad_inputs(server: ServerProcess) -> None:
    await fuzz(server, inputs=1_000_000, connections=8, seed=1212)
