"""A server other machines reach: TLS served by granian from the operator's certificate, its public
names as Host and Origin, and the token on every route but health. The certificates are made here,
by a CA of the test's own."""
from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess
from tests.harness.tls import ServerCertificate, make_server_certificate

TOKEN = "team-token-0123456789abcdef"
MODEL = "byok-team"


@pytest.fixture
def certificate(tmp_path: Path) -> ServerCertificate:
    return make_server_certificate(tmp_path / "tls", "team.example", "localhost")


def tls_config(data_dir: Path, certificate: ServerCertificate, provider_url: str = "http://127.0.0.1:9", **server: object) -> ServerConfig:
    return ServerConfig(
        data_dir=data_dir,
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider_url + "/v1")],
        extra_server={"tls_cert": str(certificate.cert_file), "tls_key": str(certificate.key_file), **server},
    )


async def test_a_turn_over_tls_with_the_token(tmp_path: Path, certificate: ServerCertificate, provider: FakeProviderServer) -> None:
    provider.enqueue(OPENAI_CHAT.text(["over TLS"]))
    cfg = tls_config(tmp_path / "data", certificate, provider.url, auth_token_env="TEAM_TOKEN", public_names=["team.example"])
    with ServerProcess(cfg, env={"TEAM_TOKEN": TOKEN}, tls=certificate.client_context()) as server:
        assert server.base_url.startswith("https://")
        ide = ScriptedIDE(server.base_url, tmp_path, client=lambda: httpx.AsyncClient(
            base_url=server.base_url, verify=certificate.client_context(), headers={"x-cursor-byok-token": TOKEN}, timeout=30))
        try:
            log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
        finally:
            await ide.close()
        assert log.text == "over TLS" and log.terminal is None
        # Plain HTTP on the TLS port is not served.
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5)


def test_public_names_are_the_hosts_and_origins_served(tmp_path: Path, certificate: ServerCertificate) -> None:
    cfg = tls_config(tmp_path / "data", certificate, auth_token_env="TEAM_TOKEN", public_names=["team.example"])
    with ServerProcess(cfg, env={"TEAM_TOKEN": TOKEN}, tls=certificate.client_context()) as server:
        with httpx.Client(base_url=server.base_url, verify=certificate.client_context(), timeout=5) as client:
            token = {"x-cursor-byok-token": TOKEN}
            assert client.get("/ui/api/overview", headers={**token, "host": "team.example"}).status_code == 200
            assert client.get("/ui/api/overview", headers={**token, "host": "team.example", "origin": "https://team.example"}).status_code == 200
            assert client.get("/ui/api/overview", headers={**token, "host": "evil.example"}).status_code == 421
            assert client.get("/ui/api/overview", headers={**token, "host": "team.example", "origin": "https://evil.example"}).status_code == 403
            assert client.get("/ui/api/overview", headers={"host": "team.example"}).status_code == 401
            assert client.get("/healthz", headers={"host": "team.example"}).status_code == 204  # health needs no token


def test_beyond_loopback_without_a_token_only_health_answers(tmp_path: Path) -> None:
    with ServerProcess(ServerConfig(data_dir=tmp_path / "data", extra_server={"host": "0.0.0.0"})) as server:
        refused = httpx.post(server.base_url + "/agent.v1.AgentService/RunSSE", content=b"", headers={"content-type": "application/connect+proto"}, timeout=5)
        assert refused.status_code == 403 and "auth token" in refused.text
        assert httpx.get(server.base_url + "/healthz", timeout=5).status_code == 204


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ("missing-cert", "server.tls_cert: cannot read"),
        ("missing-key", "server.tls_key: cannot read"),
        ("only-cert", "server.tls_key: set it with server.tls_cert"),
        ("not-a-cert", "server.tls_cert: not a PEM certificate"),
        ("wrong-key", "does not match the certificate"),
        ("url-as-public-name", "server.public_names[0]: 'https://team.example/' is not a host name"),
        ("proxy-beside-tls", "the intercepting proxy runs beside a local server"),
    ],
)
def test_a_bad_certificate_or_key_is_one_clear_line_at_start(tmp_path: Path, certificate: ServerCertificate, fault: str, says: str) -> None:
    other = make_server_certificate(tmp_path / "other", "other.example")
    cert, key = str(certificate.cert_file), str(certificate.key_file)
    server: dict[str, object] = {
        "missing-cert": {"tls_cert": str(tmp_path / "nope.pem"), "tls_key": key},
        "missing-key": {"tls_cert": cert, "tls_key": str(tmp_path / "nope.key")},
        "only-cert": {"tls_cert": cert},
        "not-a-cert": {"tls_cert": str(certificate.ca_file.with_name("garbage.pem")), "tls_key": key},
        "wrong-key": {"tls_cert": cert, "tls_key": str(other.key_file)},
        "url-as-public-name": {"public_names": ["https://team.example/"]},
        "proxy-beside-tls": {"tls_cert": cert, "tls_key": key},
    }[fault]
    certificate.ca_file.with_name("garbage.pem").write_text("not a certificate\n")
    cfg = ServerConfig(data_dir=tmp_path / "data", extra_server=server)
    done = ServerProcess(cfg).run_to_exit(*(["serve", "--proxy"] if fault == "proxy-beside-tls" else []))
    assert done.returncode in (1, 2), done
    assert says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "data" / "state.db").exists()  # refused before anything was made


def test_the_tls_flags_override_the_config(tmp_path: Path, certificate: ServerCertificate) -> None:
    cfg = ServerConfig(data_dir=tmp_path / "data")
    server = ServerProcess(cfg, tls=certificate.client_context())
    done = server.run_to_exit("serve", "--tls-cert", str(tmp_path / "absent.pem"), "--tls-key", str(certificate.key_file))
    assert done.returncode == 1 and "cannot read" in done.stderr and "absent.pem" in done.stderr, done.stderr


def test_doctor_checks_the_tls_files(tmp_path: Path, certificate: ServerCertificate) -> None:
    cfg = ServerConfig(data_dir=tmp_path / "data", extra_server={"tls_cert": str(certificate.cert_file), "tls_key": str(certificate.key_file)})
    report = ServerProcess(cfg).run_to_exit("doctor").stdout
    line = next(line for line in report.splitlines() if line.split(":")[0].split()[-1:] == ["tls"])
    assert line.startswith("ok") and "team.example" in line and "valid until" in line, report
    other = make_server_certificate(tmp_path / "other", "other.example")
    cfg.extra_server["tls_key"] = str(other.key_file)
    report = ServerProcess(cfg).run_to_exit("doctor").stdout
    line = next(line for line in report.splitlines() if line.split(":")[0].split()[-1:] == ["tls"])
    assert line.startswith("FAIL") and "does not match" in line, report
