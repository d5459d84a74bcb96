"""The local attack surface, tried the way a web page in the user's browser (or another local user)
would reach 127.0.0.1: each request is refused before anything is decoded, routed, run or
forwarded, with its status and Connect code; the IDE's own requests still work."""
from __future__ import annotations

import asyncio
import ssl
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, FakeProviderServer, Reply
from tests.harness.ide import BIDI_APPEND, RUN_SSE, ScriptedIDE, append_body, envelope, run_request
from tests.harness.server import ModelSpec, ServerProcess

from .edge_support import PROTO, EdgeServerConfig, assert_no_cors, edge_config, free_port, raw_http

MODEL = "byok-edge"
USABLE_MODELS = "/agent.v1.AgentService/GetUsableModels"
PASSTHROUGH = "/aiserver.v1.AiService/SomethingElse"
PROXY_SECRET = "edge-test-proxy-secret"
EVIL = "http://evil.example"


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        yield server


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        server.respond_with(lambda request: Reply(body=b"from upstream", content_type="application/proto"))
        yield server


@pytest.fixture
def clean(provider: FakeProviderServer, upstream: FakeProviderServer) -> tuple[FakeProviderServer, FakeProviderServer]:
    for fake in (provider, upstream):
        fake.forget()
    return provider, upstream


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, provider: FakeProviderServer, upstream: FakeProviderServer) -> Iterator[ServerProcess]:
    cfg = edge_config(tmp_path_factory.mktemp("edge"), MODEL, provider, upstream, runsse_wait_seconds=1.0)
    with ServerProcess(cfg, env={"CURSOR_BYOK_PROXY_SECRET": PROXY_SECRET}) as proc:
        yield proc


def run_request_body(rid: str) -> bytes:
    return append_body(rid, 0, run_request("spend my key", model=MODEL, conversation_id=uuid.uuid4().hex))


async def no_run_started(server: ServerProcess, rid: str, provider: FakeProviderServer) -> None:
    """Nothing was routed for `rid` (a RunSSE finds no transport) and no model call was made."""
    async with httpx.AsyncClient(base_url=server.base_url, headers={"content-type": "application/connect+proto"}) as client:
        resp = await client.post(RUN_SSE, content=envelope(pb.BidiRequestId(request_id=rid).SerializeToString()))
    assert resp.status_code == 200 and b"deadline_exceeded" in resp.content, resp.content
    assert provider.requests == []


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({"content-type": "text/plain", "origin": EVIL}, 403, "permission_denied"),
        ({"content-type": "application/x-www-form-urlencoded", "origin": EVIL}, 403, "permission_denied"),
        ({"content-type": "text/plain"}, 415, "unimplemented"),
        ({"content-type": "application/x-www-form-urlencoded"}, 415, "unimplemented"),
        ({"content-type": "multipart/form-data; boundary=x"}, 415, "unimplemented"),
        ({}, 415, "unimplemented"),  # a fetch() with a typeless Blob body sends no content type
    ],
    ids=["text-plain-evil-origin", "form-evil-origin", "text-plain", "form", "multipart", "no-type"],
)
async def test_simple_cross_origin_post_starts_no_run(server: ServerProcess, clean, headers: dict[str, str], status: int, code: str) -> None:
    provider, _ = clean
    rid = uuid.uuid4().hex
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        resp = await client.post(BIDI_APPEND, content=run_request_body(rid), headers=headers)
    assert (resp.status_code, resp.json()["code"]) == (status, code), resp.text
    assert_no_cors(resp)
    await no_run_started(server, rid, provider)


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1:1", "localhost.evil.example:{port}", ""])
async def test_rebinding_host_is_refused_on_every_route(server: ServerProcess, clean, host: str) -> None:
    provider, upstream = clean
    host = host.format(port=server.port)
    rid = uuid.uuid4().hex
    async with httpx.AsyncClient(base_url=server.base_url, headers={**PROTO, "host": host}) as client:
        append = await client.post(BIDI_APPEND, content=run_request_body(rid))
        models = await client.post(USABLE_MODELS, content=b"")
        forwarded = await client.post(PASSTHROUGH, content=b"x")
    for resp in (append, models, forwarded):
        assert (resp.status_code, resp.json()["code"]) == (421, "permission_denied"), resp.text
        assert_no_cors(resp)
    assert MODEL.encode() not in models.content
    assert upstream.requests == []
    await no_run_started(server, rid, provider)


