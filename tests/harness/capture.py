"""Capture and replay for tests: record what a client does against a running `ServerProcess`
(through the `cursor-byok capture` command, as a user does), replay captures against a server
(`cursor-byok replay`), and a middle process that drops one kind of server frame (a changed
server the replay's diff must catch).

To turn any end-to-end suite into a capture source (e.g. the `@cursor/sdk` interop suite): wrap
the part that drives the client in `async with capturing(server) as captured:`, then copy
`captured.files` into `tests/fixtures/captures/<name>/` beside a `provider.json` holding the fake
provider's replies for that session (see `tests/capture/test_fixtures.py`).
"""
from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from cursor_byok import hotpath
from cursor_byok.protocol import agent_pb2 as pb

from .server import ServerProcess


@dataclass
class Captured:
    """The capture files a `capturing` block produced (filled in when the block ends)."""

    files: list[Path] = field(default_factory=list)


def capture_root(server: ServerProcess) -> Path:
    return Path(server.settings().data_path) / "captures"


def capture_files(server: ServerProcess) -> list[Path]:
    """Every capture file under the server's data dir, in the order they were written."""
    root = capture_root(server)
    return sorted(root.glob("*/*.json")) if root.exists() else []


def _cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    done = server.run_to_exit(*args)
    assert done.returncode == 0, f"{args}: {done.stdout}{done.stderr}"
    return done


@contextlib.asynccontextmanager
async def capturing(server: ServerProcess, *, with_content: bool = False) -> AsyncIterator[Captured]:
    """Capture on for the block's duration (`cursor-byok capture start`, then `stop`, which returns
    once every stream of the block is written)."""
    before = set(capture_files(server))
    _cli(server, "capture", "start", *(["--with-content"] if with_content else []))
    captured = Captured()
    try:
        yield captured
    finally:
        _cli(server, "capture", "stop")
        captured.files = [f for f in capture_files(server) if f not in before]


def replay(files: list[Path], url: str, *extra: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """`cursor-byok replay FILE... --against URL`, run to its end."""
    exe = Path(sys.executable).with_name("cursor-byok")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "cursor_byok.cli"]
    return subprocess.run([*cmd, "replay", *map(str, files), "--against", url, *extra], capture_output=True, text=True, timeout=timeout)


class DroppingProxy:
    """An HTTP middle process between a client and the server that passes everything through but
    drops, from the RunSSE streams, every server message of one kind (a top-level or an
    interaction-update member name, e.g. `turn_ended`): a server changed in one way only."""

    def __init__(self, target: str, drop: str) -> None:
        self.target = target.rstrip("/")
        self.drop = drop
        self.dropped = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the response ends with the connection: no chunking to redo

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
                with httpx.Client(timeout=60.0) as client, client.stream("POST", proxy.target + self.path, content=body, headers=headers) as resp:
                    self.send_response(resp.status_code)
                    for name, value in resp.headers.items():
                        if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                            self.send_header(name, value)
                    self.end_headers()
                    streaming = self.path.endswith("/RunSSE")
                    decoder = hotpath.FrameDecoder()
                    for chunk in resp.iter_raw():
                        if streaming:
                            chunk = proxy._filter(decoder, chunk)
                        self.wfile.write(chunk)
                        self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _filter(self, decoder: hotpath.FrameDecoder, chunk: bytes) -> bytes:
        out = bytearray()
        for flags, payload in decoder.feed(chunk):
            if not flags & hotpath.FLAG_END_STREAM:
                msg = pb.AgentServerMessage.FromString(payload)
                kind = msg.WhichOneof("message")
                inner = msg.interaction_update.WhichOneof("message") if kind == "interaction_update" else None
                if self.drop in (kind, inner):
                    self.dropped += 1
                    continue
            out += hotpath.encode_frame(payload, flags)
        return bytes(out)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> DroppingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
