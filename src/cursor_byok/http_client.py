"""Outbound HTTP clients, all on aiohttp's connection pool and C HTTP parser. httpx's default
transport (httpcore + h11 over anyio) costs ~65 µs of CPU per streamed chunk and ~1.5 ms per request
on a kept-alive loopback connection; aiohttp's costs ~20 µs and a fraction of that
(benchmarks/results/gateway.md). Every hop we add sits in front of a user's keystroke or a model's
token, so all outbound traffic goes this way: the IDE's relayed requests with httpx's API on top
(the httpx-aiohttp transport), model provider requests on aiohttp's connections themselves.

Model provider requests go through `ProviderHttp`, a narrow seam (post, probe, read chunks) so the
provider adapters never see the client library. A request takes a connection from aiohttp's
connector (its pool, keep-alive, TLS, proxies and connect timeout), is written at once with h11 on
that connection's transport, and its answer is read by the connection's own aiohttp protocol (its
C parser and stream reader), which is released back to the pool at the body's end as aiohttp's own
response releases it. aiohttp's request and response objects around that cost ~40% of a model
call's client CPU (benchmarks/test_provider_request.py); h11 reading as well would cost ~20 µs more
per streamed delta than aiohttp's C parser. The bytes sent are those aiohttp's request sends
(the same default headers, in its order). Errors are aiohttp's, as its session raises them,
mapped to httpx's by the httpx-aiohttp table and chained to an `HttpError`.
"""
from __future__ import annotations

import asyncio
import http.cookiejar
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from .trust_store import default_cas_skipped

with default_cas_skipped():  # aiohttp's own default contexts: never used here (trust_store.py)
    import aiohttp
import h11  # noqa: E402
import httpx  # noqa: E402
import httpx_aiohttp.transport  # noqa: E402
from httpx_aiohttp import HttpxAiohttpClient  # noqa: E402
from httpx_aiohttp.transport import map_aiohttp_exceptions  # noqa: E402
from aiohttp.client_proto import ResponseHandler  # noqa: E402
from aiohttp.client_reqrep import ClientRequest, RequestInfo  # noqa: E402
from aiohttp.http import SERVER_SOFTWARE, HttpProcessingError, RawResponseMessage  # noqa: E402
from aiohttp.streams import StreamReader  # noqa: E402
from multidict import CIMultiDictProxy  # noqa: E402
from yarl import URL  # noqa: E402

from .proxy_env import env_proxy  # noqa: E402

# httpx-aiohttp maps every aiohttp connection error, a refused connection or a dropped one included,
# to httpx.ConnectTimeout; callers that tell a timeout (504) from an unreachable peer (502) need the
# truth. Any non-timeout connection error is a NetworkError; the table's more specific entries
# (refused → ConnectError, cut body → ReadError, timeouts → TimeoutException) still win.
httpx_aiohttp.transport.AIOHTTP_EXC_MAP[aiohttp.ClientConnectionError] = httpx.NetworkError

# aiohttp's pool has no "unbounded": the transport maps a missing limit to aiohttp's default of 100
# connections, which would queue the 101st concurrent stream. Streams are bounded upstream of here
# (server.max_transports), so this only has to stay out of the way.
KEEPALIVE_SECONDS = 30.0  # an idle pooled connection is closed after this long
_MAX_CONNECTIONS = 4096
_LIMITS = httpx.Limits(max_connections=_MAX_CONNECTIONS, keepalive_expiry=KEEPALIVE_SECONDS)


class HttpError(Exception):
    """The exchange failed below HTTP: no connection, or it broke while sending or reading. The
    cause (the client's error, which names what happened) is chained."""


# What aiohttp's request adds to the caller's headers, unless the caller named them, in its order.
_DEFAULT_HEADERS = (*ClientRequest.DEFAULT_HEADERS.items(), ("User-Agent", SERVER_SOFTWARE))


class RequestHeaders:
    """Headers made once and sent with every request of a provider (`ProviderHttp.headers`), as the
    header lines h11 writes: the caller's, then aiohttp's defaults the caller did not name. Never
    shown by repr: they carry the key."""

    __slots__ = ("fields", "host", "heads")

    def __init__(self, headers: Mapping[str, str]) -> None:
        self.heads: dict[tuple[_Route, str], tuple[bytes, bytes]] = {}  # by route and method: `_Route._head`
        # Through httpx's Headers once, as before: names sent lowercase, values checked as it checks
        # them. A Host of the caller's takes the place of the URL's, first, as aiohttp places it.
        self.host: bytes | None = None
        self.fields: list[tuple[bytes, bytes]] = []
        named = set()
        for name, value in httpx.Headers(headers).items():
            named.add(name)
            if name == "host":
                self.host = value.encode()
            else:
                self.fields.append((name.encode(), value.encode()))
        self.fields += [(name.encode(), value.encode()) for name, value in _DEFAULT_HEADERS if name.lower() not in named]

    def __repr__(self) -> str:
        return f"<{len(self.fields)} headers>"


