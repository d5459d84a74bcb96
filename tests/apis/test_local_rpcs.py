"""LocalRpcs through its ASGI interface (httpx.ASGITransport), against a real stand-in upstream on
127.0.0.1 that records what reaches it."""
from __future__ import annotations

import gzip
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from cursor_byok.apis.models import ModelCatalog
from cursor_byok.config import Config
from cursor_byok.protocol import agent_pb2, decode_unary, side_pb2
from tests.fakes import FakeProviderServer, Reply

from .app import SideApp
from .conftest import SECRET, dead_port, make_config

AVAILABLE = "/aiserver.v1.AiService/AvailableModels"
USABLE_PATHS = ["/agent.v1.AgentService/GetUsableModels", "/aiserver.v1.AiService/GetUsableModels"]
CLI_DEFAULT_PATHS = ["/agent.v1.AgentService/GetDefaultModelForCli", "/aiserver.v1.AiService/GetDefaultModelForCli"]
IS_CONNECTED = "/aiserver.v1.NetworkService/IsConnected"
USER_HEADERS = {
    "authorization": "Bearer user-session-token-123",
    "content-type": "application/proto",
    "connect-protocol-version": "1",
    "x-cursor-checksum": "checksum-abc",
    "x-cursor-client-version": "3.14.27",
}

Listed = side_pb2.AvailableModelsResponse


def upstream_models() -> bytes:
    """What the stand-in upstream lists: one official model."""
    return Listed(
        model_names=["gpt-5"],
        models=[Listed.AvailableModel(name="gpt-5", client_display_name="GPT-5", default_on=True)],
    ).SerializeToString()


def framed(payload: bytes, flag: int = 0) -> bytes:
    return bytes([flag]) + len(payload).to_bytes(4, "big") + payload


def proto_reply(body: bytes, **headers: str) -> Reply:
    return Reply(status=200, body=body, content_type="application/proto", headers=headers)


class Side:
    def __init__(self, config: Config, *, catalog_timeout: float = 5.0) -> None:
        self.app = SideApp(config, catalog_timeout=catalog_timeout)
        self.config = config
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://byok.test")

    async def post(self, path: str, body: bytes = b"", **extra: str) -> httpx.Response:
        return await self.http.post(path, content=body, headers={**USER_HEADERS, **extra})

    async def close(self) -> None:
        await self.http.aclose()
        await self.app.client.aclose()


@pytest_asyncio.fixture
async def side(upstream_server: FakeProviderServer) -> AsyncIterator[Side]:
    s = Side(make_config(upstream_server.url))
    try:
        yield s
    finally:
        await s.close()


@pytest_asyncio.fixture
async def bare_side(upstream_server: FakeProviderServer) -> AsyncIterator[Side]:
    s = Side(make_config(upstream_server.url, models=[]))
    try:
        yield s
    finally:
        await s.close()


def names(listed: side_pb2.AvailableModelsResponse) -> list[str]:
    return [m.name for m in listed.models]


# -- AvailableModels / GetUsableModels: upstream + ours ---------------------------------------------------
async def test_raw_upstream_list_gets_our_models_appended(side: Side, upstream_server: FakeProviderServer) -> None:
    upstream_server.enqueue(proto_reply(upstream_models(), **{"x-upstream-marker": "kept"}))
    response = await side.post(AVAILABLE, b"\x08\x01")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/proto"
    assert response.headers["x-upstream-marker"] == "kept"
    assert int(response.headers["content-length"]) == len(response.content)
    listed = Listed.FromString(response.content)
    assert list(listed.model_names) == ["gpt-5", "byok-gpt", "byok-claude"]
    assert names(listed) == ["gpt-5", "byok-gpt", "byok-claude"]
    assert listed.models[0].client_display_name == "GPT-5"  # upstream's entry intact
    assert list(listed.models[1].legacy_slugs) == ["byok-gpt-low", "byok-gpt-medium", "byok-gpt-high"]
    assert response.content.startswith(upstream_models())  # upstream bytes first, unchanged
    assert SECRET.encode() not in response.content


