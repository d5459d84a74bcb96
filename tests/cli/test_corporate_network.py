"""Behind a corporate proxy: `cursor enable` takes Cursor's http.proxy, and the real server keeps it
in the path (a fake corporate proxy on loopback stands in for it)."""
from __future__ import annotations

import os
import signal
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fakes import FakeCorporateProxy
from tests.harness.server import free_ports


class _Reverse(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data[::-1])


@pytest.fixture
def remote_host() -> Iterator[int]:
    """A host on the far side of the corporate proxy (it answers with the bytes reversed)."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Reverse)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def wait_healthy(url: str, child: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and child.poll() is None:
        try:
            if httpx.get(url, timeout=1, trust_env=False).status_code == 204:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"server did not start: {child.stderr.read().decode() if child.poll() is not None else 'no answer'}")


def test_cursor_keeps_the_corporate_proxy_for_every_host_we_do_not_serve(run_cli, write_config, remote_host: int, tmp_path: Path):
    with FakeCorporateProxy(route=lambda host, port: ("127.0.0.1", remote_host)) as corp:
        settings = tmp_path / "Cursor" / "User" / "settings.json"
        settings.parent.mkdir(parents=True)
        original = f'{{\n    // set by IT\n    "http.proxy": "{corp.url}",\n    "editor.fontSize": 12\n}}\n'
        settings.write_text(original)
        server_port, proxy_port = free_ports(2)
        path = write_config('[upstream]\nbase_url = "http://upstream.example"\n', server_port=server_port, proxy_port=proxy_port)
        assert run_cli("ca", "init", "--config", str(path)).code == 0
        enabled = run_cli("cursor", "enable", "--settings", str(settings), "--config", str(path))
        assert enabled.code == 0, enabled.err

        env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "no_proxy", "all_proxy", "cursor_byok_config")}
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
        child = subprocess.Popen(
            [sys.executable, "-m", "cursor_byok.cli", "serve", "--config", str(path)],  # no --proxy: enable turned it on
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )
        try:
            wait_healthy(f"http://127.0.0.1:{server_port}/__byok-api__/healthz", child)
            # 1. a tunnel to a host we do not intercept goes through the corporate proxy
            with socket.create_connection(("127.0.0.1", proxy_port), timeout=10) as tunnel:
                tunnel.sendall(b"CONNECT origin.example:443 HTTP/1.1\r\nHost: origin.example:443\r\n\r\n")
                status = tunnel.recv(4096)
                tunnel.sendall(b"hello")
                echoed = tunnel.recv(5)
            # 2. a *.cursor.sh request is intercepted and answered by our server
            verify = ssl.create_default_context(cafile=str(path.parent / "data" / "ca" / "ca.crt"))
            with httpx.Client(proxy=f"http://127.0.0.1:{proxy_port}", verify=verify, trust_env=False, timeout=15) as client:
                intercepted = client.get("https://api2.cursor.sh/__byok-api__/healthz")
            # 3. the server's own requests (here: to Cursor's upstream) go through it too
            relayed = httpx.post(
                f"http://127.0.0.1:{server_port}/aiserver.v1.AiService/Anything",
                content=b"x",
                headers={"content-type": "application/proto"},
                timeout=15,
                trust_env=False,
            )
        finally:
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                raise
        summary = child.stdout.read().decode()

    assert status.startswith(b"HTTP/1.1 200") and echoed == b"olleh"
    assert corp.connects == ["origin.example:443"]  # api2.cursor.sh never reached it
    assert intercepted.status_code == 204
    assert relayed.text == "via corporate proxy"
    assert corp.requests[0].startswith(b"POST http://upstream.example/aiserver.v1.AiService/Anything HTTP/1.1\r\n")
    assert f"  proxy: on at http://127.0.0.1:{proxy_port} (intercepts *.cursor.sh only; other hosts via {corp.url})" in summary.splitlines()

    # disable puts the corporate value back, byte for byte
    disabled = run_cli("cursor", "disable", "--config", str(path))
    assert disabled.code == 0, disabled.err
    assert settings.read_text() == original
