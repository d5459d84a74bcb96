"""Upstream passthrough: byte-identical streaming, routing of non-local models, no open proxy."""
from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, FakeProviderServer, Reply
from tests.harness.ide import BIDI_APPEND, RUN, RUN_SSE, ScriptedIDE, StreamLog, append_body, envelope, heartbeat_message, run_request
from tests.harness.newer import NEWER_ENUM_VALUE, add_newer_field
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

from .conftest import direct_transports
from .edge_support import LoopbackServer

MODEL = "byok-local"
PROXY_SECRET = "test-proxy-secret"
MARKED = {"x-cursor-byok-proxy": PROXY_SECRET}  # what our intercepting proxy adds to its requests
PROTO = {"content-type": "application/proto"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        yield server


@pytest.fixture
def stand_in(upstream: FakeProviderServer) -> FakeProviderServer:
    upstream.forget()
    return upstream


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, upstream: FakeProviderServer) -> Iterator[ServerProcess]:
    cfg = ServerConfig(
        data_dir=tmp_path_factory.mktemp("upstream") / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url="http://127.0.0.1:9/v1")],
        upstream=upstream.url,
        runsse_wait_seconds=2.0,
    )
    with ServerProcess(cfg, env={"CURSOR_BYOK_PROXY_SECRET": PROXY_SECRET}) as proc:
        yield proc


async def test_passthrough_is_byte_identical_and_streams_before_upstream_finishes(server: ServerProcess, stand_in: FakeProviderServer) -> None:
    chunks = [bytes([i]) * 1000 + b"\x00\xff" for i in range(6)]
    stand_in.enqueue(Reply(chunks=chunks, content_type="application/connect+proto", chunk_delay=0.25))
    body = b"\x01\x02binary request body\xff" * 100
    first_at = None
    received = bytearray()
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        async with client.stream(
            "POST",
            "/aiserver.v1.AiService/SomethingStreamed?x=1",
            content=body,
            headers={"authorization": "Bearer user-token", "x-cursor-client-version": "3.14", "content-type": "application/connect+proto"},
        ) as resp:
            assert resp.status_code == 200
            async for chunk in resp.aiter_raw():
                if first_at is None:
                    first_at = time.monotonic() - started
                received.extend(chunk)
    total = time.monotonic() - started
    assert bytes(received) == b"".join(chunks)
    assert first_at is not None and first_at < total - 0.5  # the first bytes came long before the last
    seen = stand_in.requests[0]
    assert seen.path == "/aiserver.v1.AiService/SomethingStreamed?x=1"
    assert seen.body == body
    assert seen.headers["authorization"] == "Bearer user-token"
    assert seen.headers["x-cursor-client-version"] == "3.14"
    assert seen.headers["accept-encoding"] == "identity"


async def test_passthrough_never_replays_a_cookie_the_ide_did_not_send(server: ServerProcess, stand_in: FakeProviderServer) -> None:
    # Cursor's cookies are the IDE's business: a response's Set-Cookie must not come back on the
    # next request, and the IDE's own headers go through as they are.
    stand_in.enqueue(
        Reply(body=b"one", content_type="application/proto", headers={"set-cookie": "session=abc; Path=/"}),
        Reply(body=b"two", content_type="application/proto"),
    )
    ide_headers = {"content-type": "application/proto", "user-agent": "Cursor/3.14 (test)", "x-ghost-mode": "true"}
    for body in (b"first", b"second"):  # a fresh IDE-side client each time: it keeps no cookies either
        async with httpx.AsyncClient(base_url=server.base_url) as client:
            response = await client.post("/aiserver.v1.AiService/Unary", content=body, headers=ide_headers)
            assert response.status_code == 200
    first, second = stand_in.requests
    assert "cookie" not in second.headers
    for seen in (first, second):
        assert seen.headers["user-agent"] == "Cursor/3.14 (test)"
        assert seen.headers["x-ghost-mode"] == "true"


