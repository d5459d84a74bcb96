"""Outbound HTTP clients: httpx's API on aiohttp's connection pool and C HTTP parser (the
httpx-aiohttp transport). httpx's default transport (httpcore + h11 over anyio) costs ~65 µs of CPU
per streamed chunk and ~1.5 ms per request on a kept-alive loopback connection; aiohttp's costs
~20 µs and a fraction of that (benchmarks/results/gateway.md). Every hop we add sits in front of a
user's keystroke or a model's token, so all outbound traffic goes this way.

Model provider requests go through `ProviderHttp`, a narrow seam (post, probe, read chunks) so the
provider adapters never see the client library. It hands an `httpx.Request` straight to the aiohttp
transport, without `httpx.AsyncClient` around it: the client's request building, auth and redirect
flow, cookie jar and per-request proxy routing cost ~0.3 ms of CPU in front of every model call and
do nothing a provider call needs (benchmarks/results/gateway.md, turn start).
"""
from __future__ import annotations

import http.cookiejar
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from .trust_store import default_cas_skipped

with default_cas_skipped():  # aiohttp's own default contexts: never used here (trust_store.py)
    import aiohttp
import httpx  # noqa: E402
import httpx_aiohttp.transport  # noqa: E402
from httpx_aiohttp import AiohttpTransport, HttpxAiohttpClient  # noqa: E402
from httpx_aiohttp.transport import map_aiohttp_exceptions  # noqa: E402

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
_LIMITS = httpx.Limits(max_connections=4096, keepalive_expiry=KEEPALIVE_SECONDS)


class HttpError(Exception):
    """The exchange failed below HTTP: no connection, or it broke while sending or reading. The
    cause (the client's error, which names what happened) is chained."""


class RequestHeaders(httpx.Headers):
    """Headers made once and sent with every request of a provider (`ProviderHttp.headers`), so a
    request does not normalise them again. Never shown by repr: they carry the key."""

    def __repr__(self) -> str:
        return f"<{len(self)} headers>"


