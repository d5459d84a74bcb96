"""Helpers for the edge tests: server configs with a proxy or a data dir elsewhere, raw HTTP on a
socket (for what httpx will not send), and the server's memory."""
from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.fakes import OPENAI_CHAT, FakeProviderServer, Reply
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

PROTO = {"content-type": "application/proto"}
CORS_PREFIX = "access-control-"
STAND_IN_MARK = "x-stand-in"  # answers of the upstream stand-in carry this header


@dataclass
class EdgeServerConfig(ServerConfig):
    """The harness config plus an optional [proxy] section and a data dir other than the folder
    the harness keeps its config file and log in."""

    proxy_port: int | None = None
    real_data_dir: Path | None = None
    extra_lines: list[str] = field(default_factory=list)

    def toml(self, port: int) -> str:
        text = super().toml(port)
        if self.real_data_dir is not None:
            text = text.replace(f'data_dir = "{self.data_dir}"', f'data_dir = "{self.real_data_dir}"')
        if self.proxy_port is not None:
            text += f"\n[proxy]\nenabled = true\nport = {self.proxy_port}\n"
        return text + "\n".join(self.extra_lines)


@contextlib.contextmanager
def provider_and_upstream(upstream_reply: Reply | None = None) -> Iterator[tuple[FakeProviderServer, FakeProviderServer]]:
    """A model provider that answers every turn with "fine", and an upstream stand-in."""
    reply = upstream_reply or Reply(status=404, body=b"{}", content_type="application/json", headers={STAND_IN_MARK: "1"})
    with FakeProviderServer() as provider, FakeProviderServer() as upstream:
        provider.respond_with(lambda request: OPENAI_CHAT.text(["fine"]))
        upstream.respond_with(lambda request: reply)
        yield provider, upstream


def edge_config(root: Path, model: str, provider: FakeProviderServer, upstream: FakeProviderServer | None = None, **kw: object) -> EdgeServerConfig:
    """One local model on `provider`, everything else to `upstream` (nothing listens when None)."""
    if upstream is not None:
        kw["upstream"] = upstream.url
    return EdgeServerConfig(data_dir=root / "data", models=[ModelSpec(id=model, provider="openai-chat", base_url=provider.url + "/v1")], **kw)  # type: ignore[arg-type]


class LoopbackServer:
    """An asyncio server on a free loopback port while in `async with`; `_on_connection` answers."""

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> LoopbackServer:
        self._server = await asyncio.start_server(self._on_connection, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


def assert_no_cors(response: httpx.Response) -> None:
    leaked = [k for k in response.headers if k.lower().startswith(CORS_PREFIX)]
    assert not leaked, leaked


@dataclass
class RawResponse:
    status: int
    head: str
    body: bytes
    closed: bool  # the server closed the connection after answering


def raw_http(port: int, data: bytes, *, timeout: float = 5.0, close_wait: float = 1.0) -> RawResponse:
    """Send bytes as they are on a fresh connection; read one response (Content-Length framed), then
    up to `close_wait` seconds for the server to close the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed before a response: {buf!r}")
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length = next((int(line.split(":", 1)[1]) for line in lines[1:] if line.lower().startswith("content-length:")), 0)
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        # Closed: the server ends the connection (FIN, or RST) instead of waiting for another request.
        sock.settimeout(close_wait)
        try:
            closed = sock.recv(1) == b""
        except ConnectionResetError:
            closed = True
        except TimeoutError:
            closed = False
        return RawResponse(status, head.decode("latin-1"), rest[:length], closed)


def server_processes(server: ServerProcess) -> list[int]:
    """The server's process and its children (granian runs the app in a worker)."""
    assert server.proc is not None
    root = server.proc.pid
    pids = [root]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == root:
            pids.append(int(entry))
    return pids


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def server_rss(server: ServerProcess) -> int:
    """Resident memory of the whole server (main process and worker)."""
    return sum(rss_bytes(pid) for pid in server_processes(server))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
