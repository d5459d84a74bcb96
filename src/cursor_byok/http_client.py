"""Outbound HTTP clients, all on aiohttp's connection pool and C HTTP parser.

Model provider requests (`streaming_client`) use aiohttp directly: every turn starts with one, so
its cost is paid on the path from the IDE's keystroke to the model. Through httpx's layer (the
httpx-aiohttp transport) a request cost ~0.75 ms of CPU on a kept-alive loopback connection, through
aiohttp alone ~0.35 ms, and each streamed chunk ~20 µs against ~16 µs (benchmarks/results/gateway.md).
The upstream passthrough and the intercepting proxy relay the IDE's own requests and keep httpx's
API on the same transport (`passthrough_client`): their callers use its request and response types.
"""
from __future__ import annotations

import http.cookiejar
import ssl
import urllib.request
from collections.abc import Mapping
from urllib.parse import urlsplit

import aiohttp
import httpx
import httpx_aiohttp.transport
from httpx_aiohttp import HttpxAiohttpClient
from multidict import CIMultiDictProxy
from yarl import URL

# httpx-aiohttp maps every aiohttp connection error, a refused connection or a dropped one included,
# to httpx.ConnectTimeout; callers that tell a timeout (504) from an unreachable peer (502) need the
# truth. Any non-timeout connection error is a NetworkError; the table's more specific entries
# (refused → ConnectError, cut body → ReadError, timeouts → TimeoutException) still win.
httpx_aiohttp.transport.AIOHTTP_EXC_MAP[aiohttp.ClientConnectionError] = httpx.NetworkError

# aiohttp's pool has no "unbounded": a missing limit means aiohttp's default of 100 connections,
# which would queue the 101st concurrent stream. Streams are bounded upstream of here
# (server.max_transports), so this only has to stay out of the way.
_MAX_CONNECTIONS = 4096
KEEPALIVE_SECONDS = 30.0  # an idle pooled connection is closed after this long
_LIMITS = httpx.Limits(max_connections=_MAX_CONNECTIONS, keepalive_expiry=KEEPALIVE_SECONDS)


class HttpError(Exception):
    """The exchange failed below HTTP: no connection, or it broke while sending or reading. The
    cause (aiohttp's error, which names what happened) is chained."""


class ProviderResponse:
    """A response whose body is read as it arrives. `close()` it when done: a body read to its end
    returns the connection to the pool, an unfinished one closes it."""

    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        return self._response.headers

    async def next_chunk(self) -> bytes:
        """The body bytes that have arrived (waiting for some); b"" at the end of the body."""
        try:
            return await self._response.content.readany()
        except aiohttp.ClientError as exc:
            raise HttpError(str(exc) or type(exc).__name__) from exc

    def close(self) -> None:
        self._response.release()


class ProviderHttp:
    """The client for model provider requests: one keep-alive pool per origin (aiohttp's), shared by
    every run. Use it from one event loop (its session is made there, on first use); `aclose()` it
    at the end."""

    def __init__(self, *, verify: ssl.SSLContext | bool = True, trust_env: bool = True) -> None:
        # httpx's context: its CA bundle and SSL_CERT_FILE handling, as before the switch.
        self._ssl = httpx.create_ssl_context(verify=verify, trust_env=trust_env)
        # HTTP(S)_PROXY, ALL_PROXY and NO_PROXY, read once like httpx does. (aiohttp's own trust_env
        # would look them and ~/.netrc up again on a helper thread for every request.)
        self._env_proxies = urllib.request.getproxies_environment() if trust_env else {}
        self._proxies: dict[tuple[str, str], tuple[URL, aiohttp.BasicAuth | None] | None] = {}
        self._session: aiohttp.ClientSession | None = None

    def _open_session(self) -> aiohttp.ClientSession:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=_MAX_CONNECTIONS, keepalive_timeout=KEEPALIVE_SECONDS, ssl=self._ssl),
            timeout=aiohttp.ClientTimeout(total=None),  # callers bound their own waits
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        return self._session

    def _proxy_for(self, url: str) -> tuple[URL, aiohttp.BasicAuth | None] | None:
        """The proxy (and its credentials) for `url`'s origin per the environment; None: direct."""
        parts = urlsplit(url)
        key = (parts.scheme, parts.netloc)
        if key not in self._proxies:
            env = self._env_proxies
            proxy = env.get(parts.scheme) or env.get("all")
            if not proxy or urllib.request.proxy_bypass_environment(parts.hostname or "", env):
                self._proxies[key] = None
            else:
                address = URL(proxy)
                auth = aiohttp.BasicAuth(address.user, address.password or "") if address.user else None
                self._proxies[key] = (address.with_user(None), auth)
        return self._proxies[key]

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, connect_timeout: float
    ) -> ProviderResponse:
        """Send the request; the response once its head has arrived."""
        return await self._request("POST", url, body, headers, connect_timeout)

    async def probe(self, url: str, *, connect_timeout: float) -> int:
        """A HEAD request without credentials, to open (or keep open) a pooled connection to the
        URL's origin; its status."""
        response = await self._request("HEAD", url, None, {}, connect_timeout)
        response.close()
        return response.status

    async def _request(
        self, method: str, url: str, body: bytes | None, headers: Mapping[str, str], connect_timeout: float
    ) -> ProviderResponse:
        session = self._session or self._open_session()
        proxy, proxy_auth = self._proxy_for(url) or (None, None)
        try:
            response = await session.request(
                method, url, data=body, headers=headers, allow_redirects=False, proxy=proxy, proxy_auth=proxy_auth,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout),
            )
        except aiohttp.ClientError as exc:
            raise HttpError(str(exc) or type(exc).__name__) from exc
        return ProviderResponse(response)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> ProviderHttp:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def streaming_client(*, verify: ssl.SSLContext | bool = True, trust_env: bool = True) -> ProviderHttp:
    """A client for model provider streams; the caller owns it (`await client.aclose()`). Proxies
    from the environment apply when `trust_env` is set."""
    return ProviderHttp(verify=verify, trust_env=trust_env)


class _KeepNoCookies(http.cookiejar.DefaultCookiePolicy):
    def set_ok(self, cookie: http.cookiejar.Cookie, request: object) -> bool:
        return False


def passthrough_client(*, timeout: httpx.Timeout, trust_env: bool = True) -> httpx.AsyncClient:
    """A client that relays the IDE's own requests. It keeps no cookies: a cookie jar would replay one
    response's Set-Cookie on the next request, which the IDE never sent. (Like any HTTP client it
    fills in a user agent and accept header only when the request has none; duplicate request
    header lines reach the origin joined into one, which HTTP defines as equivalent.)"""
    return HttpxAiohttpClient(
        timeout=timeout,
        limits=_LIMITS,
        trust_env=trust_env,
        cookies=http.cookiejar.CookieJar(policy=_KeepNoCookies()),
    )
