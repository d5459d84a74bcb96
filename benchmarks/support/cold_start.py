"""One cold start, timed from spawn to the first answered health check, then the server is killed.

    python -m benchmarks.support.cold_start ours    # `cursor-byok serve`, one model configured
    python -m benchmarks.support.cold_start floor   # the bare granian + aiohttp + uvloop app
    python -m benchmarks.support.cold_start ours turn   # also: a first turn, to its first token
    python -m benchmarks.support.cold_start ours turns  # the first two turns once it is ready

Prints the milliseconds from spawning the server to its health check answering 204, and the CPU
(user + system) its processes had used by then. The server is killed (SIGKILL) and reaped once it
has answered, so a whole-process timer run around this command (`/usr/bin/time -v`) counts its CPU
and memory up to its first answer and nothing after (but not a worker process's: the floor's
granian forks one, which only the printed CPU figure includes). `benchmarks/test_cold_start.py`
runs rounds of these.

With a turn (`first_token`): a local fake provider (openai-chat, one text delta) and a scripted IDE
made before the spawn; the IDE sends its turn as soon as the health check has answered, and the
time is taken when the first text delta reaches it. Ours also answers the health check while it is
still loading (marked `x-cursor-byok-starting`); "ready" is its first answer without that mark.
"""
from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.test_gateway import cpu_seconds
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, run_request

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


# Ours answers the health probe while it loads (marked as starting); the floor's granian holds a
# probe in its listener's backlog until its worker is up and answers it once. Polling ours for an
# unmarked answer would have it answer every poll while it loads (each taking the interpreter lock
# from its import): instead, once it has answered marked, one request to a path it holds until its
# gateway is up (the dashboard's redirect), then a probe. Each side: one request waits, none answered early.
STARTING_MARK = b"x-cursor-byok-starting"
HELD_PATH = "/ui"


def answer_head(port: int, path: str, timeout: float = 0.5) -> bytes:
    """The head of the server's answer to `GET path` (b"" when it did not answer within `timeout`)."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nhost: {HOST}:{port}\r\nconnection: close\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head and (chunk := s.recv(4096)):
                head += chunk
            return head
    except OSError:
        return b""


def answered(port: int, path: str, *, ready: bool = False) -> bool:
    """The health check answered 204 (`ready`: and not marked as still starting; a marked answer is
    followed by one request held until the gateway is up, and the probe again)."""
    head = answer_head(port, path)
    if ready and STARTING_MARK in head.lower():
        answer_head(port, HELD_PATH, timeout=60)
        head = answer_head(port, path)
    return head.split(b" ", 2)[1:2] in ([b"200"], [b"204"]) and not (ready and STARTING_MARK in head.lower())


def command(which: str, port: int, workdir: Path, provider: str = f"http://{HOST}:9") -> tuple[list[str], str]:
    """The server's command line and its health path (`provider`: the model provider's base URL)."""
    if which == "floor":
        app = "benchmarks.support.bare_turn_app:app"
        return [sys.executable, "-m", "granian", "--interface", "asgi", "--loop", "uvloop", "--host", HOST,
                "--port", str(port), "--workers", "1", "--no-ws", app], "/healthz"
    config = workdir / "config.toml"
    config.write_text(CONFIG.format(host=HOST, port=port, data=workdir / "data").replace(f"http://{HOST}:9/v1", provider + "/v1"))
    exe = Path(sys.executable).with_name("cursor-byok")
    return [str(exe), "serve", "--config", str(config)], "/__byok-api__/healthz"


@dataclass
class Start:
    """Seconds from spawn, and the server's CPU seconds, at each point of one cold start."""

    health: float  # the first 204 from the health check
    health_cpu: float
    ready: float = math.nan  # the first 204 not marked as still starting (without a turn)
    ready_cpu: float = math.nan
    first_token: float = math.nan  # the first text delta of a turn sent right after `health`
    first_token_cpu: float = math.nan
    turn_after_ready: float = math.nan  # append → first token of the first turn, sent once ready
    second_turn: float = math.nan  # the same for the turn after it


