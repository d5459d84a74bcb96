"""Forward everything we do not serve to the official Cursor backend, streamed both ways.

No whole body is buffered: the request body is streamed from the ASGI receive channel (unless the
caller already read it), the response is streamed back chunk by chunk. Hop-by-hop headers are
stripped, identity encoding is requested, the user's own auth headers pass through untouched.
"""
from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import httpx

log = logging.getLogger("cursor_byok.upstream")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
        b"accept-encoding",
        b"connect-accept-encoding",
        b"x-server-upstream-url",
    }
)
UPSTREAM_URL_HEADER = b"x-server-upstream-url"
OFFICIAL_UPSTREAM = "https://api2.cursor.sh"


class ForbiddenUpstream(Exception):
    """An x-server-upstream-url that is not an https *.cursor.sh URL (no open proxy, no SSRF)."""


def is_cursor_host(host: str) -> bool:
    host = host.lower().rstrip(".")
    return host == "cursor.sh" or host.endswith(".cursor.sh")


def upstream_origin(header_value: str) -> str:
    """The https origin named by x-server-upstream-url, or ForbiddenUpstream."""
    parts = urlsplit(header_value)
    host = parts.hostname or ""
    if parts.scheme != "https" or not is_cursor_host(host) or parts.username or parts.password:
        raise ForbiddenUpstream(f"x-server-upstream-url {header_value!r} is not an https *.cursor.sh URL")
    port = f":{parts.port}" if parts.port and parts.port != 443 else ""
    return f"https://{host}{port}"


def forward_headers(raw: Iterable[tuple[bytes, bytes]], content_length: int | None) -> list[tuple[bytes, bytes]]:
    out = [(k, v) for k, v in raw if k.lower() not in HOP_BY_HOP]
    out.append((b"accept-encoding", b"identity"))
    out.append((b"connect-accept-encoding", b"identity"))
    if content_length is not None:
        out.append((b"content-length", str(content_length).encode()))
    return out


class Upstream:
    def __init__(self, base_url: str, client: httpx.AsyncClient) -> None:
        self.base_url = base_url.rstrip("/")
        self.client = client

    def target_url(self, scope: Scope) -> str:
        """Where this request goes. The header may pick another Cursor host only while we point at
        the official one (a custom base_url, e.g. a test stand-in, always wins)."""
        origin = self.base_url
        for k, v in scope["headers"]:
            if k == UPSTREAM_URL_HEADER:
                chosen = upstream_origin(v.decode("latin-1"))
                if self.base_url == OFFICIAL_UPSTREAM:
                    origin = chosen
                break
        path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string") or b""
        url = origin + path.decode("latin-1")
        return url + ("?" + query.decode("latin-1") if query else "")

    async def forward(self, scope: Scope, receive: Receive, send: Send, body: bytes | None = None) -> None:
        """Forward one request. `body` is given when the caller already read (or rewrote) it."""
        try:
            url = self.target_url(scope)
        except ForbiddenUpstream as exc:
            await _plain_error(send, 403, "permission_denied", str(exc))
            return
        content: bytes | AsyncIterator[bytes]
        if body is None:
            # Streamed through unchanged, so the client's own Content-Length (if any) stays exact.
            content = _stream_body(receive)
            length = next((v for k, v in scope["headers"] if k == b"content-length"), None)
            headers = forward_headers(scope["headers"], int(length) if length and length.isdigit() else None)
        else:
            content = body
            headers = forward_headers(scope["headers"], len(body))
        request = self.client.build_request(scope["method"], url, headers=headers, content=content)
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            log.warning("upstream request failed", extra={"url": url, "error": type(exc).__name__})
            await _plain_error(send, 502, "unavailable", f"upstream unreachable: {type(exc).__name__}")
            return
        try:
            resp_headers = [
                (k, v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP or k.lower() == b"content-length"
            ]
            await send({"type": "http.response.start", "status": response.status_code, "headers": resp_headers})
            async for chunk in response.aiter_raw():
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except httpx.HTTPError as exc:
            # Headers are out: all we can do is end the body; the client sees a truncated stream.
            log.warning("upstream stream broke", extra={"url": url, "error": type(exc).__name__})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


async def _stream_body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def _plain_error(send: Send, status: int, code: str, message: str) -> None:
    import json

    body = json.dumps({"code": code, "message": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