class ProviderResponse:
    """A response whose body is read as it arrives. `aclose()` it when done: a body read to its end
    returns the connection to the pool, an unfinished one closes it."""

    __slots__ = ("_response", "_next", "_close")

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        encoded = response.headers.get("content-encoding", "identity").lower() not in ("", "identity")
        self._next: Callable[[], Awaitable[bytes]]
        self._close: Callable[[], Awaitable[None]]
        if encoded:
            self._next, self._close = response.aiter_bytes().__anext__, response.aclose
        else:
            # Read and closed as aiohttp hands it over (`_Body`): httpx's raw iterator would add two
            # generator layers and a context manager per chunk and leave the bytes as they are.
            body: _Body = response.stream  # type: ignore[assignment]
            self._next, self._close = body.next, body.aclose

    @property
    def status(self) -> int:
        return self._response.status_code

    @property
    def headers(self) -> httpx.Headers:
        return self._response.headers

    async def next_chunk(self) -> bytes:
        """The body bytes that have arrived (waiting for some), decoded if it was content-encoded;
        b"" at the end of the body."""
        try:
            return await self._next()
        except StopAsyncIteration:
            return b""
        except httpx.HTTPError as exc:
            raise HttpError(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        await self._close()


class _Body(httpx.AsyncByteStream):
    """A response body read as a plain aiohttp client reads it: `next()` is whatever has arrived
    (b"" at the end), one await; aiohttp's errors become httpx's as the transport maps them."""

    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def next(self) -> bytes:
        try:
            return await self._response.content.readany()
        except Exception:
            with map_aiohttp_exceptions():
                raise

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while chunk := await self.next():
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._response.__aexit__(None, None, None)
        except Exception:
            with map_aiohttp_exceptions():
                raise


class _Transport(AiohttpTransport):
    """The httpx-aiohttp transport without the work it repeats per request: the timeout object is
    made once per bound, the proxy's URL and credentials once per transport, and the response body
    is a `_Body`. What reaches the wire is the same."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        proxy = self.proxy
        self._proxy = {
            "proxy": str(proxy.url) if proxy else None,
            "proxy_auth": aiohttp.BasicAuth(*proxy.auth) if proxy and proxy.auth else None,
            "proxy_headers": proxy.headers if proxy else None,
        }
        self._timeouts: dict[tuple[float | None, float | None, float | None], aiohttp.ClientTimeout] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        client = self.client
        if not isinstance(client, aiohttp.ClientSession):
            client = self.client = self.get_client()
        bounds = request.extensions.get("timeout", {})
        key = (bounds.get("connect"), bounds.get("read"), bounds.get("pool"))
        timeout = self._timeouts.get(key)
        if timeout is None:
            timeout = self._timeouts[key] = aiohttp.ClientTimeout(sock_connect=key[0], sock_read=key[1], connect=key[2])
        try:
            response = await client.request(
                request.method,
                str(request.url),
                headers=request.headers.items(),  # what aiohttp would read from them
                data=request.content or None,  # read by ProviderHttp
                allow_redirects=False,
                auto_decompress=False,
                compress=False,
                timeout=timeout,
                **self._proxy,
            )
        except Exception:
            with map_aiohttp_exceptions():
                raise
        extensions = {"http_version": b"HTTP/1.1"}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode()
        return httpx.Response(response.status, headers=response.raw_headers, stream=_Body(response), request=request, extensions=extensions)


class _Route:
    """Where an endpoint's requests go: its parsed URL and the transport (direct, or through the
    proxy the environment names for it)."""

    __slots__ = ("url", "transport")

    def __init__(self, url: httpx.URL, transport: _Transport) -> None:
        self.url = url
        self.transport = transport


class ProviderHttp:
    """The client for model provider requests: one keep-alive pool per origin, shared by every run.
    With `trust_env`, proxies (and their credentials) come from the environment as for any client,
    looked up once per endpoint, and the CA bundle follows SSL_CERT_FILE / SSL_CERT_DIR. It keeps no
    cookies and follows no redirects. `aclose()` it at the end."""

    def __init__(self, *, verify: ssl.SSLContext | bool = True, trust_env: bool = True) -> None:
        self._ssl = httpx.create_ssl_context(verify=verify, trust_env=trust_env)
        self._trust_env = trust_env
        self._transports: dict[str, _Transport] = {}  # by proxy URL ("" for direct)
        self._routes: dict[str, _Route] = {}  # by URL (a model's endpoint)

    @staticmethod
    def headers(headers: Mapping[str, str]) -> RequestHeaders:
        """`headers` made ready to send with many requests."""
        return RequestHeaders(headers)

    async def post(
        self, url: str, body: bytes, headers: RequestHeaders | Mapping[str, str], *, connect_timeout: float
    ) -> ProviderResponse:
        """Send the request; the response once its head has arrived (callers bound the rest)."""
        return await self._request("POST", url, body, headers, connect_timeout)

    async def probe(self, url: str, *, connect_timeout: float) -> int:
        """A HEAD request without credentials, to open (or keep open) a pooled connection to the
        URL's origin; its status."""
        response = await self._request("HEAD", url, None, {}, connect_timeout)
        await response.aclose()
        return response.status

    async def _request(
        self, method: str, url: str, body: bytes | None, headers: RequestHeaders | Mapping[str, str], connect_timeout: float
    ) -> ProviderResponse:
        route = self._routes.get(url) or self._route(url)
        # The body as a ready stream, read at once: `content=` would encode it again and rebuild the
        # headers around a Host and a Content-Length (~60 µs a request), which aiohttp writes itself.
        request = httpx.Request(method, route.url, headers=headers, stream=httpx.ByteStream(body or b""), extensions={"timeout": {"connect": connect_timeout}})
        request.read()
        try:
            response = await route.transport.handle_async_request(request)
        except (httpx.HTTPError, aiohttp.ClientError) as exc:  # aiohttp's: what the transport does not map (a garbled response)
            raise HttpError(str(exc) or type(exc).__name__) from exc
        return ProviderResponse(response)

    def _route(self, url: str) -> _Route:
        parsed = httpx.URL(url)
        key = env_proxy(parsed) if self._trust_env else ""
        transport = self._transports.get(key)
        if transport is None:
            proxy = httpx.Proxy(key) if key else None  # its credentials come from the URL's userinfo
            transport = self._transports[key] = _Transport(verify=self._ssl, limits=_LIMITS, proxy=proxy)
        route = self._routes[url] = _Route(parsed, transport)
        return route

    async def aclose(self) -> None:
        for transport in self._transports.values():
            await transport.aclose()

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
