"""`doctor`: one line per check, exit 0 only when every required check passes."""
from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cursor_byok import hotpath

KEY = "sk-doctor-secret-value"


def model(model_id: str, base_url: str, key_env: str = "DOCTOR_TEST_KEY") -> str:
    return (
        f'[[models]]\nid = "{model_id}"\nprovider = "openai-chat"\nbase_url = "{base_url}"\n'
        f'model = "m"\napi_key_env = "{key_env}"\n'
    )


class Recorder(BaseHTTPRequestHandler):
    seen: list[dict] = []
    health_path = ""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        type(self).seen.append(dict(self.headers))
        status = 204 if self.path == self.health_path else 404
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()


@pytest.fixture
def http_server() -> Iterator[callable]:
    servers: list[ThreadingHTTPServer] = []

    def start(health_path: str = "") -> tuple[int, type[Recorder]]:
        handler = type("H", (Recorder,), {"seen": [], "health_path": health_path})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server.server_address[1], handler

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def lines_by_name(out: str) -> dict[str, tuple[str, str]]:
    result = {}
    for line in out.splitlines():
        status, _, rest = line.partition(" ")
        name, sep, detail = rest.strip().partition(": ")
        if sep:
            result[name] = (status, detail)
    return result


def test_a_healthy_setup_passes(run_cli, write_config, monkeypatch, tmp_path: Path):
    monkeypatch.setenv("DOCTOR_TEST_KEY", KEY)
    path = write_config(model("byok-a", "http://127.0.0.1:9/v1"))
    result = run_cli("doctor", "--settings", str(tmp_path / "no-settings.json"), "--config", str(path))
    assert result.code == 0, result.out
    checks = lines_by_name(result.out)
    assert checks["hot path"][0] in ("ok", "warn")
    assert checks["config"] == ("ok", str(path))
    assert checks["model byok-a"] == ("ok", "key present ($DOCTOR_TEST_KEY)")
    assert checks["local CA"][0] == "warn" and checks["local CA"][1].startswith("missing")
    assert checks["cursor settings"][0] == "info"
    assert checks["server port"][0] == checks["proxy port"][0] == "ok"
    assert result.out.splitlines()[-1] == "all required checks passed"
    assert KEY not in result.out + result.err


def test_missing_key_fails_without_leaking_anything(run_cli, write_config, monkeypatch, tmp_path: Path):
    monkeypatch.delenv("DOCTOR_TEST_KEY", raising=False)
    path = write_config(model("byok-a", "http://127.0.0.1:9/v1"))
    result = run_cli("doctor", "--settings", str(tmp_path / "s.json"), "--config", str(path))
    assert result.code == 1
    status, detail = lines_by_name(result.out)["model byok-a"]
    assert status == "FAIL" and "DOCTOR_TEST_KEY is not set" in detail


def test_check_providers_probes_base_urls_without_the_key(run_cli, write_config, monkeypatch, http_server, tmp_path: Path):
    monkeypatch.setenv("DOCTOR_TEST_KEY", KEY)
    port, handler = http_server()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    path = write_config(model("up", f"http://127.0.0.1:{port}/v1") + model("down", f"http://127.0.0.1:{closed}/v1"))
    result = run_cli("doctor", "--check-providers", "--settings", str(tmp_path / "s.json"), "--config", str(path))
    checks = lines_by_name(result.out)
    assert checks["reach up"][0] == "ok" and f"http://127.0.0.1:{port}/v1: HTTP 404 in" in checks["reach up"][1]
    assert checks["reach down"][0] == "FAIL" and "unreachable" in checks["reach down"][1]
    assert result.code == 1
    [headers] = handler.seen
    assert not any(k.lower() in ("authorization", "x-api-key") for k in headers)
    assert KEY not in str(headers)
    # without the flag nothing is contacted
    run_cli("doctor", "--settings", str(tmp_path / "s.json"), "--config", str(path))
    assert len(handler.seen) == 1