async def test_foreign_origin_is_refused_and_the_ides_own_are_served(server: ServerProcess, clean) -> None:
    _, upstream = clean
    async with httpx.AsyncClient(base_url=server.base_url, headers=PROTO) as client:
        for origin in (EVIL, "null", f"http://127.0.0.1:{server.port}.evil.example", f"https://127.0.0.1:{server.port}"):
            resp = await client.post(USABLE_MODELS, content=b"", headers={"origin": origin})
            assert (resp.status_code, resp.json()["code"]) == (403, "permission_denied"), origin
            assert MODEL.encode() not in resp.content
        for origin in ("vscode-file://vscode-app", f"http://127.0.0.1:{server.port}", f"http://localhost:{server.port}", None):
            resp = await client.post(USABLE_MODELS, content=b"", headers={"origin": origin} if origin else {})
            assert resp.status_code == 200 and MODEL.encode() in resp.content, origin
            assert_no_cors(resp)
    assert [r.path for r in upstream.requests] == [USABLE_MODELS] * 4  # the merge's own fetches only
    assert "origin seen" in server.log()  # which origins clients send is on record


async def test_preflight_is_refused_locally_never_forwarded(server: ServerProcess, clean) -> None:
    _, upstream = clean
    preflight = {"origin": EVIL, "access-control-request-method": "POST", "access-control-request-headers": "content-type"}
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        for path in (BIDI_APPEND, USABLE_MODELS, PASSTHROUGH, "/ui/api/conversations"):
            resp = await client.options(path, headers=preflight)
            assert resp.status_code in (403, 405) and resp.json()["code"] in ("permission_denied", "unimplemented")
            assert_no_cors(resp)
            resp = await client.options(path)  # even without an Origin
            assert (resp.status_code, resp.json()["code"]) == (405, "unimplemented")
    assert upstream.requests == []


async def test_forged_upstream_url_needs_the_proxys_mark(server: ServerProcess, clean) -> None:
    _, upstream = clean
    target = {"x-server-upstream-url": f"https://api2.cursor.sh{PASSTHROUGH}", **PROTO}
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        for mark in ({}, {"x-cursor-byok-proxy": "guessed"}, {"x-cursor-byok-proxy": ""}):
            resp = await client.post(PASSTHROUGH, content=b"x", headers={**target, **mark})
            assert (resp.status_code, resp.json()["code"]) == (403, "permission_denied")
        assert upstream.requests == []
        # Our proxy's requests carry the mark and name the Cursor host they were sent to.
        marked = {**target, "x-cursor-byok-proxy": PROXY_SECRET, "host": "api2.cursor.sh"}
        resp = await client.post(PASSTHROUGH, content=b"x", headers=marked)
        assert resp.status_code == 200 and resp.content == b"from upstream"
        resp = await client.post(PASSTHROUGH, content=b"x", headers={**PROTO, "host": "api2.cursor.sh"})
        assert resp.status_code == 421  # a Cursor host name without the mark is a rebinding page
    [seen] = upstream.requests
    assert "x-cursor-byok-proxy" not in seen.headers


async def test_dashboard_paths_are_local_and_guarded(server: ServerProcess, clean) -> None:
    _, upstream = clean
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        resp = await client.get("/ui/api/conversations")  # answered here, never forwarded upstream
        assert resp.status_code == 200 and "items" in resp.json()
        resp = await client.get("/ui/api/conversations", headers={"origin": EVIL})
        assert resp.status_code == 403
        resp = await client.get("/ui/", headers={"host": "evil.example"})
        assert resp.status_code == 421
    assert upstream.requests == []


async def test_an_ide_shaped_turn_still_works(server: ServerProcess, clean, tmp_path: Path) -> None:
    provider, _ = clean
    provider.enqueue(OPENAI_CHAT.text(["still ", "served"]))
    ide = ScriptedIDE(server.base_url, tmp_path)
    try:
        log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
    finally:
        await ide.close()
    assert log.text == "still served" and log.terminal is None


# -- files ---------------------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_fresh_data_dir_and_database_are_private(tmp_path: Path, provider: FakeProviderServer) -> None:
    data = tmp_path / "fresh" / "data"
    cfg = EdgeServerConfig(data_dir=tmp_path / "harness", real_data_dir=data, models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")])
    with ServerProcess(cfg) as server:
        provider.enqueue(OPENAI_CHAT.text(["written"]))
        ide = ScriptedIDE(server.base_url, tmp_path)
        try:
            log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
        finally:
            await ide.close()
        assert log.text == "written"
        assert mode(data) == 0o700
        files = {p.name: mode(p) for p in data.iterdir() if p.is_file()}
        assert {"state.db", "state.db-wal", "state.db-shm"} <= files.keys()
        assert all(m == 0o600 for m in files.values()), files


async def test_existing_open_data_dir_is_tightened_at_start(tmp_path: Path) -> None:
    data = tmp_path / "old"
    cfg = EdgeServerConfig(data_dir=tmp_path / "harness", real_data_dir=data)
    with ServerProcess(cfg):
        pass
    data.chmod(0o755)  # as an older version (or a careless copy) left it
    (data / "state.db").chmod(0o644)
    (data / "notes.log").write_bytes(b"")
    (data / "notes.log").chmod(0o644)
    with ServerProcess(cfg):
        assert mode(data) == 0o700
        assert mode(data / "state.db") == 0o600 and mode(data / "notes.log") == 0o600


# -- other users of the machine: the auth token ------------------------------------------------------

TOKEN = "edge-test-token-0123456789"


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory, provider: FakeProviderServer, upstream: FakeProviderServer) -> Iterator[ServerProcess]:
    cfg = edge_config(
        tmp_path_factory.mktemp("token"),
        MODEL,
        provider,
        upstream,
        runsse_wait_seconds=1.0,
        proxy_port=free_port(),
        extra_server={"auth_token_env": "EDGE_TEST_TOKEN"},
    )
    with ServerProcess(cfg, env={"EDGE_TEST_TOKEN": TOKEN}) as proc:
        yield proc


