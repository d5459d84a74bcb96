"""LocalRpcs over real HTTP: the wrapper app served by granian on a free loopback port, in front of
a stand-in upstream on another."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import pytest

from cursor_byok.protocol import side_pb2
from tests.fakes import FakeProviderServer, Reply

from .app import CONFIG_ENV
from .conftest import SECRET, dead_port, make_config

REPO = Path(__file__).resolve().parents[2]
AUTH = "Bearer user-session-token-over-http"


@pytest.fixture
def granian(upstream_server: FakeProviderServer) -> Iterator[str]:
    port = dead_port()
    env = {
        **os.environ,
        CONFIG_ENV: msgspec.json.encode(make_config(upstream_server.url)).decode(),
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
    }
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port),
            "--http", "1", "--no-ws", "--log-level", "warning", "--factory", "tests.apis.app:app_from_env",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"granian exited: {proc.stdout.read().decode() if proc.stdout else ''}")
            try:
                httpx.post(base + "/aiserver.v1.NetworkService/IsConnected", timeout=0.5)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_models_are_merged_and_probe_answered_over_http(granian: str, upstream_server: FakeProviderServer) -> None:
    official = side_pb2.AvailableModelsResponse(
        model_names=["gpt-5"], models=[side_pb2.AvailableModelsResponse.AvailableModel(name="gpt-5")]
    ).SerializeToString()
    upstream_server.enqueue(Reply(status=200, body=official, content_type="application/proto"))
    headers = {"authorization": AUTH, "content-type": "application/proto", "connect-protocol-version": "1"}
    with httpx.Client(base_url=granian, timeout=10) as client:
        response = client.post("/aiserver.v1.AiService/AvailableModels", content=b"", headers=headers)
        assert response.status_code == 200
        assert response.headers["content-length"] == str(len(response.content))
        listed = side_pb2.AvailableModelsResponse.FromString(response.content)
        assert list(listed.model_names) == ["gpt-5", "byok-gpt", "byok-claude"]
        assert list(listed.models[1].legacy_slugs) == ["byok-gpt-low", "byok-gpt-medium", "byok-gpt-high"]
        assert SECRET.encode() not in response.content
        (seen,) = upstream_server.wait_for_requests(1)
        assert seen.headers["authorization"] == AUTH

        probe = client.post("/aiserver.v1.NetworkService/IsConnected", content=b"", headers=headers)
        assert probe.status_code == 200 and probe.content == b"\x00\x00\x00\x00\x00"
        assert probe.headers["content-type"] == "application/proto"

        cli = client.post("/agent.v1.AgentService/GetDefaultModelForCli", content=b"", headers=headers)
        assert side_pb2.GetDefaultModelForCliResponse.FromString(cli.content).model.model_id == "byok-gpt"
        assert len(upstream_server.requests) == 1  # only the model list went upstream