class ProviderResponse:
    """A response whose body is read as it arrives. `aclose()` it when done: a body read to its end
    has returned the connection to the pool, an unfinished one closes it."""

    __slots__ = ("status", "headers", "_connection", "_body", "_next")

    def __init__(self, connection: aiohttp.connector.Connection, message: RawResponseMessage, body: StreamReader) -> None:
        self.status: int = message.code
        # aiohttp's mapping, as its response gives it: a repeated header's `get` is its first value
        # (one Retry-After, one content type: a second one is not joined into an unreadable value).
        self.headers: Mapping[str, str] = message.headers
        self._connection = connection
        self._body = body
        self._next: Callable[[], Awaitable[bytes]]
        body.on_eof(connection.release)  # at once if there is no body
        if message.headers.get("content-encoding", "identity").lower() in ("", "identity"):
            self._next = body.readany  # b"" at the end: what a plain aiohttp client reads
        else:  # decoded by httpx's decoders, as for any httpx response
            self._next = httpx.Response(self.status, headers=message.raw_headers, stream=_Body(body)).aiter_bytes().__anext__

    async def next_chunk(self) -> bytes:
        """The body bytes that have arrived (waiting for some), decoded if it was content-encoded;
        b"" at the end of the body."""
        try:
            return await self._next()
        except StopAsyncIteration:  # the decoding reader's end
            return b""
        except (aiohttp.ClientError, httpx.HTTPError) as exc:
            raise _failure(exc)  # noqa: B904 - it chains its cause

    async def aclose(self) -> None:
        if not self._body.is_eof():  # cut short: the rest of the body would be read by the next request
            self._connection.close()
        self._connection.release()  # a no-op once released or closed


def _failure(exc: aiohttp.ClientError | httpx.HTTPError) -> HttpError:
    """The client's error as an `HttpError` chaining what names it: the httpx error it maps to
    (which chains aiohttp's, as the httpx-aiohttp transport maps them), or aiohttp's own when
    nothing maps it (a garbled response)."""
    cause: BaseException = exc
    if isinstance(exc, aiohttp.ClientError):
        try:
            with map_aiohttp_exceptions():
                raise exc
        except httpx.HTTPError as mapped:
            cause = mapped
        except aiohttp.ClientError:
            pass
    error = HttpError(str(cause) or type(cause).__name__)
    error.__cause__ = cause
    return error


class _Body(httpx.AsyncByteStream):
    """A content-encoded response body for httpx's decoders: aiohttp's chunks as they arrive."""

    __slots__ = ("_body",)

    def __init__(self, body: StreamReader) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            try:
                chunk = await self._body.readany()
            except Exception:
                with map_aiohttp_exceptions():
                    raise
            if not chunk:
                return
            yield chunk


class _Route:
    """Where an endpoint's requests go: its pool (`_Via`), the request line's target and Host, and
    an aiohttp request that names the connection to take from the pool (made once: the connector
    reads only its address, TLS and proxy)."""

    __slots__ = ("url", "via", "target", "host", "proxy_fields", "connection_request", "info")

    def __init__(self, url: URL, via: _Via) -> None:
        self.url = url
        self.via = via
        # A plain-HTTP request through a proxy names the whole URL and carries the proxy's
        # credentials; one through a CONNECT tunnel is the origin's own (the tunnel carries them).
        through_proxy = via.proxy_url is not None and url.scheme == "http"
        self.target = str(url).encode() if through_proxy else url.raw_path_qs.encode()
        self.proxy_fields: list[tuple[bytes, bytes]] = []
        if through_proxy and via.proxy_auth is not None:
            self.proxy_fields.append((b"Proxy-Authorization", via.proxy_auth.encode()))
        self.connection_request = ClientRequest("POST", url, loop=asyncio.get_running_loop(), proxy=via.proxy_url)
        host = self.connection_request.headers["Host"]
        self.host: bytes = host.encode()
        if via.proxy_auth is not None:
            # The credentials as the tunnel's own header (aiohttp's BasicAuth is deprecated), with
            # the Host aiohttp's connector sets in them on every connect already there: they are
            # part of the pool's key, which must not change between a request's connects.
            self.connection_request.update_proxy(via.proxy_url, None, {"Host": host, "Proxy-Authorization": via.proxy_auth})
        self.info = RequestInfo(url, "POST", CIMultiDictProxy(self.connection_request.headers), url)

    def request_parts(self, method: str, headers: RequestHeaders, body: bytes | None) -> tuple[bytes, ...]:
        """The request as aiohttp's request writes it: Host, the headers, Content-Length when there
        is a body, a plain-HTTP proxy's credentials; then the body. In parts, written in one go
        (a model request's body, tens of KiB, is not copied behind its head first)."""
        head = headers.heads.get((self, method)) or self._head(method, headers, body is not None)
        if body is None:
            return (head[0],)
        return (b"".join((head[0], b"%d" % len(body), head[1])), body)

    def _head(self, method: str, headers: RequestHeaders, with_body: bool) -> tuple[bytes, bytes]:
        """The request's head written by h11 once for these headers to this route (it checks and
        writes each header line; ~75 Python calls a request): the text around the body's length,
        which each request fills in."""
        lines = [(b"Host", headers.host or self.host), *headers.fields]
        if with_body:
            lines.append((b"Content-Length", b"0"))
        lines += self.proxy_fields
        written = h11.Connection(h11.CLIENT).send(h11.Request(method=method, target=self.target, headers=lines))
        assert written is not None
        if with_body:
            before, _, after = written.rpartition(b"\r\nContent-Length: 0\r\n")
            head = (before + b"\r\nContent-Length: ", b"\r\n" + after)
        else:
            head = (written, b"")
        headers.heads[(self, method)] = head
        return head