async def test_forged_upstream_url_is_refused(server: ServerProcess, stand_in: FakeProviderServer) -> None:
    # Even with the proxy's mark (as our own proxy would send it), only https Cursor hosts pass.
    async with httpx.AsyncClient(base_url=server.base_url, headers={**PROTO, **MARKED}) as client:
        for forged in ("https://evil.example.com/x", "http://api2.cursor.sh/x", "https://cursor.sh.evil.com/x", "https://user@api2.cursor.sh/x"):
            resp = await client.post("/aiserver.v1.AiService/Anything", content=b"x", headers={"x-server-upstream-url": forged})
            assert resp.status_code == 403, forged
            assert resp.json()["code"] == "permission_denied"
    assert stand_in.requests == []


async def test_cursor_upstream_url_header_is_accepted_from_the_proxy(server: ServerProcess, stand_in: FakeProviderServer) -> None:
    stand_in.enqueue(Reply(body=b"ok", content_type="application/proto"))
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        resp = await client.post(
            "/aiserver.v1.AiService/Anything",
            content=b"x",
            headers={"x-server-upstream-url": "https://api3.cursor.sh/aiserver.v1.AiService/Anything", **PROTO, **MARKED},
        )
    assert resp.status_code == 200 and resp.content == b"ok"
    seen = stand_in.requests[0].headers
    assert "x-server-upstream-url" not in seen and "x-cursor-byok-proxy" not in seen


@pytest.mark.parametrize("newer", [False, True], ids=["as-is", "newer-fields"])
async def test_non_local_model_routes_the_whole_transport_upstream(server: ServerProcess, stand_in: FakeProviderServer, tmp_path: Path, newer: bool) -> None:
    upstream_frames = envelope(b"\x0a\x09\x0a\x07\x0a\x05Hello") + envelope(b"{}", 2)
    stand_in.enqueue(Reply(body=b"", content_type="application/proto"))  # the append
    stand_in.enqueue(Reply(chunks=[upstream_frames], content_type="application/connect+proto"))  # RunSSE
    ide = ScriptedIDE(server.base_url, tmp_path)
    try:
        rid = uuid.uuid4().hex
        msg = run_request("hi", model="official-model", conversation_id=uuid.uuid4().hex)
        if newer:  # fields and enum values of a newer Cursor go on untouched
            add_newer_field(msg.run_request)
            add_newer_field(msg.run_request.action)
            msg.run_request.action.user_message_action.user_message.mode = NEWER_ENUM_VALUE
        resp = await ide.append(rid, msg)
        assert resp.status_code == 200
        log = await asyncio.wait_for(ide.stream(rid, StreamLog()), 10)
    finally:
        await ide.close()
    assert bytes(log.raw) == upstream_frames
    paths = [r.path for r in stand_in.requests]
    assert paths == [BIDI_APPEND, RUN_SSE]
    assert stand_in.requests[0].body == append_body(rid, 0, msg)


async def test_a_grpc_web_transport_routed_upstream_is_relayed_as_upstream_answers(server: ServerProcess, stand_in: FakeProviderServer, tmp_path: Path) -> None:
    """Upstream speaks gRPC-Web too: its replies (a message and its trailer frame) reach the client
    byte for byte, never framed a second time."""
    append_reply = envelope(b"") + envelope(b"grpc-status: 0\r\n", 0x80)
    stream_reply = envelope(b"\x0a\x09\x0a\x07\x0a\x05Hello") + envelope(b"grpc-status: 0\r\n", 0x80)
    stand_in.enqueue(Reply(body=append_reply, content_type="application/grpc-web+proto"))
    stand_in.enqueue(Reply(chunks=[stream_reply], content_type="application/grpc-web+proto"))
    ide = ScriptedIDE(server.base_url, tmp_path, grpc_web=True)
    try:
        rid = uuid.uuid4().hex
        resp = await ide.append(rid, run_request("hi", model="official-model", conversation_id=uuid.uuid4().hex))
        log = await asyncio.wait_for(ide.stream(rid, StreamLog()), 10)
    finally:
        await ide.close()
    assert (resp.status_code, resp.content) == (200, append_reply)
    assert bytes(log.raw) == stream_reply and log.trailer == {"grpc-status": "0"}
    assert [r.headers["content-type"] for r in stand_in.requests] == ["application/grpc-web+proto"] * 2


