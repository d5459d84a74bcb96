"""Forward everything we do not serve to the official Cursor backend, streamed both ways.

No whole body is buffered: the request body is streamed from the ASGI receive channel (unless the
caller already read it), the response is streamed back chunk by chunk. Hop-by-hop headers are
stripped, identity encoding is requested, the user's own auth headers pass through untouched.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from .. import local_trust, trust_store
from .hosts import UnusableProxy, is_cursor_host, relay_proxy

if TYPE_CHECKING:
    from ..h2_client import H2Stream

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
        # Between our proxy and us only: never sent on to Cursor.
        local_trust.PROXY_MARK_HEADER.encode(),
        local_trust.AUTH_TOKEN_HEADER.encode(),
    }
)
UPSTREAM_URL_HEADER = b"x-server-upstream-url"
OFFICIAL_UPSTREAM = "https://api2.cursor.sh"


class ForbiddenUpstream(Exception):
    """An x-server-upstream-url that is not an https *.cursor.sh URL (no open proxy, no SSRF)."""


class MalformedTarget(Exception):
    """A request target or x-server-upstream-url that does not make a valid URL."""


def upstream_origin(header_value: str) -> str:
    """The https origin named by x-server-upstream-url; ForbiddenUpstream for another host,
    MalformedTarget for one that does not parse."""
    shown = header_value[:200]
    try:
        parts = urlsplit(header_value)
        host = parts.hostname or ""
        port_number = parts.port
    except ValueError:  # a bad IPv6 literal or port
        raise MalformedTarget(f"x-server-upstream-url {shown!r} is not a valid URL") from None
    if parts.scheme != "https" or not is_cursor_host(host) or parts.username or parts.password:
        raise ForbiddenUpstream(f"x-server-upstream-url {shown!r} is not an https *.cursor.sh URL")
    port = f":{port_number}" if port_number and port_number != 443 else ""
    return f"https://{host}{port}"


def forward_headers(raw: Iterable[tuple[bytes, bytes]], content_length: int | None) -> list[tuple[bytes, bytes]]:
    out = [(k, v) for k, v in raw if k.lower() not in HOP_BY_HOP]
    out.append((b"accept-encoding", b"identity"))
    out.append((b"connect-accept-encoding", b"identity"))
    if content_length is not None:
        out.append((b"content-length", str(content_length).encode()))
    return out


def _h2_context() -> ssl.SSLContext:
    context = trust_store.verified()
    context.set_alpn_protocols(["h2"])
    return context


class Upstream:
    def __init__(
        self, base_url: str, client: httpx.AsyncClient, *, body_idle_seconds: float = 30.0, body_deadline_seconds: float = 300.0
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.client = client
        self.body_idle_seconds = body_idle_seconds  # a streamed-through request body may pause this long
        self.body_deadline_seconds = body_deadline_seconds  # and must be whole within this
        self._relay_tls: asyncio.Future[ssl.SSLContext] | None = None

    async def _relay_context(self) -> ssl.SSLContext:
        """The Run relay's TLS context: the trust store's CAs, offering h2 alone (a context of its
        own: the other clients offer HTTP/1.1). Built on the first relay, in a thread (its CAs take
        ~40 ms to load), then kept."""
        if self._relay_tls is None:
            self._relay_tls = asyncio.ensure_future(asyncio.to_thread(_h2_context))
        return await asyncio.shield(self._relay_tls)

    def target_url(self, scope: Scope) -> httpx.URL:
        """Where this request goes. The header may pick another Cursor host only while we point at
        the official one (a custom base_url, e.g. a test stand-in, always wins). ForbiddenUpstream
        or MalformedTarget when it cannot go anywhere."""
        origin = self.base_url
        for k, v in scope["headers"]:
            if k == UPSTREAM_URL_HEADER:
                chosen = upstream_origin(v.decode("latin-1"))
                if self.base_url == OFFICIAL_UPSTREAM:
                    origin = chosen
                break
        path = scope.get("raw_path") or scope["path"].encode()
        if not path.startswith(b"/"):
            raise MalformedTarget(f"request target {path[:200].decode('latin-1')!r} is not an absolute path")
        query = scope.get("query_string") or b""
        url = origin + path.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
        try:
            return httpx.URL(url)
        except (httpx.InvalidURL, ValueError):
            raise MalformedTarget(f"request target {url[:200]!r} is not a valid URL") from None

    async def _target_or_refuse(self, scope: Scope, send: Send) -> httpx.URL | None:
        """The request's upstream URL; None once a refusal (403 or 400) has been sent instead."""
        try:
            return self.target_url(scope)
        except ForbiddenUpstream as exc:
            await _plain_error(send, 403, "permission_denied", str(exc))
        except MalformedTarget as exc:
            await _plain_error(send, 400, "invalid_argument", str(exc))
        return None

    async def forward(self, scope: Scope, receive: Receive, send: Send, body: bytes | None = None) -> None:
        """Forward one request. `body` is given when the caller already read (or rewrote) it."""
        url = await self._target_or_refuse(scope, send)
        if url is None:
            return
        content: bytes | _StreamedBody | None
        if body is None:
            length = next((v for k, v in scope["headers"] if k == b"content-length"), None)
            if length == b"0" or (length is None and _bodiless(scope)):
                content = None  # sent on without a body (a GET must not gain chunked framing)
            else:
                # Streamed through unchanged, so the client's own Content-Length (if any) stays exact.
                content = _StreamedBody(receive, self.body_idle_seconds, self.body_deadline_seconds)
            headers = forward_headers(scope["headers"], int(length) if length and length.isdigit() else None)
        else:
            content = body
            headers = forward_headers(scope["headers"], len(body))
        request = self.client.build_request(scope["method"], url, headers=headers, content=content)
        response = await _sent(self.client, request)
        if isinstance(response, Exception):
            if isinstance(content, _StreamedBody) and content.stalled:
                await _plain_error(send, 408, "deadline_exceeded", content.stalled, close=True)
                return
            if isinstance(response, _UploadAborted):
                return  # the client is gone; the upstream request was cut before its end
            if not isinstance(response, httpx.HTTPError):
                raise response
            log.warning("upstream request failed", extra={"url": str(url), "error": type(response).__name__})
            await _plain_error(send, 502, "unavailable", f"upstream unreachable: {type(response).__name__}")
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
            log.warning("upstream stream broke", extra={"url": str(url), "error": type(exc).__name__})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


    async def relay_stream(self, scope: Scope, send: Send, first: bytes, next_message: Callable[[], Awaitable[bytes | None]]) -> None:
        """Relay a bidi Connect stream (Cursor's `Run`) upstream over HTTP/2, both directions at
        once: `first` and then each message `next_message()` gives (None: the client finished
        sending; an exception: the client went away, and the upstream stream is reset)."""
        from ..h2_client import H2Client, StreamReset  # h2: only this route needs it
        from ..interceptor import HttpError, UpstreamDialer  # and h11, for a CONNECT through a proxy

        url = await self._target_or_refuse(scope, send)
        if url is None:
            return
        tls = await self._relay_context() if url.scheme == "https" else None
        try:
            # Through the proxy the environment names for this URL (as every other passthrough goes).
            dialer = UpstreamDialer(relay_proxy(url), connect_seconds=10.0)
        except UnusableProxy as exc:
            log.warning("upstream stream refused", extra={"url": str(url), "error": str(exc)})
            await _plain_error(send, 502, "unavailable", str(exc))
            return
        try:
            reader, writer = await dialer.open(url.host, url.port or (443 if tls else 80), tls=tls, server_hostname=url.host)
            client = H2Client.over(reader, writer)
        except (HttpError, ConnectionError) as exc:
            log.warning("upstream stream failed", extra={"url": str(url), "error": str(exc)})
            await _plain_error(send, 502, "unavailable", f"upstream unreachable: {exc}")
            return
        pump: asyncio.Task[None] | None = None
        try:
            head = [(":method", scope["method"]), (":scheme", url.scheme), (":authority", url.netloc.decode("ascii")), (":path", url.raw_path.decode("ascii"))]
            head += [(k.decode("latin-1"), v.decode("latin-1")) for k, v in forward_headers(scope["headers"], None)]
            stream = await client.request(head)
            pump = asyncio.get_running_loop().create_task(_pump(stream, first, next_message))
            status, headers = await stream.response()
            out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers if k.encode("latin-1") not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": status, "headers": out})
            while (data := await stream.read()) is not None:
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except StreamReset as exc:
            log.warning("upstream stream broke", extra={"url": str(url), "error": str(exc)})
            with contextlib.suppress(Exception):
                await _plain_error(send, 502, "unavailable", "upstream stream failed")
        finally:
            if pump is not None:
                pump.cancel()
                with contextlib.suppress(BaseException):
                    await pump
            await client.close()