class _Via:
    """One keep-alive pool: aiohttp's connector, made in the loop on first use, and the proxy its
    connections go through (its URL and credentials read once)."""

    __slots__ = ("_ssl", "_connector", "proxy_url", "proxy_auth")

    def __init__(self, ssl_context: ssl.SSLContext, proxy_url: str) -> None:
        self._ssl = ssl_context
        self._connector: aiohttp.TCPConnector | None = None
        proxy = httpx.Proxy(proxy_url) if proxy_url else None  # its credentials come from the URL's userinfo
        self.proxy_url = URL(str(proxy.url)) if proxy else None
        # The Proxy-Authorization value of its credentials.
        self.proxy_auth = aiohttp.encode_basic_auth(*proxy.auth) if proxy and proxy.auth else None

    async def connect(self, route: _Route, timeout: aiohttp.ClientTimeout) -> aiohttp.connector.Connection:
        """A pooled connection to the route's origin, or a new one (as aiohttp's session takes it)."""
        if self._connector is None:
            self._connector = aiohttp.TCPConnector(keepalive_timeout=KEEPALIVE_SECONDS, ssl=self._ssl, limit=_MAX_CONNECTIONS)
        try:
            return await self._connector.connect(route.connection_request, [], timeout)
        except asyncio.TimeoutError as exc:
            raise aiohttp.ConnectionTimeoutError(f"Connection timeout to host {route.url}") from exc

    async def aclose(self) -> None:
        if self._connector is not None:
            await self._connector.close()


_PARSER_MADE = "_cursor_byok_parser"  # on a connection's protocol: (the parser made here, for a probe's answers)


async def _exchange(
    connection: aiohttp.connector.Connection, request: tuple[bytes, ...], *, head_only: bool, info: RequestInfo
) -> tuple[RawResponseMessage, StreamReader]:
    """Send `request` (its parts in one write) on the connection and read the response head with the connection's own
    protocol, as aiohttp's session and response do (an interim 1xx skipped). With `_Route`'s
    pool request, the only use of aiohttp below its public API (its response protocol's read and
    parser, a request made outside a session): tests/providers/test_provider_http.py fails loudly
    if those change."""
    protocol = connection.protocol
    assert isinstance(protocol, ResponseHandler)
    # A kept connection's parser has read its last answer to the end (the pool takes a connection
    # back only then) and llhttp goes on to the next message, as a server's parser does on a
    # kept-alive connection: a new one (aiohttp's session makes one per request: ~10 µs of a lone
    # start's loop CPU, its caches cold) only for another kind of answer (a probe's has no body) or
    # a parser that is not the one made here.
    made = protocol.__dict__.get(_PARSER_MADE)
    if made is None or made[0] is not protocol._parser or made[1] is not head_only:
        protocol.set_response_params(skip_payload=head_only, read_until_eof=True, auto_decompress=False)
        protocol.__dict__[_PARSER_MADE] = (protocol._parser, head_only)
    transport = connection.transport
    if transport is None or transport.is_closing():
        raise aiohttp.ClientConnectionResetError("Cannot write to closing transport")
    transport.writelines(request)
    while True:
        try:
            message, body = await protocol.read()
        except HttpProcessingError as exc:
            raise aiohttp.ClientResponseError(info, (), status=exc.code, message=exc.message, headers=exc.headers) from exc
        if not 100 <= message.code <= 199 or message.code == 101:
            return message, body


