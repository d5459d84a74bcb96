"""Just enough HTTP/1.1 for a forwarding proxy: request heads, body framing, hop-by-hop headers.

The proxy reads requests from the IDE (plain or inside a terminated TLS tunnel) and hands the
body on as a stream; it never needs to understand bodies, only where they end.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

# RFC 9110 §7.6.1 plus the legacy proxy ones: meaningful for one connection only.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_TOKEN_CHARS = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
MAX_CHUNK_LINE = 4096
READ_SIZE = 64 * 1024


class HttpError(Exception):
    """A request the proxy refuses; `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class RequestHead:
    method: str
    target: str
    version: str  # "HTTP/1.1" or "HTTP/1.0"
    headers: list[tuple[str, str]]  # original order and case

    def get(self, name: str) -> str | None:
        name = name.lower()
        values = [v for k, v in self.headers if k.lower() == name]
        return ", ".join(values) if values else None

    def get_all(self, name: str) -> list[str]:
        name = name.lower()
        return [v for k, v in self.headers if k.lower() == name]

    def connection_tokens(self) -> set[str]:
        return {t.strip().lower() for v in self.get_all("connection") for t in v.split(",") if t.strip()}

    @property
    def keep_alive(self) -> bool:
        tokens = self.connection_tokens()
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens

    @property
    def is_upgrade(self) -> bool:
        return self.get("upgrade") is not None and "upgrade" in self.connection_tokens()


def parse_request_head(data: bytes) -> RequestHead:
    """Parse `request-line CRLF *(field CRLF) CRLF`. Raises HttpError(400) on anything malformed."""
    try:
        text = data.decode("latin-1")
    except UnicodeDecodeError:  # latin-1 decodes every byte; kept for clarity of intent
        raise HttpError(400, "undecodable request head") from None
    lines = text.split("\r\n")
    while lines and lines[0] == "":  # RFC 9112 §2.2: ignore empty lines before the request line
        lines.pop(0)
    if not lines:
        raise HttpError(400, "empty request")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505, f"unsupported HTTP version {version[:16]!r}")
    if any(c not in _TOKEN_CHARS for c in method.encode("latin-1")):
        raise HttpError(400, "malformed method")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if line == "":
            continue
        if line[0] in " \t":
            raise HttpError(400, "obsolete header line folding")
        name, sep, value = line.partition(":")
        if not sep or not name or any(c not in _TOKEN_CHARS for c in name.encode("latin-1")):
            raise HttpError(400, "malformed header field")
        headers.append((name, value.strip(" \t")))
    return RequestHead(method, target, version, headers)


async def read_request_head(reader: asyncio.StreamReader, prefix: bytes = b"") -> bytes | None:
    """The raw head up to and including the blank line; None on a clean EOF before any byte.

    The reader's own `limit` bounds the head size (LimitOverrunError → 431).
    """
    try:
        data = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip() and not prefix.strip():
            return None
        raise HttpError(400, "connection closed inside the request head") from None
    except asyncio.LimitOverrunError:
        raise HttpError(431, "request head too large") from None
    return prefix + data


class RequestBody:
    """The request body as an async byte stream, decoded from Content-Length or chunked framing."""

    def __init__(self, reader: asyncio.StreamReader, head: RequestHead, max_bytes: int) -> None:
        self._reader = reader
        self._max = max_bytes
        self.length: int | None = None
        self.chunked = False
        self.done = False
        te = head.get("transfer-encoding")
        cl_values = head.get_all("content-length")
        if te is not None:
            if cl_values:
                # Both framings at once is the classic request-smuggling shape; refuse it.
                raise HttpError(400, "both Content-Length and Transfer-Encoding")
            codings = [c.strip().lower() for c in te.split(",") if c.strip()]
            if not codings or codings[-1] != "chunked":
                raise HttpError(501, "unsupported transfer-encoding")
            if len(codings) > 1:
                raise HttpError(501, "transfer-codings other than chunked")
            self.chunked = True
        elif cl_values:
            distinct = {v.strip() for value in cl_values for v in value.split(",")}
            if len(distinct) != 1:
                raise HttpError(400, "conflicting Content-Length")
            raw = distinct.pop()
            if not raw.isdigit():
                raise HttpError(400, "malformed Content-Length")
            self.length = int(raw)
            if self.length > max_bytes:
                raise HttpError(413, "request body too large")
        else:
            self.length = 0
        if self.length == 0:
            self.done = True

    @property
    def empty(self) -> bool:
        return self.length == 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.done:
            return
        if self.chunked:
            async for piece in self._chunks():
                yield piece
        else:
            assert self.length is not None
            remaining = self.length
            while remaining:
                piece = await self._reader.read(min(remaining, READ_SIZE))
                if not piece:
                    raise HttpError(400, "connection closed inside the request body")
                remaining -= len(piece)
                yield piece
        self.done = True

    async def _line(self) -> bytes:
        try:
            line = await self._reader.readuntil(b"\r\n")
        except asyncio.IncompleteReadError:
            raise HttpError(400, "connection closed inside a chunk") from None
        except asyncio.LimitOverrunError:
            raise HttpError(400, "chunk line too long") from None
        if len(line) > MAX_CHUNK_LINE:
            raise HttpError(400, "chunk line too long")
        return line[:-2]

    async def _chunks(self) -> AsyncIterator[bytes]:
        total = 0
        while True:
            size_text = (await self._line()).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise HttpError(400, "malformed chunk size") from None
            if size < 0:
                raise HttpError(400, "malformed chunk size")
            if size == 0:
                while await self._line():  # trailer fields are dropped (hop-by-hop for us)
                    pass
                return
            total += size
            if total > self._max:
                raise HttpError(413, "request body too large")
            remaining = size
            while remaining:
                piece = await self._reader.read(min(remaining, READ_SIZE))
                if not piece:
                    raise HttpError(400, "connection closed inside a chunk")
                remaining -= len(piece)
                yield piece
            if await self._line() != b"":
                raise HttpError(400, "missing CRLF after chunk data")


def forwardable_headers(headers: list[tuple[str, str]], extra_hop: set[str] | None = None) -> list[tuple[str, str]]:
    """Headers minus hop-by-hop ones (including any the Connection header names)."""
    named = set(extra_hop or ())
    for name, value in headers:
        if name.lower() == "connection":
            named.update(t.strip().lower() for t in value.split(",") if t.strip())
    return [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP and k.lower() not in named]


_REASONS = {
    200: "OK",
    204: "No Content",
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
    504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
}


def simple_response(status: int, message: str = "", *, close: bool = True) -> bytes:
    body = (message + "\n").encode() if message else b""
    head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}"]
    if body:
        head.append("Content-Type: text/plain; charset=utf-8")
    head.append(f"Content-Length: {len(body)}")
    if close:
        head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def response_head(status: int, reason: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason or _REASONS.get(status, '')}".rstrip()]
    lines.extend(f"{k}: {v}" for k, v in headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