async def test_without_the_token_nothing_is_served(token_server: ServerProcess, clean) -> None:
    provider, upstream = clean
    rid = uuid.uuid4().hex
    async with httpx.AsyncClient(base_url=token_server.base_url, headers=PROTO) as client:
        for wrong in ({}, {"x-cursor-byok-token": "nope"}, {"authorization": f"Bearer {TOKEN}x"}):
            for path, body in ((BIDI_APPEND, run_request_body(rid)), (USABLE_MODELS, b""), (PASSTHROUGH, b"x")):
                resp = await client.post(path, content=body, headers=wrong)
                assert (resp.status_code, resp.json()["code"]) == (401, "unauthenticated"), (path, wrong)
        resp = await client.post(f"/_token/{TOKEN}x{USABLE_MODELS}", content=b"")
        assert resp.status_code == 401
    assert upstream.requests == [] and provider.requests == []


async def test_the_token_in_a_header_a_bearer_or_the_endpoint_path(token_server: ServerProcess, clean) -> None:
    _, upstream = clean
    async with httpx.AsyncClient(base_url=token_server.base_url, headers=PROTO) as client:
        for given in ({"x-cursor-byok-token": TOKEN}, {"authorization": f"Bearer {TOKEN}"}):
            resp = await client.post(USABLE_MODELS, content=b"", headers=given)
            assert resp.status_code == 200 and MODEL.encode() in resp.content
        resp = await client.post(f"/_token/{TOKEN}{USABLE_MODELS}", content=b"")  # the Cursor CLI's endpoint form
        assert resp.status_code == 200 and MODEL.encode() in resp.content
        resp = await client.post(PASSTHROUGH, content=b"x", headers={"authorization": f"Bearer {TOKEN}"})
        assert resp.status_code == 200
    sent = upstream.requests[-1].headers
    assert "authorization" not in sent and "x-cursor-byok-token" not in sent  # our token never leaves
    assert all(r.path in (USABLE_MODELS, PASSTHROUGH) for r in upstream.requests)


async def test_a_turn_through_the_proxy_with_tls_carries_the_token(token_server: ServerProcess, clean, tmp_path: Path) -> None:
    provider, _ = clean
    provider.enqueue(OPENAI_CHAT.text(["through ", "the proxy"]))
    cfg = token_server.config
    assert isinstance(cfg, EdgeServerConfig) and cfg.proxy_port is not None
    ca = cfg.data_dir / "ca" / "ca.crt"
    ide = ScriptedIDE("https://api2.cursor.sh", tmp_path)
    await ide.client.aclose()
    ide.client = httpx.AsyncClient(
        base_url="https://api2.cursor.sh",
        proxy=f"http://cursor-byok:{TOKEN}@127.0.0.1:{cfg.proxy_port}",  # as `cursor enable` writes it
        verify=ssl.create_default_context(cafile=str(ca)),
        trust_env=False,
        timeout=30.0,
    )
    try:
        log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
        models = await ide.client.post(USABLE_MODELS, content=b"", headers=PROTO)
    finally:
        await ide.close()
    assert log.text == "through the proxy" and log.terminal is None
    assert models.status_code == 200 and MODEL.encode() in models.content
    assert provider.requests[0].headers["authorization"] == "Bearer sk-test-canary"


async def test_refusal_comes_before_the_body_is_read(server: ServerProcess, clean) -> None:
    """A refused request's body is never waited for: the answer comes while it is still unsent."""
    provider, _ = clean
    body = run_request_body(uuid.uuid4().hex)
    head = f"POST {BIDI_APPEND} HTTP/1.1\r\nhost: 127.0.0.1:{server.port}\r\ncontent-type: text/plain\r\ncontent-length: {len(body) + 1000}\r\n\r\n"
    resp = await asyncio.to_thread(raw_http, server.port, head.encode() + body)
    assert resp.status == 415 and b"unimplemented" in resp.body
    assert provider.requests == []