async def test_local_model_variant_ids_stay_local(server: ServerProcess, stand_in: FakeProviderServer, tmp_path: Path) -> None:
    ide = ScriptedIDE(server.base_url, tmp_path)
    try:
        rid = uuid.uuid4().hex
        resp = await ide.append(rid, run_request("hi", model=f"{MODEL}-high", conversation_id=uuid.uuid4().hex))
        assert resp.status_code == 200
        log = await asyncio.wait_for(ide.stream(rid, StreamLog()), 15)
    finally:
        await ide.close()
    assert stand_in.requests == []  # never went upstream
    assert log.terminals == 1 and log.terminal is not None and log.terminal.code == "unavailable"  # provider down


@direct_transports
async def test_an_alias_runs_a_hosted_model_on_a_configured_one_and_nothing_goes_upstream(
    tmp_path: Path, stand_in: FakeProviderServer, provider: FakeProviderServer, workspace: Path, transport: str
) -> None:
    cfg = ServerConfig(
        data_dir=tmp_path / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
        upstream=stand_in.url,
        aliases={"claude-4.5-sonnet-thinking": MODEL},
    )
    provider.enqueue(OPENAI_CHAT.text(["answered by your own model"]))
    with ServerProcess(cfg) as server:
        ide = ScriptedIDE(server.base_url, workspace, transport=transport)
        try:
            log = await ide.turn(run_request("hi", model="claude-4.5-sonnet-thinking", conversation_id=uuid.uuid4().hex))
        finally:
            await ide.close()
    assert log.text == "answered by your own model" and log.terminal is None
    assert len(provider.requests) == 1 and provider.requests[0].json()["model"] == "fake-model"
    assert stand_in.requests == []  # nothing went upstream


