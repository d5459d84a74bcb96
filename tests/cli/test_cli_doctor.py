"""`doctor`: one line per check, exit 0 only when every required check passes."""
from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cursor_byok import hotpath
from cursor_byok.cursor_settings import jsonc

from tests.harness.server import free_port

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


def fixes_by_name(out: str) -> dict[str, str]:
    """The `fix:` line printed under each failed or warned check."""
    fixes, last = {}, None
    for line in out.splitlines():
        if line.startswith("      fix: ") and last:
            fixes[last] = line.removeprefix("      fix: ")
        elif not line.startswith(" "):
            last = line.partition(" ")[2].strip().partition(": ")[0] or None
    return fixes


def test_ports_in_use_are_told_apart(run_cli, write_config, http_server, tmp_path: Path):
    proxy_port, _ = http_server(health_path="/__byok-proxy__/healthz")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        server_port = busy.getsockname()[1]
        path = write_config(server_port=server_port, proxy_port=proxy_port)
        result = run_cli("doctor", "--settings", str(tmp_path / "s.json"), "--config", str(path))
    checks = lines_by_name(result.out)
    status, detail = checks["server port"]
    assert status == "FAIL" and detail.startswith(f"127.0.0.1:{server_port} in use by PID {os.getpid()} (")  # this test holds it
    assert fixes_by_name(result.out)["server port"] == f"stop the program listening on 127.0.0.1:{server_port}, or set another [server] port"
    assert checks["proxy port"] == ("ok", f"127.0.0.1:{proxy_port} in use by a running cursor-byok proxy")
    assert result.code == 1 and result.out.splitlines()[-1] == "1 check(s) failed"


def test_a_proxy_port_held_by_another_program_fails(run_cli, write_config, http_server, tmp_path: Path):
    other_port, _ = http_server()  # answers, but not as our proxy
    path = write_config(proxy_port=other_port)
    result = run_cli("doctor", "--settings", str(tmp_path / "s.json"), "--config", str(path))
    status, detail = lines_by_name(result.out)["proxy port"]
    assert status == "FAIL" and detail.startswith(f"127.0.0.1:{other_port} in use by PID {os.getpid()} (")
    assert "set another [proxy] port" in fixes_by_name(result.out)["proxy port"]
    assert result.code == 1


def test_cursor_pointed_at_a_proxy_that_is_not_running_or_not_ours_fails(run_cli, write_config, http_server, tmp_path: Path):
    ours_port, _ = http_server(health_path="/__byok-proxy__/healthz")
    path = write_config(proxy_port=free_port())
    settings = tmp_path / "User" / "settings.json"
    settings.parent.mkdir()
    run_cli("ca", "init", "--config", str(path))
    assert run_cli("cursor", "enable", "--settings", str(settings), "--config", str(path)).code == 0
    proxy = jsonc.loads(settings.read_text())["http.proxy"]

    result = run_cli("doctor", "--config", str(path))  # finds the settings file enable edited
    checks, fixes = lines_by_name(result.out), fixes_by_name(result.out)
    assert checks["cursor settings"] == ("ok", f"proxy keys set in {settings} (HTTP/1.1, RunSSE + BidiAppend)")
    assert checks["cursor proxy"] == ("FAIL", f"Cursor's settings point at {proxy} but nothing listens there: Cursor has no network at all")
    assert fixes["cursor proxy"] == "cursor-byok serve (with [proxy] enabled = true, or --proxy); or `cursor-byok cursor disable`"
    # the CA exists but this machine does not trust it, while Cursor is pointed at the proxy
    status, detail = checks["local CA"]
    assert status == "FAIL" and detail.startswith("present-untrusted") and "will reject every *.cursor.sh certificate" in detail
    assert fixes["local CA"] == "cursor-byok ca install --run"
    assert result.code == 1 and "all required checks passed" not in result.out

    # a program that is not our proxy on that port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", int(proxy.rpartition(":")[2])))
        squatter.listen()
        result = run_cli("doctor", "--config", str(path))
    assert lines_by_name(result.out)["cursor proxy"] == (
        "FAIL", f"Cursor's settings point at {proxy}, where a program that is not cursor-byok's proxy listens"
    )

    # our proxy answering there
    path.write_text(path.read_text().replace(f"port = {proxy.rpartition(':')[2]}", f"port = {ours_port}"))
    run_cli("cursor", "enable", "--settings", str(settings), "--config", str(path))
    checks = lines_by_name(run_cli("doctor", "--config", str(path)).out)
    assert checks["cursor proxy"] == ("ok", f"Cursor's proxy http://127.0.0.1:{ours_port} is a running cursor-byok proxy")