@contextlib.contextmanager
def spawned(which: str, provider: str = f"http://{HOST}:9") -> Iterator[tuple[subprocess.Popen[bytes], int, str, float]]:
    """The server started (process, port, health path, monotonic start), killed and reaped after."""
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        cmd, health = command(which, port, Path(tmp), provider)
        # PYTHONPATH=<other tree>/src runs `serve` from another source tree (a before/after pair)
        path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
        env = {**os.environ, "PYTHONPATH": path, "CURSOR_BYOK_TEST_KEY": "sk-bench", "BENCH_PROVIDER_URL": provider + "/v1"}
        started = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            yield proc, port, health, started
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_answered(proc: subprocess.Popen[bytes], port: int, path: str, started: float, *, ready: bool = False) -> float:
    """Seconds from `started` to the health check's first answer, or to its first answer not marked
    as starting (`ready`; see `answered`); polled every 1 ms until it answers."""
    while not answered(port, path, ready=ready):
        if proc.poll() is not None or time.monotonic() > started + 60:
            raise SystemExit(f"the server did not come up (exit status {proc.poll()})")
        time.sleep(0.001)
    return time.monotonic() - started


def cold_start(which: str) -> Start:
    """Spawn to the first answered health check (with the server's CPU by then), and to ready."""
    with spawned(which) as (proc, port, health, started):
        start = Start(wait_answered(proc, port, health, started), cpu_seconds(proc.pid))
        start.ready = wait_answered(proc, port, health, started, ready=True)
        start.ready_cpu = cpu_seconds(proc.pid)
        return start


async def turn(ide: ScriptedIDE, which: str) -> float:
    """One turn (a new conversation) from the IDE's append to its first text delta, in seconds;
    the stream is then let go."""
    log = StreamLog()
    request_id = uuid.uuid4().hex
    sent = time.monotonic()
    reader = asyncio.create_task(ide.stream(request_id, log))
    await ide.append(request_id, run_request("hello", model="fast", conversation_id=uuid.uuid4().hex))
    while not log.text:
        if reader.done():
            raise SystemExit(f"{which}: the turn ended without text: {log.terminal}")
        await asyncio.sleep(0.001)
    token = time.monotonic() - sent
    reader.cancel()
    return token


async def first_token(which: str, provider: FakeProviderServer) -> Start:
    """Spawn to the first answered health check, then at once a turn, to its first text delta."""
    provider.enqueue(OPENAI_CHAT.text(["first"]))
    with spawned(which, provider.url) as (proc, port, health, started):
        ide = ScriptedIDE(f"http://{HOST}:{port}")  # made before the clock matters: its TLS context
        try:
            start = Start(wait_answered(proc, port, health, started), cpu_seconds(proc.pid))
            start.first_token = start.health + await turn(ide, which)
            start.first_token_cpu = cpu_seconds(proc.pid)
            return start
        finally:
            await ide.close()


async def turns_after_ready(which: str, provider: FakeProviderServer, pause: float = 0.5) -> list[float]:
    """A started server's first two turns, sent `pause` seconds after it is ready (as an IDE comes
    a moment after the server): seconds from each one's append to its first text delta."""
    with spawned(which, provider.url) as (proc, port, health, started):
        ide = ScriptedIDE(f"http://{HOST}:{port}")
        try:
            wait_answered(proc, port, health, started, ready=True)
            await asyncio.sleep(pause)
            times = []
            for answer in ("first", "second"):
                provider.enqueue(OPENAI_CHAT.text([answer]))
                times.append(await turn(ide, which))
            return times
        finally:
            await ide.close()


if __name__ == "__main__":
    if sys.argv[2:] == ["turn"]:
        with FakeProviderServer() as fake:
            print(asyncio.run(first_token(sys.argv[1], fake)))
    elif sys.argv[2:] == ["turns"]:
        with FakeProviderServer() as fake:
            print(asyncio.run(turns_after_ready(sys.argv[1], fake)))
    else:
        print(cold_start(sys.argv[1]))