async def test_enveloped_upstream_list_keeps_one_envelope_with_the_new_length(
    side: Side, upstream_server: FakeProviderServer
) -> None:
    upstream_server.enqueue(proto_reply(framed(upstream_models())))
    response = await side.post(AVAILABLE, framed(b""))
    body = response.content
    assert response.status_code == 200 and int(response.headers["content-length"]) == len(body)
    assert body[0] == 0 and int.from_bytes(body[1:5], "big") == len(body) - 5
    listed = decode_unary(body, Listed)
    assert names(listed) == ["gpt-5", "byok-gpt", "byok-claude"]


async def test_request_reaches_upstream_with_the_users_own_headers(
    side: Side, upstream_server: FakeProviderServer
) -> None:
    upstream_server.enqueue(proto_reply(upstream_models()))
    request_body = framed(b"\x08\x01\x10\x01")
    await side.post(AVAILABLE, request_body, **{"x-server-upstream-url": "https://api2.cursor.sh" + AVAILABLE})
    (seen,) = upstream_server.wait_for_requests(1)
    assert seen.method == "POST" and seen.path == AVAILABLE
    assert seen.body == request_body
    assert seen.headers["authorization"] == "Bearer user-session-token-123"
    assert seen.headers["x-cursor-checksum"] == "checksum-abc"
    assert seen.headers["x-cursor-client-version"] == "3.14.27"
    assert seen.headers["accept-encoding"] == "identity"
    assert "x-server-upstream-url" not in seen.headers
    assert SECRET not in str(seen.headers)


@pytest.mark.parametrize("path", USABLE_PATHS)
async def test_usable_models_appends_our_model_details(
    side: Side, upstream_server: FakeProviderServer, path: str
) -> None:
    official = side_pb2.GetUsableModelsResponse(
        models=[agent_pb2.ModelDetails(model_id="gpt-5", display_name="GPT-5")]
    ).SerializeToString()
    upstream_server.enqueue(proto_reply(official))
    response = await side.post(path)
    assert response.status_code == 200 and int(response.headers["content-length"]) == len(response.content)
    usable = side_pb2.GetUsableModelsResponse.FromString(response.content)
    assert [m.model_id for m in usable.models] == ["gpt-5", "byok-gpt", "byok-claude"]
    ours = usable.models[1]
    assert (ours.display_model_id, ours.display_name, ours.display_name_short) == ("byok-gpt", "BYOK GPT", "BYOK GPT")
    assert ours.HasField("thinking_details")
    assert ours.api_key_credentials.api_key == "cursor-byok-local"
    assert SECRET.encode() not in response.content
    assert upstream_server.wait_for_requests(1)[0].path == path


async def test_upstream_401_yields_only_our_models(side: Side, upstream_server: FakeProviderServer) -> None:
    upstream_server.enqueue(
        Reply(
            status=401,
            body=b'{"code":"unauthenticated","message":"not logged in","details":[]}',
            content_type="application/json",
            headers={"x-upstream-marker": "dropped"},
        )
    )
    response = await side.post(AVAILABLE)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/proto"
    assert "x-upstream-marker" not in response.headers
    assert response.content == ModelCatalog.of(side.config.models).available_models
    listed = Listed.FromString(response.content)
    assert names(listed) == ["byok-gpt", "byok-claude"]
    # Nothing invented for the logged-out user: the reply holds our two models and no other field.
    assert set(Listed.DESCRIPTOR.fields_by_name) == {"model_names", "models"}
    assert b"unauthenticated" not in response.content


async def test_upstream_down_yields_only_our_models(upstream_server: FakeProviderServer) -> None:
    side = Side(make_config(f"http://127.0.0.1:{dead_port()}"))
    try:
        response = await side.post(AVAILABLE)
        assert response.status_code == 200 and response.headers["content-type"] == "application/proto"
        assert names(Listed.FromString(response.content)) == ["byok-gpt", "byok-claude"]
        usable = await side.post(USABLE_PATHS[0])
        assert [m.model_id for m in side_pb2.GetUsableModelsResponse.FromString(usable.content).models] == [
            "byok-gpt",
            "byok-claude",
        ]
    finally:
        await side.close()


