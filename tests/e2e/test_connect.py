"""`cursor-byok connect`: a developer's interceptor in front of a team server over TLS. The agent
RPCs of the team's models go to the team server with the developer's token; everything else goes
to Cursor's upstream (a stand-in here) as before, without the token; the model lists Cursor asks
for carry the team's models; `doctor` checks the team server."""
from __future__ import annotations

import asyncio
import signal
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cursor_byok.protocol import side_pb2
from tests.fakes import OPENAI_CHAT, FakeProviderServer, Reply
from tests.harness.connect import ConnectProcess
from tests.harness.ide import BIDI_APPEND, RUN_SSE, ScriptedIDE, StreamLog, envelope, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess
from tests.harness.tls import ServerCertificate, make_server_certificate

from .test_reload import wait_for_line

TOKEN = "dev-token-0123456789abcdef"
TEAM_MODEL = "byok-team"
AVAILABLE_MODELS = "/aiserver.v1.AiService/AvailableModels"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> ServerCertificate:
    return make_server_certificate(tmp_path_factory.mktemp("tls"), "localhost")


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, certificate: ServerCertificate, shared_provider: FakeProviderServer) -> Iterator[ServerProcess]:
    cfg = ServerConfig(
        data_dir=tmp_path_factory.mktemp("team") / "data",
        models=[ModelSpec(id=TEAM_MODEL, provider="openai-chat", base_url=shared_provider.url + "/v1")],
        extra_server={"host": "0.0.0.0", "tls_cert": str(certificate.cert_file), "tls_key": str(certificate.key_file), "auth_token_env": "TEAM_TOKEN"},
    )
    with ServerProcess(cfg, env={"TEAM_TOKEN": TOKEN}, tls=certificate.client_context()) as server:
        yield server


@pytest.fixture
def cursor_upstream() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        yield server


def token_file(tmp_path: Path, token: str = TOKEN) -> Path:
    path = tmp_path / "token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


def developer(tmp_path: Path, cursor_upstream: FakeProviderServer, certificate: ServerCertificate) -> ConnectProcess:
    return ConnectProcess(tmp_path / "dev", cursor_upstream.url, env={"SSL_CERT_FILE": str(certificate.ca_file)})


