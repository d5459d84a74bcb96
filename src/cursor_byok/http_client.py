"""Outbound HTTP clients: httpx's API on aiohttp's connection pool and C HTTP parser (the
httpx-aiohttp transport). httpx's default transport (httpcore + h11 over anyio) costs ~65 µs of CPU
per streamed chunk and ~1.5 ms per request on a kept-alive loopback connection; aiohttp's costs
~20 µs and a fraction of that (benchmarks/results/gateway.md). Every hop we add sits in front of a
user's keystroke or a model's token, so all outbound traffic goes this way.

Model provider requests go through `ProviderHttp`, a narrow seam (post, probe, read chunks) so the
provider adapters never see the client library; it uses aiohttp directly.
"""
from __future__ import annotations

import http.cookiejar
import ssl
from collections.abc import Mapping

import aiohttp
import httpx
import httpx_aiohttp.transport
import yarl
from aiohttp.helpers import get_env_proxy_for_url
from httpx_aiohttp import HttpxAiohttpClient

# httpx-aiohttp maps every aiohttp connection error, a refused connection or a dropped one included,
# to httpx.ConnectTimeout; callers that tell a timeout (504) from an unreachable peer (502) need the
# truth. Any non-timeout connection error is a NetworkError; the table's more specific entries
# (refused → ConnectError, cut body → ReadError, timeouts → TimeoutException) still win.
httpx_aiohttp.transport.AIOHTTP_EXC_MAP[aiohttp.ClientConnectionError] = httpx.NetworkError

# aiohttp's pool has no "unbounded": the transport maps a missing limit to aiohttp's default of 100
# connections, which would queue the 101st concurrent stream. Streams are bounded upstream of here
# (server.max_transports), so this only has to stay out of the way.
KEEPALIVE_SECONDS = 30.0  # an idle pooled connection is closed after this long
MAX_CONNECTIONS = 4096
_LIMITS = httpx.Limits(max_connections=MAX_CONNECTIONS, keepalive_expiry=KEEPALIVE_SECONDS)


class HttpError(Exception):
    """The exchange failed below HTTP: no connection, or it broke while sending or reading. The
    cause (the client's error, which names what happened) is chained."""


class ProviderResponse:
    """A response whose body is read as it arrives. `aclose()` it when done: a body read to its end
    returns the connection to the pool, an unfinished one closes it."""

    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    async def next_chunk(self) -> bytes:
        """The body bytes that have arrived (waiting for some), decoded if it was content-encoded;
        b"" at the end of the body."""
        try:
            return await self._response.content.readany()
        except (aiohttp.ClientError, OSError) as exc:
            raise HttpError(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        response = self._response
        if response.content.at_eof():
            response.release()
        else:
            response.close()


class ProviderHttp:
    """The client for model provider requests: one keep-alive pool per origin, shared by every run.
    With `trust_env`, proxies (and their credentials) come from the environment as for any client,
    looked up once per endpoint (aiohttp's own lookup would take two helper-thread hops per request),
    and the CA bundle follows SSL_CERT_FILE / SSL_CERT_DIR. `aclose()` it at the end.

    aiohttp directly, not through httpx's request and response models: those cost ~0.3 ms of CPU
    per request, in front of every model call (benchmarks/results/gateway.md, turn start)."""

    def __init__(self, *, verify: ssl.SSLContext | bool = True, trust_env: bool = True) -> None:
        self._ssl = httpx.create_ssl_context(verify=verify, trust_env=trust_env)
        self._trust_env = trust_env
        self._session: aiohttp.ClientSession | None = None  # opened on first use, on the running loop
        self._proxies: dict[str, tuple[yarl.URL | None, aiohttp.BasicAuth | None]] = {}  # by URL (a model's endpoint)
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, connect_timeout: float
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
        self, method: str, url: str, body: bytes | None, headers: Mapping[str, str], connect_timeout: float
    ) -> ProviderResponse:
        session = self._session
        if session is None:
            connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS, keepalive_timeout=KEEPALIVE_SECONDS, ssl=self._ssl)
            session = self._session = aiohttp.ClientSession(connector=connector)
        timeout = self._timeouts.get(connect_timeout)
        if timeout is None:
            timeout = self._timeouts[connect_timeout] = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout)
        proxy, proxy_auth = self._proxy_for(url)
        try:
            response = await session.request(
                method, url, data=body, headers=headers, allow_redirects=False, timeout=timeout, proxy=proxy, proxy_auth=proxy_auth
            )
        except (aiohttp.ClientError, OSError) as exc:  # a connect timeout too: not the caller's time bound
            raise HttpError(str(exc) or type(exc).__name__) from exc
        return ProviderResponse(response)

    def _proxy_for(self, url: str) -> tuple[yarl.URL | None, aiohttp.BasicAuth | None]:
        found = self._proxies.get(url)
        if found is None:
            found = (None, None)
            if self._trust_env:
                try:
                    found = get_env_proxy_for_url(yarl.URL(url))
                except LookupError:
                    pass  # none for this URL
            self._proxies[url] = found
        return found

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> ProviderHttp:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def verified_tls(*, trust_env: bool = True) -> ssl.SSLContext:
    """The TLS context clients verify servers with (certifi's CAs, or SSL_CERT_FILE / SSL_CERT_DIR
    when `trust_env`). Loading the CAs takes tens of ms: a server loads them once and hands the
    context to each of its clients (each would load its own)."""
    return httpx.create_ssl_context(trust_env=trust_env)


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