def chain_after_enable(run_cli, write_config, tmp_path: Path, previous_proxy: str) -> tuple[str, str, Path]:
    """Enable over a settings file whose http.proxy was `previous_proxy`: doctor's chain line."""
    path = write_config(proxy_port=free_port())
    settings = tmp_path / "User" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(f'{{"http.proxy": "{previous_proxy}"}}')
    run_cli("cursor", "enable", "--force", "--settings", str(settings), "--config", str(path))
    status, detail = lines_by_name(run_cli("doctor", "--config", str(path)).out)["proxy chain"]
    return status, detail, settings


def test_doctor_shows_the_proxy_chain(run_cli, write_config, tmp_path: Path, monkeypatch):
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    status, detail, settings = chain_after_enable(run_cli, write_config, tmp_path, "http://user:pw@corp-proxy:3128")
    port = jsonc.loads(settings.read_text())["http.proxy"].rpartition(":")[2]
    assert status == "info"
    assert detail == (
        f"Cursor -> http://127.0.0.1:{port} (cursor-byok: *.cursor.sh answered locally) -> http://***@corp-proxy:3128 "
        "for every other host; the server's own requests via http://***@corp-proxy:3128"
    )


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


def test_a_previous_proxy_that_cannot_be_chained_is_named_not_used(run_cli, write_config, tmp_path: Path, caplog):
    _, detail, _ = chain_after_enable(run_cli, write_config, tmp_path, "socks5://corp:1080")
    assert "-> every other host directly" in detail
    assert "socks5://corp:1080 is not an http:// proxy and is not chained" in caplog.text


def test_the_data_dir_lock_holder_is_shown_and_a_stale_file_is_fine(run_cli, write_config, tmp_path: Path):
    import os

    from cursor_byok.instance import LOCK_FILE_NAME, DataDirLock

    path = write_config()
    data_dir = tmp_path / "data"
    result = run_cli("doctor", "--settings", str(tmp_path / "none.json"), "--config", str(path))
    assert lines_by_name(result.out)["data dir"] == ("info", f"{data_dir} does not exist yet (created on first start)")

    data_dir.mkdir()
    # What a killed server leaves behind: a record nobody holds the lock for.
    (data_dir / LOCK_FILE_NAME).write_text('{"pid": 999999, "command": "serve", "address": "127.0.0.1:8787"}\n')
    result = run_cli("doctor", "--settings", str(tmp_path / "none.json"), "--config", str(path))
    checks = lines_by_name(result.out)
    assert checks["data dir lock"] == ("ok", "free: no server is using this data dir")
    assert checks["data dir"][0] == "ok" and "writable" in checks["data dir"][1]
    assert result.code == 0, result.out

    with DataDirLock.acquire(data_dir) as lock:  # what a running server holds
        lock.record(address="127.0.0.1:8787")
        result = run_cli("doctor", "--settings", str(tmp_path / "none.json"), "--config", str(path))
    status, detail = lines_by_name(result.out)["data dir lock"]
    assert status == "ok" and detail.startswith(f"held by cursor-byok serve (PID {os.getpid()}, listening on 127.0.0.1:8787, since ")


def test_an_open_data_dir_is_a_warning_with_the_chmod_to_run(run_cli, write_config, tmp_path: Path):
    path = write_config()
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    (data / "state.db").write_bytes(b"")
    (data / "state.db").chmod(0o644)
    result = run_cli("doctor", "--settings", str(tmp_path / "s.json"), "--config", str(path))
    lines = [line for line in result.out.splitlines() if "data dir permissions:" in line]
    assert lines == [
        f"warn  data dir permissions: {data} is drwxr-xr-x (readable by other users): run `chmod 700 {data}`",
        f"warn  data dir permissions: {data / 'state.db'} is -rw-r--r-- (readable by other users): run `chmod 600 {data / 'state.db'}`",
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


def test_a_team_server_says_every_request_needs_a_developers_token(run_cli, write_config, tmp_path: Path):
    path = write_config(top="")
    path.write_text(path.read_text() + "\n[team]\nenabled = true\n")
    result = run_cli("doctor", "--settings", str(tmp_path / "s.json"), "--config", str(path))
    [line] = [line for line in result.out.splitlines() if "team:" in line]
    assert line.startswith("ok    team: team server: every request but health needs a developer's token")
    assert "any developer's token opens the dashboard" in line
    assert "auth token:" not in result.out  # not "every local user can use the server"