async def test_stalled_upstream_is_given_up_after_the_catalog_timeout(upstream_server: FakeProviderServer) -> None:
    upstream_server.enqueue(Reply(status=200, chunks=[b"\x0a"], stall_after=1, content_type="application/proto"))
    side = Side(make_config(upstream_server.url), catalog_timeout=0.3)
    try:
        response = await side.post(AVAILABLE)
        assert response.status_code == 200
        assert response.content == ModelCatalog.of(side.config.models).available_models
    finally:
        await side.close()


async def test_gzip_upstream_reply_is_decoded_before_merging(side: Side, upstream_server: FakeProviderServer) -> None:
    upstream_server.enqueue(proto_reply(gzip.compress(upstream_models()), **{"content-encoding": "gzip"}))
    response = await side.post(AVAILABLE)
    assert "content-encoding" not in response.headers
    assert names(Listed.FromString(response.content)) == ["gpt-5", "byok-gpt", "byok-claude"]


async def test_end_stream_envelope_from_upstream_is_not_merged(side: Side, upstream_server: FakeProviderServer) -> None:
    upstream_server.enqueue(proto_reply(framed(b'{"error":{"code":"internal"}}', flag=2)))
    response = await side.post(AVAILABLE)
    assert response.content == ModelCatalog.of(side.config.models).available_models


async def test_json_upstream_reply_gets_our_models_in_json(side: Side, upstream_server: FakeProviderServer) -> None:
    upstream_server.enqueue(Reply(status=200, body=b'{"modelNames":["gpt-5"],"extra":1}', content_type="application/json"))
    response = await side.post(AVAILABLE, b"{}", **{"content-type": "application/json"})
    listed = response.json()
    assert listed["modelNames"] == ["gpt-5", "byok-gpt", "byok-claude"]
    assert [m["name"] for m in listed["models"]] == ["byok-gpt", "byok-claude"]
    assert listed["extra"] == 1


async def test_json_upstream_reply_that_does_not_parse_gives_ours_in_json(side: Side, upstream_server: FakeProviderServer) -> None:
    upstream_server.enqueue(Reply(status=200, body=b'["not", "an object"]', content_type="application/json"))
    response = await side.post(AVAILABLE, b"{}", **{"content-type": "application/json"})
    assert response.headers["content-type"] == "application/json"
    assert response.json()["modelNames"] == ["byok-gpt", "byok-claude"]


async def test_without_models_the_lists_are_a_plain_passthrough(
    bare_side: Side, upstream_server: FakeProviderServer
) -> None:
    official = framed(upstream_models())
    upstream_server.respond_with(lambda request: proto_reply(official, **{"x-upstream-marker": request.path}))
    assert not bare_side.app.rpcs.handles(AVAILABLE)
    for path in [AVAILABLE, *USABLE_PATHS, *CLI_DEFAULT_PATHS, "/aiserver.v1.AiService/GetDefaultModel"]:
        response = await bare_side.post(path)
        assert response.content == official
        assert response.headers["x-upstream-marker"] == path
    assert len(upstream_server.requests) == 6


# -- answered locally ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", CLI_DEFAULT_PATHS)
async def test_default_model_for_cli_is_the_first_configured_model(
    side: Side, upstream_server: FakeProviderServer, path: str
) -> None:
    response = await side.post(path, framed(b""))
    assert response.status_code == 200 and response.headers["content-type"] == "application/proto"
    reply = side_pb2.GetDefaultModelForCliResponse.FromString(response.content)
    assert reply.model.model_id == "byok-gpt"
    assert reply.model.api_key_credentials.api_key == "cursor-byok-local"
    assert SECRET.encode() not in response.content
    assert upstream_server.requests == []