class H2UpstreamStandIn(LoopbackServer):
    """Cursor's backend as far as a Run stream goes: h2c, answers each client message at once
    with a text delta naming it (so a reply can only come while the request is still open), and
    ends with the end-stream frame once the client has finished sending."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import h2.config
        import h2.connection
        import h2.events

        from cursor_byok import hotpath

        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        decoders: dict[int, hotpath.FrameDecoder] = {}
        while data := await reader.read(65536):
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    headers = dict(event.headers)
                    self.paths.append(headers[":path"])
                    self.headers.append(headers)
                    decoders[event.stream_id] = hotpath.FrameDecoder()
                    conn.send_headers(event.stream_id, [(":status", "200"), ("content-type", "application/connect+proto")])
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    for _, payload in decoders[event.stream_id].feed(event.data):
                        kind = pb.AgentClientMessage.FromString(payload).WhichOneof("message")
                        reply = pb.AgentServerMessage()
                        reply.interaction_update.text_delta.text = f"got {kind};"
                        conn.send_data(event.stream_id, envelope(reply.SerializeToString()))
                elif isinstance(event, h2.events.StreamEnded):
                    conn.send_data(event.stream_id, envelope(b"{}", 2), end_stream=True)
            writer.write(conn.data_to_send())
            await writer.drain()
        writer.close()


async def test_a_run_for_a_hosted_model_is_relayed_upstream_as_one_bidi_stream(tmp_path: Path, workspace: Path) -> None:
    from cursor_byok.h2_client import H2Client

    async with H2UpstreamStandIn() as stand_in:
        cfg = ServerConfig(
            data_dir=tmp_path / "data",
            models=[ModelSpec(id=MODEL, provider="openai-chat", base_url="http://127.0.0.1:9/v1")],
            upstream=stand_in.url,
        )
        with ServerProcess(cfg) as server:
            client = await H2Client.connect("127.0.0.1", server.port)
            try:
                head = [(":method", "POST"), (":scheme", "http"), (":authority", f"127.0.0.1:{server.port}"), (":path", RUN)]
                head += [("content-type", "application/connect+proto"), ("authorization", "Bearer user-token")]
                stream = await client.request(head)
                await stream.send(envelope(run_request("hi", model="gpt-5", conversation_id="c-up").SerializeToString()))
                status, _ = await stream.response()
                assert status == 200
                received = await stream.read()
                assert received is not None and b"got run_request;" in received
                # Still open both ways: the next message gets its own answer.
                await stream.send(envelope(heartbeat_message().SerializeToString()))
                while b"got client_heartbeat;" not in received:
                    more = await stream.read()
                    assert more is not None
                    received += more
                await stream.end()
                while (more := await stream.read()) is not None:
                    received += more
            finally:
                await client.close()
    assert received.endswith(envelope(b"{}", 2))
    assert stand_in.paths == [RUN] and stand_in.headers[0]["authorization"] == "Bearer user-token"


PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def proxy_env(**values: str) -> dict[str, str]:
    """The proxy variables a server sees: these (in both spellings, as tools set them), no others."""
    return {spelling: values.get(name, "") for name in PROXY_VARIABLES for spelling in (name, name.lower())}


@pytest.mark.parametrize(
    ("variables", "through_proxy"),
    [
        ({"HTTP_PROXY": "{proxy}"}, True),
        ({"ALL_PROXY": "{proxy}"}, True),  # no <SCHEME>_PROXY: ALL_PROXY, as every other client reads it
        ({"ALL_PROXY": "{proxy}", "NO_PROXY": "127.0.0.1"}, False),
        ({"HTTP_PROXY": "{proxy}", "NO_PROXY": "127.0.0.1"}, False),
    ],
)
async def test_a_run_relayed_upstream_goes_through_the_proxy_the_environment_names(
    tmp_path: Path, variables: dict[str, str], through_proxy: bool
) -> None:
    """On a network that only lets traffic out through a corporate proxy, the Run relay reaches
    Cursor through it (a CONNECT tunnel), read from the environment as every other outbound client
    reads it: <SCHEME>_PROXY, else ALL_PROXY, unless NO_PROXY names the host."""
    from cursor_byok.h2_client import H2Client
    from tests.fakes import FakeCorporateProxy

    async with H2UpstreamStandIn() as stand_in:
        authority = stand_in.url.removeprefix("http://")
        with FakeCorporateProxy() as corporate:
            cfg = ServerConfig(
                data_dir=tmp_path / "data",
                models=[ModelSpec(id=MODEL, provider="openai-chat", base_url="http://127.0.0.1:9/v1")],
                upstream=stand_in.url,
            )
            env = proxy_env(**{name: value.format(proxy=corporate.url) for name, value in variables.items()})
            with ServerProcess(cfg, env=env) as server:
                client = await H2Client.connect("127.0.0.1", server.port)
                try:
                    head = [(":method", "POST"), (":scheme", "http"), (":authority", f"127.0.0.1:{server.port}"), (":path", RUN)]
                    stream = await client.request([*head, ("content-type", "application/connect+proto")])
                    await stream.send(envelope(run_request("hi", model="gpt-5", conversation_id="c-corp").SerializeToString()), end=True)
                    received = b""
                    while (more := await stream.read()) is not None:
                        received += more
                finally:
                    await client.close()
    assert b"got run_request;" in received and received.endswith(envelope(b"{}", 2))
    assert corporate.connects == ([authority] if through_proxy else [])
    assert stand_in.paths == [RUN]


def test_a_proxy_the_run_relay_cannot_use_is_refused_at_start(tmp_path: Path) -> None:
    """The Run relay tunnels through an http:// proxy only: another scheme is refused with one line
    at start, never silently bypassed."""
    cfg = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id=MODEL, provider="openai-chat", base_url="http://127.0.0.1:9/v1")])
    result = ServerProcess(cfg, env=proxy_env(ALL_PROXY="socks5://user:secret@127.0.0.1:1080")).run_to_exit("serve")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, (result.returncode, result.stderr)
    assert "socks5://127.0.0.1:1080" in lines[0] and "http://" in lines[0] and "NO_PROXY" in lines[0], lines[0]
    assert "secret" not in result.stderr + result.stdout
