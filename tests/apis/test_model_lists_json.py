"""The model lists JSON clients read, through the real server: Cursor's SDK checks the chosen model
against the REST `GET /v1/models`, and some clients ask `GetUsableModels` as Connect JSON. Both
must list the configured models, merged into upstream's answer or alone when upstream fails."""
from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.fakes import FakeProviderServer, Reply
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

from .conftest import StandInUpstream

SDK_HEADERS = {"authorization": "Bearer crsr_user_api_key", "x-cursor-client-type": "sdk"}
JSON_RPC = {"content-type": "application/json", "connect-protocol-version": "1", "authorization": "Bearer token"}
USABLE = "/agent.v1.AgentService/GetUsableModels"
MODELS = [
    ModelSpec(
        id="byok-gpt",
        provider="openai-chat",
        base_url="http://127.0.0.1:9/v1",
        extra='display_name = "BYOK GPT"\nefforts = ["low", "high"]\ndefault_effort = "high"',
    ),
    ModelSpec(id="byok-plain", provider="openai-chat", base_url="http://127.0.0.1:9/v1"),
]


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeProviderServer]:
    with StandInUpstream() as server:
        yield server


@pytest.fixture
def stand_in(upstream: FakeProviderServer) -> FakeProviderServer:
    upstream.forget()
    return upstream


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, upstream: FakeProviderServer) -> Iterator[ServerProcess]:
    cfg = ServerConfig(data_dir=tmp_path_factory.mktemp("lists") / "data", models=MODELS, upstream=upstream.url)
    with ServerProcess(cfg) as proc:
        yield proc


@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose upstream is unreachable (nothing listens on its port)."""
    with ServerProcess(ServerConfig(data_dir=tmp_path_factory.mktemp("offline") / "data", models=MODELS)) as proc:
        yield proc


def json_reply(document: object, status: int = 200) -> Reply:
    return Reply(status=status, body=json.dumps(document).encode(), content_type="application/json")


def ids(document: dict[str, list[dict[str, str]]], key: str = "items", field: str = "id") -> list[str]:
    return [item[field] for item in document[key]]


def test_rest_model_list_merges_ours_into_upstreams(server: ServerProcess, stand_in: FakeProviderServer) -> None:
    stand_in.enqueue(json_reply({"items": [{"id": "gpt-5", "displayName": "GPT-5"}, {"id": "byok-plain", "displayName": "theirs"}]}))
    answer = httpx.get(server.base_url + "/v1/models", headers=SDK_HEADERS, timeout=10)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/json")
    listed = answer.json()
    # Ours win over an upstream entry of the same id: that id runs here.
    assert ids(listed) == ["gpt-5", "byok-gpt", "byok-plain"]
    seen = stand_in.requests[0]
    assert (seen.method, seen.path) == ("GET", "/v1/models")
    assert seen.headers["authorization"] == SDK_HEADERS["authorization"]
    gpt = listed["items"][1]
    assert gpt["displayName"] == "BYOK GPT"
    assert gpt["aliases"] == ["byok-gpt-low", "byok-gpt-high"]
    assert gpt["parameters"] == [
        {"id": "reasoning", "displayName": "Effort", "values": [{"value": "low", "displayName": "Low"}, {"value": "high", "displayName": "High"}]}
    ]
    assert [(v["params"], v.get("isDefault", False)) for v in gpt["variants"]] == [
        ([{"id": "reasoning", "value": "low"}], False),
        ([{"id": "reasoning", "value": "high"}], True),
    ]
    assert "parameters" not in listed["items"][2]


@pytest.mark.parametrize("status", [401, 500])
def test_rest_model_list_is_ours_alone_when_upstream_refuses(server: ServerProcess, stand_in: FakeProviderServer, status: int) -> None:
    stand_in.enqueue(json_reply({"error": {"code": "unauthenticated", "message": "bad key"}}, status))
    answer = httpx.get(server.base_url + "/v1/models", headers=SDK_HEADERS, timeout=10)
    assert answer.status_code == 200
    assert ids(answer.json()) == ["byok-gpt", "byok-plain"]


def test_rest_model_list_is_ours_alone_when_upstream_is_unreachable(offline: ServerProcess) -> None:
    answer = httpx.get(offline.base_url + "/v1/models", headers=SDK_HEADERS, timeout=10)
    assert answer.status_code == 200
    assert ids(answer.json()) == ["byok-gpt", "byok-plain"]


def test_usable_models_in_json_merges_ours_into_upstreams(server: ServerProcess, stand_in: FakeProviderServer) -> None:
    stand_in.enqueue(json_reply({"models": [{"modelId": "gpt-5", "displayName": "GPT-5"}]}))
    answer = httpx.post(server.base_url + USABLE, content=b"{}", headers=JSON_RPC, timeout=10)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/json")
    listed = answer.json()
    assert ids(listed, "models", "modelId") == ["gpt-5", "byok-gpt", "byok-plain"]
    assert listed["models"][1]["displayName"] == "BYOK GPT"


def test_usable_models_in_json_is_json_when_upstream_is_unreachable(offline: ServerProcess) -> None:
    answer = httpx.post(offline.base_url + USABLE, content=b"{}", headers=JSON_RPC, timeout=10)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/json")
    assert ids(answer.json(), "models", "modelId") == ["byok-gpt", "byok-plain"]


def test_rest_model_list_is_ours_when_upstream_answers_something_else(server: ServerProcess, stand_in: FakeProviderServer) -> None:
    stand_in.enqueue(Reply(status=200, body=b"{}", content_type="application/proto"))
    answer = httpx.get(server.base_url + "/v1/models", headers=SDK_HEADERS, timeout=10)
    assert answer.headers["content-type"].startswith("application/json")
    assert ids(answer.json()) == ["byok-gpt", "byok-plain"]
