"""Issue #34 through the real server: the dashboard is found, `/` answers locally, and error lines
carry their prefix once."""
from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fakes import FakeProviderServer, Reply
from tests.harness.ide import ScriptedIDE, StreamLog, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

PROXY_SECRET = "first-hour-proxy-secret"
MARKED = {"x-cursor-byok-proxy": PROXY_SECRET, "host": "api2.cursor.sh"}  # what our proxy sends


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as fake:
        yield fake


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, upstream: FakeProviderServer) -> Iterator[ServerProcess]:
    cfg = ServerConfig(
        data_dir=tmp_path_factory.mktemp("first-hour") / "data",
        models=[
            ModelSpec(id="unreachable", provider="openai-chat", base_url="http://127.0.0.1:9/v1"),
            ModelSpec(id="priced", provider="openai-chat", base_url="http://127.0.0.1:9/v1", extra="price = { input = 3.0, output = 15.0 }"),
        ],
        upstream=upstream.url,
    )
    with ServerProcess(cfg, env={"CURSOR_BYOK_PROXY_SECRET": PROXY_SECRET}) as proc:
        yield proc


def test_ui_without_the_slash_redirects_to_the_dashboard(server: ServerProcess, upstream: FakeProviderServer) -> None:
    answer = httpx.get(server.base_url + "/ui")
    assert answer.status_code == 308
    assert answer.headers["location"] == "ui/"  # relative: a token prefix in the path stays
    followed = httpx.get(server.base_url + "/ui", follow_redirects=True)
    assert followed.status_code == 200 and followed.url.path == "/ui/"
    assert upstream.requests == []


def test_root_answers_locally_naming_the_dashboard_and_metrics(server: ServerProcess, upstream: FakeProviderServer) -> None:
    answer = httpx.get(server.base_url + "/")
    assert answer.status_code == 200
    assert "/ui/" in answer.text and "/metrics" in answer.text and "cursor-byok" in answer.text
    assert upstream.requests == []


def test_root_from_the_proxy_still_goes_upstream(server: ServerProcess, upstream: FakeProviderServer) -> None:
    upstream.enqueue(Reply(body=b"upstream root", content_type="text/plain"))
    answer = httpx.get(server.base_url + "/", headers=MARKED)
    assert answer.status_code == 200 and answer.text == "upstream root"
    assert [r.path for r in upstream.wait_for_requests(1)] == ["/"]
    with upstream._lock:
        upstream.requests.clear()


def test_dashboard_models_leave_unset_prices_unset(server: ServerProcess) -> None:
    models = {m["id"]: m for m in httpx.get(server.base_url + "/ui/api/models").json()}
    assert models["unreachable"]["price"] is None
    assert models["priced"]["price"] == {"input": 3.0, "output": 15.0, "cache_read": None, "cache_write": None}


async def test_a_provider_failure_names_its_provider_once(server: ServerProcess, tmp_path: Path) -> None:
    ide = ScriptedIDE(server.base_url, tmp_path)
    try:
        log = await ide.turn(run_request("hi", model="unreachable", conversation_id=uuid.uuid4().hex), timeout=60)
    finally:
        await ide.close()
    assert log.terminal is not None
    assert "openai-chat: openai-chat" not in log.terminal.message
    assert "openai-chat: openai-chat" not in server.log()
    assert "openai-chat: request failed" in server.log()


async def test_a_turn_cut_by_the_stop_says_server_shutting_down_once(tmp_path: Path, workspace: Path) -> None:
    with FakeProviderServer() as provider:
        provider.enqueue(Reply(stall_head=True))
        cfg = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id="m", provider="openai-chat", base_url=provider.url + "/v1")])
        server = ServerProcess(cfg).start()
        ide = ScriptedIDE(server.base_url, workspace)

        async def stop_while_the_model_is_asked(_: str, __: StreamLog) -> None:
            await asyncio.to_thread(provider.wait_for_requests, 1, 20)
            assert server.proc is not None
            server.proc.send_signal(signal.SIGTERM)

        try:
            log = await ide.turn(run_request("go", model="m", conversation_id=uuid.uuid4().hex), during=stop_while_the_model_is_asked)
            assert server.proc is not None and server.proc.wait(20) == 0
        finally:
            await ide.close()
            server.stop()
    assert log.terminal is not None and log.terminal.code == "unavailable"
    assert log.terminal.message.count("server shutting down") == 1, log.terminal.message
    assert "server shutting down: server shutting down" not in server.log()


def test_ui_redirect_keeps_a_token_prefix(tmp_path: Path) -> None:
    token = "first-hour-token-0123456789"
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "config.toml").touch(0o600)  # an inline token is kept only in a private config
    with ServerProcess(ServerConfig(data_dir=tmp_path / "data", extra_server={"auth_token": token})) as proc:
        followed = httpx.get(f"{proc.base_url}/_token/{token}/ui", follow_redirects=True)
    assert followed.status_code == 200 and followed.url.path == f"/_token/{token}/ui/"