async def test_default_model_and_nudge_data(side: Side, upstream_server: FakeProviderServer) -> None:
    default = side_pb2.GetDefaultModelResponse.FromString(
        (await side.post("/aiserver.v1.AiService/GetDefaultModel")).content
    )
    assert (default.model, default.thinking_model, default.max_mode, default.next_default_set_date) == (
        "byok-gpt",
        "byok-gpt",
        False,
        "",
    )
    nudge = side_pb2.GetDefaultModelNudgeDataResponse.FromString(
        (await side.post("/aiserver.v1.AiService/GetDefaultModelNudgeData")).content
    )
    assert nudge.nudge_date == "0" and not nudge.should_default_switch_on_new_chat
    assert list(nudge.models_with_no_default_switch) == ["byok-gpt", "byok-claude"]
    assert nudge.conversion_model_override == ""
    assert upstream_server.requests == []


@pytest.mark.parametrize("configured", [True, False])
async def test_is_connected_is_one_empty_framed_message(upstream_server: FakeProviderServer, configured: bool) -> None:
    s = Side(make_config(upstream_server.url, models=None if configured else []))
    try:
        response = await s.post(IS_CONNECTED, b"")
    finally:
        await s.close()
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/proto"
    assert response.content == b"\x00\x00\x00\x00\x00"
    assert response.headers["content-length"] == "5"
    assert upstream_server.requests == []


@pytest.mark.parametrize(
    "method", ["Batch", "TrackEvents", "TrackMachineEvents", "SubmitClientLogBatch", "BatchNonAuth", "SubmitLogs"]
)
async def test_analytics_telemetry_is_accepted_and_dropped(
    side: Side, upstream_server: FakeProviderServer, method: str
) -> None:
    response = await side.post(f"/aiserver.v1.AnalyticsService/{method}", b"\x0a\x03abc")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/proto"
    assert response.content == b""
    assert upstream_server.requests == []


async def test_analytics_json_request_gets_an_empty_json_message(side: Side) -> None:
    response = await side.post("/aiserver.v1.AnalyticsService/Batch", b'{"events":[]}', **{"content-type": "application/json"})
    assert response.status_code == 200 and response.content == b"{}"


# -- forwarded untouched ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path",
    [
        "/aiserver.v1.AnalyticsService/BootstrapStatsig",
        "/aiserver.v1.AnalyticsService/GetStatsigClientKey",
        "/aiserver.v1.AuthService/GetEmail",
        "/aiserver.v1.DashboardService/GetMe",
        "/aiserver.v1.DashboardService/GetCurrentPeriodUsage",
        "/aiserver.v1.DashboardService/GetUsageLimitStatusAndActiveGrants",
        "/aiserver.v1.DashboardService/GetUserPrivacyMode",
    ],
)
async def test_account_usage_and_config_rpcs_are_not_answered_here(
    side: Side, upstream_server: FakeProviderServer, path: str
) -> None:
    assert not side.app.rpcs.handles(path)
    upstream_server.enqueue(Reply(status=401, body=b'{"code":"unauthenticated"}', content_type="application/json"))
    response = await side.post(path, b"\x08\x01")
    # The upstream's own answer, status and all: nothing forged for a logged-out user.
    assert response.status_code == 401 and response.content == b'{"code":"unauthenticated"}'
    (seen,) = upstream_server.wait_for_requests(1)
    assert seen.path == path and seen.headers["authorization"] == "Bearer user-session-token-123"


async def test_get_on_a_model_list_path_is_forwarded(side: Side, upstream_server: FakeProviderServer) -> None:
    upstream_server.enqueue(proto_reply(b"official"))
    response = await side.http.get("/aiserver.v1.AiService/GetDefaultModel", headers=USER_HEADERS)
    assert response.content == b"official"


async def test_forbidden_upstream_url_header_is_refused(side: Side, upstream_server: FakeProviderServer) -> None:
    response = await side.post(AVAILABLE, **{"x-server-upstream-url": "https://evil.example/x"})
    assert response.status_code == 403
    assert upstream_server.requests == []
