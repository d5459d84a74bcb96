"""`cursor-byok connect URL` in a subprocess: the developer's local interceptor in front of a team
server, with its own data dir (its local CA) and config (proxy port, Cursor's upstream), and the
scripted IDE's HTTP client going through it as Cursor does (HTTP/1.1 in a CONNECT tunnel, the
local CA trusted)."""
from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import time
from pathlib import Path

import httpx

from tests.harness.server import ServerProcess, free_ports

CURSOR_HOST = "https://api2.cursor.sh"


class ConnectProcess:
    def __init__(self, home: Path, upstream_url: str, *, env: dict[str, str] | None = None) -> None:
        self.home = home
        self.data_dir = home / "data"
        self.config_path = home / "config.toml"
        self.proxy_port, self._server_port = free_ports(2)
        self.upstream_url = upstream_url
        self.extra_env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = home / "connect.log"

    def write_config(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            f'[server]\ndata_dir = "{self.data_dir}"\nport = {self._server_port}\n\n'
            f'[proxy]\nport = {self.proxy_port}\n\n[upstream]\nbase_url = "{self.upstream_url}"\n'
        )

    def command(self, *args: str) -> list[str]:
        return ServerProcess.command_of(None, *args, "--config", str(self.config_path))

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.extra_env}

    def run_to_exit(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """`cursor-byok <args> --config <ours>` in the foreground (a connect that must refuse, a doctor)."""
        self.write_config()
        return subprocess.run(self.command(*args), env=self.env(), capture_output=True, text=True, timeout=timeout)

    def start(self, *args: str, timeout: float = 20.0) -> ConnectProcess:
        """`cursor-byok connect <args>`, until its proxy answers its health probe."""
        self.write_config()
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(self.command("connect", *args), env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=0.5) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"connect exited with {self.proc.returncode}:\n{self.log()}")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"http://127.0.0.1:{self.proxy_port}/__byok-proxy__/healthz").status_code == 204:
                        return self
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"connect did not start:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-8000:]
        except OSError:
            return ""

    def ide_client(self) -> httpx.AsyncClient:
        """An HTTP client as Cursor with `cursor enable`: Cursor's host, through our proxy, over HTTP/1.1."""
        ca = ssl.create_default_context(cafile=str(self.data_dir / "ca" / "ca.crt"))
        return httpx.AsyncClient(base_url=CURSOR_HOST, proxy=f"http://127.0.0.1:{self.proxy_port}", verify=ca, timeout=30.0)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self) -> ConnectProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
