"""The server's outbound TLS (model providers, the passthrough to Cursor's servers) verifies every
server against the one trust store (certifi's CAs, or the bundle SSL_CERT_FILE names): a server
whose certificate it does not trust is refused before it sees a request, one it trusts is served.
The trust store is built beside the gateway's import, and aiohttp's own default contexts are made
without CAs (`trust_store.py`): neither may make verification any weaker."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fakes import OPENAI_CHAT, FakeProviderServer, Reply
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess
from tests.interceptor.interceptor_support import self_signed

MODEL = "tls-model"
RPC = "/aiserver.v1.AiService/Anything"  # not ours: relayed to the upstream


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    cert = self_signed("localhost", ips=("127.0.0.1",))  # trusted by no public CA
    tmp = tmp_path_factory.mktemp("tls")
    cafile = tmp / "ca.pem"
    cafile.write_bytes(cert.cert_pem)
    return cafile, cert.server_context(tmp)


@pytest.fixture(scope="module")
def tls_fake(certificate: tuple[Path, object]) -> Iterator[FakeProviderServer]:
    with FakeProviderServer(tls=certificate[1]) as fake:  # type: ignore[arg-type]
        yield fake


def started(tmp_path: Path, fake: FakeProviderServer, env: dict[str, str]) -> ServerProcess:
    config = ServerConfig(
        data_dir=tmp_path / "data", models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=fake.url + "/v1")], upstream=fake.url
    )
    return ServerProcess(config, env=env).start()


async def turn_and_relay(server: ServerProcess, fake: FakeProviderServer) -> tuple[object, httpx.Response]:
    fake.requests.clear()
    fake.enqueue(OPENAI_CHAT.text(["through TLS"]), Reply(body=b"relayed", content_type="application/proto"))
    ide = ScriptedIDE(server.base_url)
    try:
        log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
    finally:
        await ide.close()
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        relayed = await client.post(RPC, content=b"x", headers={"content-type": "application/proto"})
    return log, relayed


async def test_a_server_the_trust_store_trusts_is_served(tmp_path: Path, tls_fake: FakeProviderServer, certificate: tuple[Path, object]) -> None:
    server = started(tmp_path, tls_fake, {"SSL_CERT_FILE": str(certificate[0])})
    try:
        log, relayed = await turn_and_relay(server, tls_fake)
    finally:
        server.stop()
    assert log.text == "through TLS" and log.terminal is None, log.terminal  # type: ignore[attr-defined]
    assert (relayed.status_code, relayed.content) == (200, b"relayed")
    assert [r.path for r in tls_fake.requests] == ["/v1/chat/completions", RPC]


async def test_a_certificate_the_trust_store_does_not_trust_is_refused(tmp_path: Path, tls_fake: FakeProviderServer) -> None:
    env = {"SSL_CERT_FILE": "", "SSL_CERT_DIR": ""}  # certifi's CAs: the fake's certificate is in none of them
    server = started(tmp_path, tls_fake, env)
    try:
        log, relayed = await turn_and_relay(server, tls_fake)
        server_log = server.log()
    finally:
        server.stop()
    assert log.text == "" and log.terminal is not None, log  # type: ignore[attr-defined]
    assert "certificate" in log.terminal.message.lower(), log.terminal  # type: ignore[attr-defined]
    assert relayed.status_code == 502
    assert tls_fake.requests == []  # neither the provider nor the upstream saw a request
    assert "Traceback" not in server_log


def test_a_ca_bundle_that_cannot_be_loaded_is_one_line_at_start(tmp_path: Path, tls_fake: FakeProviderServer) -> None:
    config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=tls_fake.url + "/v1")])
    missing = tmp_path / "no-such-bundle.pem"
    result = ServerProcess(config, env={"SSL_CERT_FILE": str(missing)}).run_to_exit()
    lines = [line for line in result.stderr.splitlines() if line.startswith("cursor-byok:")]
    assert result.returncode == 1 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"SSL_CERT_FILE={missing}" in lines[0] and "No such file" in lines[0] and "unset it" in lines[0], lines[0]
