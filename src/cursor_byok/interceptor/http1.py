"""The proxy's HTTP/1.1 with its clients, on h11's state machine: request heads and bodies in
(framing, size limits, deadlines), responses out (framing, keep-alive).

The proxy never needs to understand bodies, only where they end, and where they do not: a body
the client stops short of its framing (a closed connection mid-chunk, a chunk size no body can
have) raises HttpError from the body's stream, so the request it was being streamed into is
abandoned, never ended as if whole.
"""
from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import h11

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

    @classmethod
    def of(cls, event: h11.Request) -> RequestHead:
        headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in event.headers.raw_items()]
        return cls(event.method.decode("ascii"), event.target.decode("latin-1"), "HTTP/" + event.http_version.decode("ascii"), headers)

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

    @property
    def has_body(self) -> bool:
        length = self.get("content-length")
        return self.get("transfer-encoding") is not None or (length is not None and length.strip() != "0")

    def raw(self) -> bytes:
        """The head as it goes on to another server (an upgrade spliced to the real host)."""
        lines = [f"{self.method} {self.target} {self.version}", *(f"{k}: {v}" for k, v in self.headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _refused(exc: h11.ProtocolError) -> HttpError:
    status = exc.error_status_hint if 400 <= exc.error_status_hint < 600 else 400
    return HttpError(status, f"malformed request: {exc}")


class ClientHttp:
    """One client connection's HTTP/1.1, server side (plain, or inside a terminated TLS tunnel)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, max_head_bytes: int, head_seconds: float) -> None:
        self.reader = reader
        self.writer = writer
        self._head_seconds = head_seconds
        self._max_head_bytes = max_head_bytes
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head_bytes)

    # ---- requests ----------------------------------------------------------------------------
    def _next_event(self) -> Any:
        try:
            return self._conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise _refused(exc) from None

    async def _receive(self) -> None:
        self._conn.receive_data(await self.reader.read(READ_SIZE))  # b"": the client closed its side

    async def next_request(self, wait: float) -> RequestHead | None:
        """The next request's head: its first byte within `wait` (TimeoutError), the whole head
        within head_seconds of that; None when the client closed between requests."""
        conn = self._conn
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
        deadline: float | None = None
        while True:
            event = self._next_event()
            if isinstance(event, h11.Request):
                if event.http_version not in (b"1.1", b"1.0"):
                    raise HttpError(505, f"unsupported HTTP version {event.http_version[:16]!r}")
                if len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers.raw_items()) > self._max_head_bytes:
                    raise HttpError(431, "request head too large")  # it came whole in one read: h11 took it
                head = RequestHead.of(event)
                if head.get("transfer-encoding") is not None and head.get("content-length") is not None:
                    # Both framings at once is the classic request-smuggling shape; refuse it.
                    raise HttpError(400, "both Content-Length and Transfer-Encoding")
                return head
            if isinstance(event, h11.ConnectionClosed):
                return None
            if event is not h11.NEED_DATA:
                raise HttpError(400, "unexpected data before a request")
            if deadline is None:
                if not conn.trailing_data[0]:
                    async with asyncio.timeout(wait):
                        await self._receive()
                deadline = asyncio.get_running_loop().time() + self._head_seconds
                continue
            async with asyncio.timeout_at(deadline):
                await self._receive()

    def body(self, head: RequestHead, max_bytes: int, seconds: float = math.inf) -> RequestBody:
        length = head.get("content-length")
        if length is not None and length.strip().isdigit() and int(length) > max_bytes:
            raise HttpError(413, "request body too large")
        if not head.has_body and isinstance(self._next_event(), h11.EndOfMessage):
            return RequestBody(self, max_bytes, seconds, empty=True)  # its end is taken: nothing to stream
        return RequestBody(self, max_bytes, seconds, empty=False)

    @property
    def expects_continue(self) -> bool:
        return self._conn.they_are_waiting_for_100_continue

    def take_tunnel_bytes(self) -> bytes:
        """After a CONNECT answered 200 or an upgrade: what the client sent past its request head."""
        return self._conn.trailing_data[0]

    @property
    def request_done(self) -> bool:
        """The request was read to its end (the connection can carry another one)."""
        return self._conn.their_state in (h11.DONE, h11.MIGHT_SWITCH_PROTOCOL, h11.SWITCHED_PROTOCOL)

    def take_pipelined(self, data: bytes) -> None:
        """Bytes read off the connection while a response was relayed: the next request's start."""
        if data:
            self._conn.receive_data(data)

    # ---- responses ---------------------------------------------------------------------------
    def start_response(self, status: int, reason: str, headers: Sequence[tuple[str, str]]) -> None:
        event = h11.Response(status_code=status, headers=list(headers), reason=reason.encode("latin-1"))
        self.writer.write(self._conn.send(event) or b"")

    def informational(self, status: int) -> None:
        self.writer.write(self._conn.send(h11.InformationalResponse(status_code=status, headers=[])) or b"")

    def send_body(self, data: bytes) -> None:
        self.writer.write(self._conn.send(h11.Data(data=data)) or b"")

    def end_response(self) -> None:
        self.writer.write(self._conn.send(h11.EndOfMessage()) or b"")

    @property
    def reusable(self) -> bool:
        """Both sides are done with this exchange and neither asked to close."""
        return self._conn.our_state is h11.DONE and self._conn.their_state is h11.DONE


class RequestBody:
    """The request body as an async byte stream; HttpError when it is cut short, too large (413)
    or not whole within `seconds` (408)."""

    def __init__(self, http: ClientHttp, max_bytes: int, seconds: float, *, empty: bool) -> None:
        self._http = http
        self._max = max_bytes
        self._seconds = seconds
        self.empty = empty

    async def __aiter__(self) -> AsyncIterator[bytes]:
        http = self._http
        deadline = asyncio.get_running_loop().time() + self._seconds
        total = 0
        while True:
            event = http._next_event()
            if isinstance(event, h11.Data):
                total += len(event.data)
                if total > self._max:
                    raise HttpError(413, "request body too large")
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return
            elif event is h11.NEED_DATA:
                try:
                    async with asyncio.timeout_at(deadline):
                        await http._receive()
                except TimeoutError:
                    raise HttpError(408, f"request body not received within {self._seconds:g}s") from None
            else:
                raise HttpError(400, "connection closed inside the request body")


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
    407: "Proxy Authentication Required",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
    504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
}


def simple_response(status: int, message: str = "", *, close: bool = True, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    """A whole response written as it is, for refusals (the connection's h11 state may be broken)."""
    body = (message + "\n").encode() if message else b""
    head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", *(f"{k}: {v}" for k, v in headers)]
    if body and not any(k.lower() == "content-type" for k, _ in headers):
        head.append("Content-Type: text/plain; charset=utf-8")
    head.append(f"Content-Length: {len(body)}")
    if close:
        head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