async def _pump(stream: H2Stream, first: bytes, next_message: Callable[[], Awaitable[bytes | None]]) -> None:
    """The client's messages on to the upstream stream, re-enveloped, as they come."""
    from ..h2_client import StreamReset

    try:
        raw: bytes | None = first
        while raw is not None:
            await stream.send(b"\x00" + len(raw).to_bytes(4, "big") + raw)
            raw = await next_message()
        await stream.end()
    except StreamReset:
        pass
    except Exception:  # noqa: BLE001 - the client went away: so does the upstream stream
        stream.reset()


def _bodiless(scope: Scope) -> bool:
    """No body to stream, by the request's framing: HTTP/1.x says so (no transfer-encoding either);
    HTTP/2 frames a body without saying, so there only a GET or HEAD counts as bodiless."""
    if scope.get("http_version") == "2":
        return scope["method"] in ("GET", "HEAD")
    return not any(k == b"transfer-encoding" for k, _ in scope["headers"])


class _BodyStalled(Exception):
    pass


class _UploadAborted(Exception):
    """The client went away mid-body: the upstream request is cut off, never ended as if whole."""


class _StreamedBody:
    """The client's request body as it arrives; a pause past `idle_seconds`, or the whole body
    taking longer than `deadline_seconds`, ends the upload (`stalled` says which)."""

    def __init__(self, receive: Receive, idle_seconds: float, deadline_seconds: float) -> None:
        self._receive = receive
        self._idle_seconds = idle_seconds
        self._deadline_seconds = deadline_seconds
        self.stalled = ""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._deadline_seconds
        try:
            while True:
                idle_until = loop.time() + self._idle_seconds
                try:
                    async with asyncio.timeout_at(min(idle_until, deadline)):
                        message = await self._receive()
                except TimeoutError:
                    self.stalled = (
                        f"request body stalled for {self._idle_seconds:g}s (server.body_read_timeout_seconds)"
                        if idle_until <= deadline
                        else f"request body not whole within {self._deadline_seconds:g}s (server.body_deadline_seconds)"
                    )
                    raise _BodyStalled from None
                if message["type"] == "http.disconnect":
                    raise _UploadAborted
                chunk = message.get("body", b"")
                if chunk:
                    yield chunk
                if not message.get("more_body", False):
                    return
        finally:
            self._receive = _ended  # see `_sent`: the server's request must not outlive the upload


async def _ended() -> dict[str, Any]:
    return {"type": "http.disconnect"}


async def _sent(client: httpx.AsyncClient, request: httpx.Request) -> httpx.Response | Exception:
    """The upstream's response, or the error that stopped the exchange. A failed upload leaves the
    HTTP client's request, writer task and error in reference cycles that only a full collection
    frees; the error's traceback, raised through the caller, would hold the caller's frame with
    the server's receive and send, and the server does not close the client's connection (even
    after a `connection: close` answer) while its request is still referenced. Caught here, the
    traceback ends at this frame, which holds neither."""
    try:
        return await client.send(request, stream=True)
    except Exception as exc:  # noqa: BLE001 - the caller tells which it answers and which it raises
        return exc


async def _plain_error(send: Send, status: int, code: str, message: str, *, close: bool = False) -> None:
    body = json.dumps({"code": code, "message": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:  # the rest of the body was never read: the connection cannot carry another request
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