class ProviderHttp:
    """The client for model provider requests: one keep-alive pool per origin, shared by every run.
    With `trust_env`, proxies (and their credentials) come from the environment as for any client,
    looked up once per endpoint, and the CA bundle follows SSL_CERT_FILE / SSL_CERT_DIR. It keeps no
    cookies and follows no redirects. `aclose()` it at the end."""

    def __init__(self, *, verify: ssl.SSLContext | bool = True, trust_env: bool = True) -> None:
        self._ssl = httpx.create_ssl_context(verify=verify, trust_env=trust_env)
        self._trust_env = trust_env
        self._vias: dict[str, _Via] = {}  # by proxy URL ("" for direct)
        self._routes: dict[str, _Route] = {}  # by URL (a model's endpoint)
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}  # by connect bound
        self._no_headers = RequestHeaders({})

    @staticmethod
    def headers(headers: Mapping[str, str]) -> RequestHeaders:
        """`headers` made ready to send with many requests."""
        return RequestHeaders(headers)

    async def post(self, url: str, body: bytes, headers: RequestHeaders, *, connect_timeout: float) -> ProviderResponse:
        """Send the request; the response once its head has arrived (callers bound the rest)."""
        return await self._request("POST", url, body, headers, connect_timeout)

    async def probe(self, url: str, *, connect_timeout: float) -> int:
        """A HEAD request without credentials, to open (or keep open) a pooled connection to the
        URL's origin; its status."""
        response = await self._request("HEAD", url, None, self._no_headers, connect_timeout)
        await response.aclose()
        return response.status

    async def _request(
        self, method: str, url: str, body: bytes | None, headers: RequestHeaders, connect_timeout: float
    ) -> ProviderResponse:
        route = self._routes.get(url) or self._route(url)
        timeout = self._timeouts.get(connect_timeout)
        if timeout is None:
            timeout = self._timeouts[connect_timeout] = aiohttp.ClientTimeout(sock_connect=connect_timeout)
        # A HEAD that a kept connection dropped goes once more on a new one, as aiohttp's session
        # repeats a request that may be repeated; a model request is never sent twice.
        attempts = 2 if method == "HEAD" else 1
        try:
            while True:
                attempts -= 1
                connection = await route.via.connect(route, timeout)
                try:
                    message, response_body = await _exchange(
                        connection, route.request_parts(method, headers, body), head_only=method == "HEAD", info=route.info
                    )
                    break
                except BaseException as exc:
                    connection.close()
                    if attempts and isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
                        continue
                    raise
        except aiohttp.ClientError as exc:
            raise _failure(exc)  # noqa: B904 - it chains its cause
        except OSError as exc:  # as aiohttp's session raises it
            raise _failure(aiohttp.ClientOSError(*exc.args))  # noqa: B904 - it chains its cause
        return ProviderResponse(connection, message, response_body)

    def _route(self, url: str) -> _Route:
        parsed = httpx.URL(url)  # as the environment's proxy rules read it
        key = env_proxy(parsed) if self._trust_env else ""
        via = self._vias.get(key)
        if via is None:
            via = self._vias[key] = _Via(self._ssl, key)
        route = self._routes[url] = _Route(URL(str(parsed)), via)
        return route

    async def aclose(self) -> None:
        for via in self._vias.values():
            await via.aclose()

    async def __aenter__(self) -> ProviderHttp:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def streaming_client(*, verify: ssl.SSLContext | bool = True, trust_env: bool = True) -> ProviderHttp:
    """A client for model provider streams; the caller owns it (`await client.aclose()`)."""
    return ProviderHttp(verify=verify, trust_env=trust_env)


class _KeepNoCookies(http.cookiejar.DefaultCookiePolicy):
    def set_ok(self, cookie: http.cookiejar.Cookie, request: object) -> bool:
        return False


def passthrough_client(
    *,
    timeout: httpx.Timeout,
    trust_env: bool = True,
    proxy: httpx.Proxy | str | None = None,
    verify: ssl.SSLContext | bool = True,
) -> httpx.AsyncClient:
    """A client that relays the IDE's own requests. It keeps no cookies: a cookie jar would replay one
    response's Set-Cookie on the next request, which the IDE never sent. (Like any HTTP client it
    fills in a user agent and accept header only when the request has none; duplicate request
    header lines reach the origin joined into one, which HTTP defines as equivalent.) `proxy`, when
    given, is used for every request."""
    return HttpxAiohttpClient(
        verify=verify,
        timeout=timeout,
        limits=_LIMITS,
        trust_env=trust_env,
        proxy=proxy,
        cookies=http.cookiejar.CookieJar(policy=_KeepNoCookies()),
    )
