"""`serve`: flags over config, the proxy beside the gateway, clean shutdown.

Most tests put a stand-in `cursor_byok.gateway` module in place (its `serve(config, listener)` runs a tiny
HTTP server on the listening socket `serve` bound and talks to it through the proxy); the last ones run the
real server in a child process.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import types
from pathlib import Path

import httpx
import pytest

import cursor_byok
from cursor_byok.config import Config
from tests.harness.server import free_port, free_ports


def client_context(cafile: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile=str(cafile))
    return ctx


class StandInGateway:
    """Replaces the real gateway: records the Config and exercises the proxy while 'serving'."""

    def __init__(self) -> None:
        self.configs: list[Config] = []
        self.seen_heads: list[bytes] = []
        self.responses: list[httpx.Response] = []
        self.listeners: list[tuple[str, int]] = []  # where the socket each serve() got listens

    def module(self) -> types.ModuleType:
        module = types.ModuleType("cursor_byok.gateway")
        module.serve = self.serve  # type: ignore[attr-defined]
        return module

    def serve(self, config: Config, listener: socket.socket, root: str) -> int:
        assert root == "cursor_byok.server"
        self.configs.append(config)
        self.listeners.append(listener.getsockname())
        with listener:
            if config.proxy.enabled:
                asyncio.run(self._through_proxy(config, listener))
        return 0

    async def _through_proxy(self, config: Config, listener: socket.socket) -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.seen_heads.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\ngateway")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, sock=listener)
        try:
            verify = client_context(config.data_path / "ca" / "ca.crt")
            async with httpx.AsyncClient(proxy=f"http://127.0.0.1:{config.proxy.port}", verify=verify, trust_env=False) as client:
                self.responses.append(await client.get("https://api2.cursor.sh/aiserver.v1.AiService/AvailableModels"))
        finally:
            server.close()
            await server.wait_closed()


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> StandInGateway:
    gateway = StandInGateway()
    module = gateway.module()
    monkeypatch.setitem(sys.modules, "cursor_byok.gateway", module)
    monkeypatch.setattr(cursor_byok, "gateway", module, raising=False)
    return gateway


def port_is_free(port: int) -> bool:
    """Nobody listens there any more (a connection is refused)."""
    with socket.socket() as s:
        try:
            s.connect(("127.0.0.1", port))
            return False
        except ConnectionRefusedError:
            return True


def test_flags_override_the_config(run_cli, write_config, stand_in, tmp_path: Path):
    path = write_config()
    port = free_port()
    result = run_cli("serve", "--config", str(path), "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(tmp_path / "elsewhere"), "--no-proxy")
    assert result.code == 0, result.err
    [cfg] = stand_in.configs
    assert (cfg.server.host, cfg.server.port, cfg.server.data_dir) == ("127.0.0.1", port, str(tmp_path / "elsewhere"))
    assert stand_in.listeners == [("127.0.0.1", port)]
    assert cfg.proxy.enabled is False
    assert cfg.source == str(path)
    assert stand_in.responses == []


@pytest.mark.parametrize(("flag", "json_lines"), [((), True), (("--log-format", "text"), False), (("--log-format", "json"), True)])
def test_the_configs_log_format_unless_the_flag_says_otherwise(run_cli, write_config, stand_in, flag, json_lines):
    path = write_config('[observability]\nlog_format = "json"\n')
    result = run_cli(*flag, "serve", "--config", str(path), "--no-proxy")
    assert result.code == 0, result.err
    assert result.err_lines and all(line.startswith("{") == json_lines for line in result.err_lines), result.err


def test_proxy_runs_beside_the_gateway_and_stops_after_it(run_cli, write_config, stand_in):
    proxy_port = free_port()
    path = write_config(proxy_port=proxy_port)
    result = run_cli("serve", "--proxy", "--config", str(path), "--log-format", "json")
    assert result.code == 0, result.err
    [cfg] = stand_in.configs
    assert cfg.proxy.enabled and cfg.proxy.port == proxy_port
    [response] = stand_in.responses
    assert (response.status_code, response.text) == (200, "gateway")
    [head] = stand_in.seen_heads
    assert b"x-server-upstream-url: https://api2.cursor.sh/aiserver.v1.AiService/AvailableModels\r\n" in head
    assert port_is_free(proxy_port)  # stopped once serve returned
    logs = [json.loads(line) for line in result.err_lines]
    listening = [entry for entry in logs if entry["msg"] == "proxy listening" and entry["logger"] == "cursor_byok.cli"]
    assert listening and listening[0]["proxy_url"] == f"http://127.0.0.1:{proxy_port}"
    assert any(entry["msg"].startswith("created a local CA") for entry in logs)


def test_proxy_enabled_in_config_and_port_flag(run_cli, write_config, stand_in):
    proxy_port = free_port()
    path = write_config("", proxy_port=1)
    path.write_text(path.read_text().replace("[proxy]\n", "[proxy]\nenabled = true\n"))
    result = run_cli("serve", "--proxy-port", str(proxy_port), "--config", str(path))
    assert result.code == 0, result.err
    assert stand_in.configs[0].proxy.port == proxy_port
    assert [r.status_code for r in stand_in.responses] == [200]


def test_busy_proxy_port_is_one_error_line_and_no_server(run_cli, write_config, stand_in):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        path = write_config(proxy_port=port)
        result = run_cli("serve", "--proxy", "--config", str(path), "--log-level", "error")
    assert result.code == 1
    assert result.err_lines == [line for line in result.err_lines if line.startswith("cursor-byok: proxy cannot listen")]
    assert len(result.err_lines) == 1
    assert stand_in.configs == []


def test_real_server_with_proxy_starts_answers_and_stops_on_sigint(write_config, tmp_path: Path):
    server_port, proxy_port = free_ports(2)
    path = write_config(server_port=server_port, proxy_port=proxy_port)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    env.pop("CURSOR_BYOK_CONFIG", None)
    child = subprocess.Popen(
        [sys.executable, "-m", "cursor_byok.cli", "serve", "--proxy", "--config", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        health = None
        while time.monotonic() < deadline and child.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{server_port}/__byok-api__/healthz", timeout=1, trust_env=False)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert health is not None and health.status_code == 204, child.stderr.read1().decode() if child.poll() is not None else "no answer"
        verify = client_context(path.parent / "data" / "ca" / "ca.crt")
        with httpx.Client(proxy=f"http://127.0.0.1:{proxy_port}", verify=verify, trust_env=False, timeout=10) as client:
            through_proxy = client.get("https://api2.cursor.sh/__byok-api__/healthz")
        assert through_proxy.status_code == 204
    finally:
        child.send_signal(signal.SIGINT)
        try:
            code = child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            raise
    assert code == 0, child.stderr.read().decode()
    assert port_is_free(server_port) and port_is_free(proxy_port)


def test_ide_gets_the_local_model_list_through_the_proxy_over_tls(write_config, tmp_path: Path):
    """The IDE's path end to end: TLS for api2.cursor.sh through our proxy (the client trusts only our
    CA), terminated locally, answered by the real gateway with the configured models."""
    from cursor_byok.protocol import side_pb2

    server_port, proxy_port = free_ports(2)
    models = (
        '[upstream]\nbase_url = "http://127.0.0.1:9"\n\n'
        '[[models]]\nid = "byok-local"\nprovider = "openai-chat"\nmodel = "m"\n'
        'base_url = "http://127.0.0.1:9/v1"\napi_key_env = "CURSOR_BYOK_TEST_KEY"\ndisplay_name = "My Local Model"\n'
    )
    path = write_config(models, server_port=server_port, proxy_port=proxy_port)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "CURSOR_BYOK_TEST_KEY": "k"}
    env.pop("CURSOR_BYOK_CONFIG", None)
    child = subprocess.Popen(
        [sys.executable, "-m", "cursor_byok.cli", "serve", "--proxy", "--config", str(path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and child.poll() is None:
            try:
                httpx.get(f"http://127.0.0.1:{server_port}/__byok-api__/healthz", timeout=1, trust_env=False)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        verify = client_context(path.parent / "data" / "ca" / "ca.crt")
        with httpx.Client(proxy=f"http://127.0.0.1:{proxy_port}", verify=verify, trust_env=False, timeout=15) as client:
            resp = client.post(
                "https://api2.cursor.sh/aiserver.v1.AiService/AvailableModels",
                content=b"",
                headers={"content-type": "application/proto", "authorization": "Bearer user-token"},
            )
    finally:
        child.send_signal(signal.SIGINT)
        child.wait(timeout=30)
    assert resp.status_code == 200
    models_reply = side_pb2.AvailableModelsResponse.FromString(resp.content)
    assert "byok-local" in models_reply.model_names
    local = [m for m in models_reply.models if m.name == "byok-local"][0]
    assert local.client_display_name == "My Local Model" and local.supports_agent


def test_serve_prints_a_start_summary(run_cli, write_config, stand_in, monkeypatch, tmp_path: Path):
    monkeypatch.setenv("SUMMARY_KEY_PRESENT", "sk-summary-secret-1234")
    monkeypatch.delenv("SUMMARY_KEY_MISSING", raising=False)
    server_port = free_port()
    models = (
        '[[models]]\nid = "byok-a"\nprovider = "anthropic"\nmodel = "claude-x"\nbase_url = "http://127.0.0.1:9"\n'
        'api_key_env = "SUMMARY_KEY_PRESENT"\n\n'
        '[[models]]\nid = "byok-b"\nprovider = "openai-chat"\nmodel = "gpt-y"\napi_key_env = "SUMMARY_KEY_MISSING"\n'
    )
    path = write_config(models, server_port=server_port)
    command = Path(sys.executable).with_name("cursor-byok")
    monkeypatch.setenv("PATH", f"{command.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    result = run_cli("serve", "--config", str(path))
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        f"cursor-byok {cursor_byok.__version__} serving on http://127.0.0.1:{server_port}",
        f"  dashboard: http://127.0.0.1:{server_port}/ui/  metrics: http://127.0.0.1:{server_port}/metrics",
        f"  command: cursor-byok (on PATH: {command})",
        f"  data dir: {tmp_path / 'data'}",
        "  model byok-a: anthropic claude-x at http://127.0.0.1:9, key $SUMMARY_KEY_PRESENT present",
        "  model byok-b: openai-chat gpt-y, key MISSING (export SUMMARY_KEY_MISSING=<your key> in the shell that runs the server)",
        "  proxy: off (Cursor's agent reaches this server only through it: `cursor-byok serve --proxy`)",
        "  upstream: https://api2.cursor.sh",
        "  next: set the missing key (above) and restart; then `cursor-byok doctor`",
    ]
    assert "sk-summary-secret-1234" not in result.out + result.err


def test_serve_starts_the_proxy_when_cursor_is_pointed_at_it(run_cli, write_config, stand_in, monkeypatch, tmp_path: Path):
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "")  # restored after the test: serve sets some of them
        monkeypatch.delenv(name)
    proxy_port = free_port()
    path = write_config(proxy_port=proxy_port)
    settings = tmp_path / "User" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"http.proxy": "http://corp.example:3128"}')
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    run_cli("ca", "init", "--config", str(path))
    run_cli("cursor", "enable", "--settings", str(settings), "--config", str(path))
    # even with [proxy] switched off again by hand, Cursor's settings decide
    path.write_text(path.read_text().replace("enabled = true", "enabled = false"))
    result = run_cli("serve", "--config", str(path))
    assert result.code == 0, result.err
    [cfg] = stand_in.configs
    assert cfg.proxy.enabled
    out = result.out.splitlines()
    assert f"  proxy: on at http://127.0.0.1:{proxy_port} (intercepts *.cursor.sh only; other hosts via http://corp.example:3128)" in out
    assert "  upstream: https://api2.cursor.sh via http://corp.example:3128" in out
    assert out[-1] == "  next: `cursor-byok doctor` checks the whole chain; restart Cursor fully to pick your models"
    assert os.environ["HTTPS_PROXY"] == "http://corp.example:3128"
    assert "127.0.0.1" in os.environ["NO_PROXY"].split(",")
    # an explicit --no-proxy still wins
    stand_in.configs.clear()
    assert run_cli("serve", "--no-proxy", "--config", str(path)).code == 0
    assert stand_in.configs[0].proxy.enabled is False


def test_only_a_standing_enable_of_this_data_dir_starts_the_proxy(run_cli, write_config, stand_in, isolated_home: Path):
    proxy_port = free_port()
    path = write_config(proxy_port=proxy_port)
    default_settings = isolated_home / ".config" / "Cursor" / "User" / "settings.json"
    default_settings.parent.mkdir(parents=True)
    default_settings.write_text(json.dumps({"http.proxy": f"http://127.0.0.1:{proxy_port}"}))  # set by hand, or for another server
    result = run_cli("serve", "--config", str(path))
    assert result.code == 0, result.err
    assert stand_in.configs[0].proxy.enabled is False
    assert "  proxy: off" in result.out.splitlines()[-3]
