"""The deployment: the Dockerfile and compose.yaml as far as they can be checked without a Docker
engine, deploy/'s nginx config checked by nginx itself, and the compose topology run without
Docker: Debian's nginx from the same template in front of two `serve` processes on loopback on one
PostgreSQL database, each turn kept on one instance by the hash of its x-request-id. With a Docker engine, the image
is built and run too."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
import yaml

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.nginx import ROOT, NginxProcess
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess
from tests.harness.tls import make_server_certificate

TOKEN = "deploy-token-0123456789abcdef"
MODEL = "byok-team"
TURNS = 16


def test_the_nginx_config_passes_nginx_t(tmp_path: Path) -> None:
    certificate = make_server_certificate(tmp_path / "tls", "localhost")
    checked = NginxProcess(tmp_path / "nginx", certificate, ("127.0.0.1:9", "127.0.0.1:10")).test_config()
    assert checked.returncode == 0, checked.stderr
    assert "syntax is ok" in checked.stderr and "test is successful" in checked.stderr


def test_compose_runs_postgres_two_instances_and_nginx_from_deploy() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "byok-a", "byok-b", "lb"}
    for name in ("byok-a", "byok-b"):
        instance = services[name]
        assert instance["build"] == "." and instance["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert any(arg.startswith("--store-url=postgresql://") for arg in instance["command"])
        assert "PASSWORD" not in " ".join(instance["command"]) and "PGPASSWORD" in instance["environment"]
        mounted = {volume.split(":")[0] for volume in instance["volumes"]}
        assert mounted == {"./deploy/team.toml"} and all((ROOT / m).exists() for m in mounted)
    lb = services["lb"]
    assert {lb["environment"]["BYOK_INSTANCE_A"], lb["environment"]["BYOK_INSTANCE_B"]} == {"byok-a:8787", "byok-b:8787"}
    assert (ROOT / lb["volumes"][0].split(":")[0]).exists()
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "USER cursor-byok" in dockerfile and "[team]" in dockerfile and "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile
    if _has_compose():  # the client's own reading of the file, where the compose plugin is installed
        done = subprocess.run(["docker", "compose", "-f", str(ROOT / "compose.yaml"), "config", "--quiet"], capture_output=True, text=True,
                              env={"POSTGRES_PASSWORD": "x" * 16, "CURSOR_BYOK_TOKEN": TOKEN, "PATH": "/usr/bin:/bin:/usr/local/bin"}, timeout=60)
        assert done.returncode == 0, done.stderr


def test_deploy_config_is_a_valid_team_config() -> None:
    from cursor_byok.config import load

    cfg = load(ROOT / "deploy" / "team.toml")
    assert cfg.server.host == "0.0.0.0" and cfg.server.auth_token_env and cfg.server.public_names


async def test_two_instances_behind_nginx_keep_each_turn_on_one_instance(tmp_path: Path, provider: FakeProviderServer, postgres_url: str) -> None:
    """compose.yaml's topology: two instances on one PostgreSQL database behind nginx."""
    certificate = make_server_certificate(tmp_path / "tls", "localhost")
    for _ in range(TURNS):
        provider.enqueue(OPENAI_CHAT.text(["answered"]))

    def instance(name: str) -> ServerProcess:
        cfg = ServerConfig(
            data_dir=tmp_path / name,
            models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
            extra_server={"auth_token_env": "CURSOR_BYOK_TOKEN", "public_names": ["localhost"]},
            store_url=postgres_url,
        )
        return ServerProcess(cfg, env={"CURSOR_BYOK_TOKEN": TOKEN})

    with instance("a") as a, instance("b") as b:
        with NginxProcess(tmp_path / "nginx", certificate, (f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}")) as lb:
            ide = ScriptedIDE(lb.base_url, tmp_path, client=lambda: httpx.AsyncClient(
                base_url=lb.base_url, verify=certificate.client_context(), headers={"x-cursor-byok-token": TOKEN}, timeout=30))
            request_ids = [uuid.uuid4().hex for _ in range(TURNS)]
            try:
                for rid in request_ids:
                    ide.client.headers["x-request-id"] = rid  # Cursor's header: the load balancer's key
                    log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex), request_id=rid)
                    assert log.text == "answered" and log.terminal is None
            finally:
                await ide.close()
            lb.stop()  # its log is whole
            served = lb.served()
    assert set(served) == set(request_ids)
    assert all(len(instances) == 1 for instances in served.values()), served  # each turn whole on one instance
    assert set().union(*served.values()) == {f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"}  # both took turns
    with psycopg.connect(postgres_url) as db:  # one database holds every turn, whichever instance ran it
        assert db.execute("SELECT count(*) FROM conversations").fetchone() == (TURNS,)
    assert not any((tmp_path / name / "state.db").exists() for name in ("a", "b"))


def _has_compose() -> bool:
    return shutil.which("docker") is not None and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


def _has_engine() -> bool:
    return shutil.which("docker") is not None and subprocess.run(["docker", "info"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _has_engine(), reason="!!! no Docker engine on this machine (the client alone cannot build or run images)")
def test_the_image_builds_and_its_healthcheck_passes_as_a_non_root_user(tmp_path: Path) -> None:
    tag = f"cursor-byok-test:{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "build", "-t", tag, str(ROOT)], check=True, timeout=1800)
    try:
        user = subprocess.run(["docker", "run", "--rm", "--entrypoint", "id", tag, "-u"], capture_output=True, text=True, check=True, timeout=120)
        assert user.stdout.strip() != "0"
        name = f"cursor-byok-test-{uuid.uuid4().hex[:8]}"
        config = tmp_path / "config.toml"  # the SQLite default: a lone container has no database beside it
        config.write_text('[server]\nauth_token_env = "CURSOR_BYOK_TOKEN"\n')
        config.chmod(0o644)
        subprocess.run(["docker", "run", "-d", "--name", name, "-e", "CURSOR_BYOK_TOKEN=" + TOKEN,
                        "-v", f"{config}:/etc/cursor-byok/config.toml:ro", tag], check=True, timeout=120)
        try:
            state = ""
            deadline = time.monotonic() + 120
            while state not in ("healthy", "unhealthy") and time.monotonic() < deadline:  # the HEALTHCHECK's verdict, polled
                time.sleep(0.5)
                state = subprocess.run(["docker", "inspect", "-f", "{{.State.Health.Status}}", name], capture_output=True, text=True).stdout.strip()
            assert state == "healthy"
        finally:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


@pytest.mark.skipif(not (_has_engine() and _has_compose()), reason="!!! no Docker engine with the compose plugin on this machine")
def test_compose_serves_through_nginx_with_the_token(tmp_path: Path) -> None:
    """The whole compose.yaml: PostgreSQL, both instances healthy, nginx ending TLS for the public
    name; health answers without the token, the model list only with it."""
    tls_dir = ROOT / "deploy" / "tls"  # where compose.yaml mounts the certificate from (git-ignored)
    certificate = make_server_certificate(tls_dir, "team.example", "localhost")
    env = {**os.environ, "POSTGRES_PASSWORD": uuid.uuid4().hex, "CURSOR_BYOK_TOKEN": TOKEN, "COMPOSE_PROJECT_NAME": f"byok{uuid.uuid4().hex[:8]}"}
    compose = ["docker", "compose", "-f", str(ROOT / "compose.yaml")]
    try:
        subprocess.run([*compose, "up", "-d", "--build", "--wait", "--wait-timeout", "600"], env=env, check=True, timeout=1800)
        with httpx.Client(base_url="https://localhost:443", verify=certificate.client_context(), headers={"host": "team.example"}, timeout=30) as client:
            assert client.get("/healthz").status_code == 204
            assert client.get("/v1/models").status_code == 401
            models = client.get("/v1/models", headers={"x-cursor-byok-token": TOKEN})
            assert models.status_code == 200 and "byok-sonnet" in models.text
    finally:
        subprocess.run([*compose, "down", "-v"], env=env, capture_output=True, timeout=300)
        shutil.rmtree(tls_dir, ignore_errors=True)
