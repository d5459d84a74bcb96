"""Fixtures: a stand-in Cursor upstream (a real HTTP server on 127.0.0.1) and configs."""
from __future__ import annotations

import io
import socket
from collections.abc import Iterator
from typing import IO
from typing import Any

import pytest

from cursor_byok.config import Config, parse
from tests.fakes import FakeProviderServer

SECRET = "sk-real-provider-secret-never-sent"
SECRET_ENV = "CURSOR_BYOK_TEST_SIDE_SECRET"

MODELS: list[dict[str, Any]] = [
    {
        "id": "byok-gpt",
        "provider": "openai-responses",
        "model": "gpt-test",
        "display_name": "BYOK GPT",
        "api_key_env": SECRET_ENV,
        "efforts": ["low", "medium", "high"],
        "default_effort": "medium",
        "context_window": 400_000,
    },
    {"id": "byok-claude", "provider": "anthropic", "model": "claude-test", "supports_images": False},
]


def dead_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_config(upstream_url: str, models: list[dict[str, Any]] | None = None) -> Config:
    return parse({"upstream": {"base_url": upstream_url}, "models": MODELS if models is None else models})


def _read_chunked(rfile: IO[bytes]) -> bytes:
    body = bytearray()
    while True:
        size = int(rfile.readline().split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return bytes(body)
        body += rfile.read(size)
        rfile.readline()


class StandInUpstream(FakeProviderServer):
    """The recording fake server, also accepting chunked request bodies (Upstream.forward streams a
    body it has not read chunked when the client sent no Content-Length; real servers accept that)."""

    def __init__(self) -> None:
        super().__init__()
        base = self._httpd.RequestHandlerClass

        class ChunkedAware(base):  # type: ignore[misc,valid-type]
            def _serve(self) -> None:
                if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
                    body = _read_chunked(self.rfile)
                    del self.headers["transfer-encoding"]
                    self.headers["content-length"] = str(len(body))
                    self.rfile = io.BytesIO(body)
                super()._serve()

        self._httpd.RequestHandlerClass = ChunkedAware


@pytest.fixture
def upstream_server() -> Iterator[FakeProviderServer]:
    with StandInUpstream() as server:
        yield server


@pytest.fixture(autouse=True)
def _provider_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real key exists in the environment: the replies must still never carry it.
    monkeypatch.setenv(SECRET_ENV, SECRET)
