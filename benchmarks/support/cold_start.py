"""One cold start, timed from spawn to the first answered health check, then the server is killed.

    python -m benchmarks.support.cold_start ours    # `cursor-byok serve`, one model configured
    python -m benchmarks.support.cold_start floor   # the bare granian + aiohttp + uvloop app

Prints the milliseconds from spawning the server to its health check answering 204, and the CPU
(user + system) its processes had used by then. The server is killed (SIGKILL) and reaped once it
has answered, so a whole-process timer run around this command (`/usr/bin/time -v`) counts its CPU
and memory up to its first answer and nothing after (but not a worker process's: the floor's
granian forks one, which only the printed CPU figure includes). `benchmarks/test_cold_start.py`
runs rounds of these.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.test_gateway import cpu_seconds

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
CONFIG = """\
[server]
host = "{host}"
port = {port}
data_dir = "{data}"

[upstream]
base_url = "http://{host}:9"

[[models]]
id = "fast"
provider = "openai-chat"
base_url = "http://{host}:9/v1"
model = "fake-model"
api_key_env = "CURSOR_BYOK_TEST_KEY"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def answered(port: int, path: str) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nhost: {HOST}:{port}\r\nconnection: close\r\n\r\n".encode())
            return s.recv(64).split(b" ", 2)[1] == b"204"
    except (OSError, IndexError):
        return False


def command(which: str, port: int, workdir: Path) -> tuple[list[str], str]:
    """The server's command line and its health path."""
    if which == "floor":
        app = "benchmarks.support.bare_turn_app:app"
        return [sys.executable, "-m", "granian", "--interface", "asgi", "--loop", "uvloop", "--host", HOST,
                "--port", str(port), "--workers", "1", "--no-ws", app], "/healthz"
    config = workdir / "config.toml"
    config.write_text(CONFIG.format(host=HOST, port=port, data=workdir / "data"))
    exe = Path(sys.executable).with_name("cursor-byok")
    return [str(exe), "serve", "--config", str(config)], "/__byok-api__/healthz"


def cold_start(which: str) -> tuple[float, float]:
    """Seconds from spawn to the first answered health check, and the server's CPU seconds by then."""
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        cmd, health = command(which, port, Path(tmp))
        # PYTHONPATH=<other tree>/src runs `serve` from another source tree (a before/after pair)
        path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
        env = {**os.environ, "PYTHONPATH": path, "CURSOR_BYOK_TEST_KEY": "sk-bench"}
        started = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            while not answered(port, health):
                if proc.poll() is not None or time.monotonic() > started + 60:
                    raise SystemExit(f"{which} did not come up (exit status {proc.poll()})")
                time.sleep(0.001)
            return time.monotonic() - started, cpu_seconds(proc.pid)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


if __name__ == "__main__":
    up, cpu = cold_start(sys.argv[1])
    print(f"{up * 1000:.0f} ms, {cpu * 1000:.0f} ms CPU")