def own_team(tmp_path: Path, certificate: ServerCertificate, provider: FakeProviderServer) -> ServerProcess:
    """A team server of the test's own (not yet started), serving TLS on loopback."""
    cfg = ServerConfig(
        data_dir=tmp_path / "team",
        models=[ModelSpec(id=TEAM_MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
        extra_server={"tls_cert": str(certificate.cert_file), "tls_key": str(certificate.key_file), "auth_token_env": "TEAM_TOKEN"},
    )
    return ServerProcess(cfg, env={"TEAM_TOKEN": TOKEN}, tls=certificate.client_context())


def ide_through(connect: ConnectProcess, workspace: Path) -> ScriptedIDE:
    return ScriptedIDE("https://api2.cursor.sh", workspace, client=connect.ide_client)


async def test_team_models_go_to_the_team_server_and_the_rest_to_cursor(
    tmp_path: Path, team: ServerProcess, certificate: ServerCertificate, provider: FakeProviderServer, cursor_upstream: FakeProviderServer
) -> None:
    provider.enqueue(OPENAI_CHAT.text(["from the team's key"]))
    upstream_frames = envelope(b"\x0a\x09\x0a\x07\x0a\x05Hello") + envelope(b"{}", 2)
    # The append and its RunSSE reach Cursor in either order (the RunSSE waited for the append's route).
    cursor_upstream.respond_with(
        lambda request: Reply(chunks=[upstream_frames], content_type="application/connect+proto")
        if request.path == RUN_SSE else Reply(body=b"", content_type="application/proto")
    )
    with developer(tmp_path, cursor_upstream, certificate).start(team.base_url, "--token-file", str(token_file(tmp_path))) as connect:
        ide = ide_through(connect, tmp_path)
        try:
            ours = await ide.turn(run_request("hi", model=TEAM_MODEL, conversation_id=uuid.uuid4().hex))
            assert cursor_upstream.requests == []  # nothing of the team's turn went to Cursor
            rid = uuid.uuid4().hex
            theirs = StreamLog()
            reading = asyncio.create_task(ide.stream(rid, theirs))  # first, as Cursor: it waits for the route
            resp = await ide.append(rid, run_request("hi", model="claude-4.5-sonnet", conversation_id=uuid.uuid4().hex))
            assert resp.status_code == 200
            await asyncio.wait_for(reading, 15)
        finally:
            await ide.close()
    assert ours.text == "from the team's key" and ours.terminal is None
    assert len(provider.requests) == 1
    assert bytes(theirs.raw) == upstream_frames
    assert sorted(r.path for r in cursor_upstream.requests) == sorted([BIDI_APPEND, RUN_SSE])
    for request in cursor_upstream.requests:  # the developer's token never goes to Cursor
        assert "x-cursor-byok-token" not in request.headers and TOKEN.encode() not in request.body


async def test_cursors_model_list_carries_the_teams_models(
    tmp_path: Path, team: ServerProcess, certificate: ServerCertificate, cursor_upstream: FakeProviderServer
) -> None:
    hosted = side_pb2.AvailableModelsResponse(model_names=["claude-4.5-sonnet"])
    hosted.models.add().name = "claude-4.5-sonnet"
    cursor_upstream.enqueue(Reply(body=hosted.SerializeToString(), content_type="application/proto"))
    with developer(tmp_path, cursor_upstream, certificate).start(team.base_url, "--token-file", str(token_file(tmp_path))) as connect:
        async with connect.ide_client() as client:
            resp = await client.post(AVAILABLE_MODELS, content=b"", headers={"content-type": "application/proto", "authorization": "Bearer cursor-session"})
    assert resp.status_code == 200
    listed = side_pb2.AvailableModelsResponse.FromString(resp.content)
    assert [m.name for m in listed.models] == ["claude-4.5-sonnet", TEAM_MODEL]
    assert cursor_upstream.requests[0].headers["authorization"] == "Bearer cursor-session"  # Cursor's own session, to Cursor


def test_a_wrong_token_is_refused_at_connect(tmp_path: Path, team: ServerProcess, certificate: ServerCertificate, cursor_upstream: FakeProviderServer) -> None:
    done = developer(tmp_path, cursor_upstream, certificate).run_to_exit("connect", team.base_url, "--token-file", str(token_file(tmp_path, "wrong-token-0123456789")))
    assert done.returncode == 1
    assert "refused the developer token" in done.stderr and "wrong-token" not in done.stderr + done.stdout, done.stderr


@pytest.mark.parametrize("fault", ["token revoked", "team server gone"])
async def test_a_team_server_failing_mid_session_is_a_clear_error_in_the_ide(
    tmp_path: Path, certificate: ServerCertificate, provider: FakeProviderServer, cursor_upstream: FakeProviderServer, fault: str
) -> None:
    team = own_team(tmp_path, certificate, provider)
    with team, developer(tmp_path, cursor_upstream, certificate).start(team.base_url, "--token-file", str(token_file(tmp_path))) as connect:
        team.stop()
        if fault == "token revoked":
            team.extra_env["TEAM_TOKEN"] = "another-token-0123456789"
            team.start()
        ide = ide_through(connect, tmp_path)
        try:
            resp = await ide.append(uuid.uuid4().hex, run_request("hi", model=TEAM_MODEL, conversation_id=uuid.uuid4().hex))
        finally:
            await ide.close()
    status, code, says = (401, "unauthenticated", "refused your developer token") if fault == "token revoked" else (503, "unavailable", "does not answer")
    assert (resp.status_code, resp.json()["code"]) == (status, code)
    assert f"the team server {team.base_url} {says}" in resp.json()["message"]
    assert provider.requests == [] and cursor_upstream.requests == []


def test_the_token_is_kept_private_and_the_next_connect_needs_no_flag(
    tmp_path: Path, team: ServerProcess, certificate: ServerCertificate, cursor_upstream: FakeProviderServer
) -> None:
    dev = developer(tmp_path, cursor_upstream, certificate)
    dev.extra_env["CURSOR_BYOK_TEAM_TOKEN"] = TOKEN
    with dev.start(team.base_url):
        pass
    saved = [p for p in dev.data_dir.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert len(saved) == 1 and (saved[0].stat().st_mode & 0o077) == 0
    assert TOKEN not in dev.log()
    del dev.extra_env["CURSOR_BYOK_TEAM_TOKEN"]
    with dev.start():  # the saved team server and token
        pass


def test_doctor_checks_the_team_server(tmp_path: Path, team: ServerProcess, certificate: ServerCertificate, cursor_upstream: FakeProviderServer) -> None:
    dev = developer(tmp_path, cursor_upstream, certificate)
    with dev.start(team.base_url, "--token-file", str(token_file(tmp_path))):
        pass
    report = dev.run_to_exit("doctor").stdout
    line = next(line for line in report.splitlines() if "team server" in line)
    assert line.startswith("ok") and "token accepted" in line and TEAM_MODEL in line, report
    dev.extra_env = {}  # the team's CA no longer trusted
    report = dev.run_to_exit("doctor").stdout
    line = next(line for line in report.splitlines() if "team server" in line)
    assert line.startswith("FAIL") and "certificate" in line, report


async def test_in_front_of_a_team_server_the_proxy_speaks_http1_only(
    tmp_path: Path, team: ServerProcess, certificate: ServerCertificate, cursor_upstream: FakeProviderServer
) -> None:
    """Routes are decided per HTTP/1.1 request: a client offering HTTP/2 (Cursor left on it) is given HTTP/1.1."""
    with developer(tmp_path, cursor_upstream, certificate).start(team.base_url, "--token-file", str(token_file(tmp_path))) as connect:
        reader, writer = await asyncio.open_connection("127.0.0.1", connect.proxy_port)
        try:
            writer.write(b"CONNECT api2.cursor.sh:443 HTTP/1.1\r\nHost: api2.cursor.sh:443\r\n\r\n")
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            tls = ssl.create_default_context(cafile=str(connect.data_dir / "ca" / "ca.crt"))
            tls.set_alpn_protocols(["h2", "http/1.1"])
            await writer.start_tls(tls, server_hostname="api2.cursor.sh")
            assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "http/1.1"
        finally:
            writer.close()


async def test_a_model_the_team_adds_is_routed_after_sighup(
    tmp_path: Path, certificate: ServerCertificate, provider: FakeProviderServer, cursor_upstream: FakeProviderServer
) -> None:
    with own_team(tmp_path, certificate, provider) as team:
        dev = developer(tmp_path, cursor_upstream, certificate)
        with dev.start(team.base_url, "--token-file", str(token_file(tmp_path))) as connect:
            team.config.models.append(ModelSpec(id="byok-later", provider="openai-chat", base_url=provider.url + "/v1"))
            team.config_path.write_text(team.config.toml(team.port))
            assert team.proc is not None and connect.proc is not None
            team.proc.send_signal(signal.SIGHUP)
            await asyncio.to_thread(wait_for_line, team, "config reloaded")
            connect.proc.send_signal(signal.SIGHUP)
            await asyncio.to_thread(wait_for_line, connect, "the team's models read")
            provider.enqueue(OPENAI_CHAT.text(["a new team model"]))
            ide = ide_through(connect, tmp_path)
            try:
                log = await ide.turn(run_request("hi", model="byok-later", conversation_id=uuid.uuid4().hex))
            finally:
                await ide.close()
    assert log.text == "a new team model" and cursor_upstream.requests == []


async def test_a_team_server_down_at_the_next_start_leaves_cursor_working(
    tmp_path: Path, certificate: ServerCertificate, provider: FakeProviderServer, cursor_upstream: FakeProviderServer
) -> None:
    """The saved team server does not answer: connect starts anyway (Cursor's own traffic goes on),
    and routes the team's models once the team server answers again. A new URL that does not
    answer is refused at once."""
    team = own_team(tmp_path, certificate, provider)
    dev = developer(tmp_path, cursor_upstream, certificate)
    with team, dev.start(team.base_url, "--token-file", str(token_file(tmp_path))):
        pass
    refused = dev.run_to_exit("connect", f"https://127.0.0.1:{team.port}", "--token-file", str(token_file(tmp_path, "another-token-0123456789")))
    assert refused.returncode == 1 and "unreachable" in refused.stderr, refused.stderr
    with dev.start() as connect:  # the saved one, down
        await asyncio.to_thread(wait_for_line, connect, "the team's models go to Cursor until it answers")
        cursor_upstream.enqueue(Reply(body=b"", content_type="application/proto"))
        ide = ide_through(connect, tmp_path)
        try:
            assert (await ide.append(uuid.uuid4().hex, run_request("hi", model="gpt-5", conversation_id=uuid.uuid4().hex))).status_code == 200
            with team:
                assert connect.proc is not None
                connect.proc.send_signal(signal.SIGHUP)
                await asyncio.to_thread(wait_for_line, connect, "the team's models read")
                provider.enqueue(OPENAI_CHAT.text(["back"]))
                log = await ide.turn(run_request("hi", model=TEAM_MODEL, conversation_id=uuid.uuid4().hex))
        finally:
            await ide.close()
    assert log.text == "back" and [r.path for r in cursor_upstream.requests] == [BIDI_APPEND]