def test_ports_in_use_are_told_apart(run_cli, write_config, http_server, tmp_path: Path):
    proxy_port, _ = http_server(health_path="/__byok-proxy__/healthz")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        server_port = busy.getsockname()[1]
        path = write_config(server_port=server_port, proxy_port=proxy_port)
        result = run_cli("doctor", "--settings", str(tmp_path / "s.json"), "--config", str(path))
    checks = lines_by_name(result.out)
    assert checks["server port"] == ("warn", f"127.0.0.1:{server_port} in use by another program")
    assert checks["proxy port"] == ("ok", f"127.0.0.1:{proxy_port} in use by a running cursor-byok proxy")
    assert result.code == 0


def test_cursor_settings_and_ca_states_are_reported(run_cli, write_config, tmp_path: Path):
    path = write_config(proxy_port=18997)
    settings = tmp_path / "settings.json"
    run_cli("ca", "init", "--config", str(path))
    run_cli("cursor", "enable", "--settings", str(settings), "--config", str(path))
    checks = lines_by_name(run_cli("doctor", "--settings", str(settings), "--config", str(path)).out)
    assert checks["cursor settings"] == ("ok", f"proxy keys set in {settings}")
    assert checks["local CA"][0] in ("ok", "warn") and "missing" not in checks["local CA"][1]


def test_python_twin_fails_when_compiled_is_required(run_cli, write_config, monkeypatch, tmp_path: Path):
    path = write_config()
    monkeypatch.setitem(hotpath.compiled, "frames", None)
    monkeypatch.setenv("CURSOR_BYOK_REQUIRE_COMPILED", "1")
    result = run_cli("doctor", "--settings", str(tmp_path / "s.json"), "--config", str(path))
    status, detail = lines_by_name(result.out)["hot path"]
    assert status == "FAIL" and "frames=python" in detail and "CURSOR_BYOK_REQUIRE_COMPILED=1" in detail
    assert result.code == 1


def test_invalid_config_is_reported_and_exits_2(run_cli, write_config, tmp_path: Path):
    path = write_config("[server.nested]\nx = 1\n")
    result = run_cli("doctor", "--settings", str(tmp_path / "s.json"), "--config", str(path))
    assert result.code == 2
    assert lines_by_name(result.out)["config"][0] == "FAIL"
    assert len(result.err_lines) == 1 and result.err_lines[0].startswith(f"cursor-byok: {path}: server.nested")


def test_an_open_data_dir_is_a_warning_with_the_chmod_to_run(run_cli, write_config, tmp_path: Path):
    path = write_config()
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    (data / "state.db").write_bytes(b"")
    (data / "state.db").chmod(0o644)
    result = run_cli("doctor", "--settings", str(tmp_path / "s.json"), "--config", str(path))
    lines = [line for line in result.out.splitlines() if "data dir:" in line]
    assert lines == [
        f"warn  data dir: {data} is drwxr-xr-x (readable by other users): run `chmod 700 {data}`",
        f"warn  data dir: {data / 'state.db'} is -rw-r--r-- (readable by other users): run `chmod 600 {data / 'state.db'}`",
    ]


def test_the_auth_token_line_says_how_to_use_it(run_cli, write_config, monkeypatch, tmp_path: Path):
    path = write_config(top="")
    path.write_text(path.read_text().replace("[server]\n", '[server]\nauth_token_env = "DOCTOR_TOKEN"\n'))
    result = run_cli("doctor", "--settings", str(tmp_path / "s.json"), "--config", str(path))
    assert "FAIL  auth token:" in result.out and "DOCTOR_TOKEN is not set" in result.out
    monkeypatch.setenv("DOCTOR_TOKEN", "doctor-token-0123456789")
    result = run_cli("doctor", "--settings", str(tmp_path / "s.json"), "--config", str(path))
    [line] = [line for line in result.out.splitlines() if "auth token:" in line]
    assert line.startswith("ok    auth token: required on every request") and "/_token/<token> cursor-agent" in line
    assert "doctor-token-0123456789" not in result.out  # the token itself is never printed
