"""Outbound HTTP clients, all on aiohttp's connection pool and C HTTP parser. httpx's default
transport (httpcore + h11 over anyio) costs ~65 µs of CPU per streamed chunk and ~1.5 ms per request
on a kept-alive loopback connection; aiohttp's costs ~20 µs and a fraction of that
(benchmarks/results/gateway.md). Every hop we add sits in front of a user's keystroke or a model's
token, so all outbound traffic goes this way: the IDE's relayed requests with httpx's API on top
(the httpx-aiohttp transport), model provider requests on aiohttp itself.

Model provider requests go through `ProviderHttp`, a narrow seam (post, probe, read chunks) so the
provider adapters never see the client library. It posts with aiohttp, the URL parsed and the
headers built once per provider, and reads the body as aiohttp hands it over: an `httpx.Request` and
`httpx.Response` around each call (as the httpx-aiohttp transport makes them) cost ~130 Python calls
and ~0.2 ms of CPU in front of every model call (benchmarks/test_provider_request.py). An h11 client
measured there writes a request for less but reads each streamed delta for ~20 µs more than aiohttp's
C parser. Errors are as the transport makes them: aiohttp's mapped to httpx's by its table, chained
to an `HttpError`.
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
from httpx_aiohttp import HttpxAiohttpClient  # noqa: E402
from httpx_aiohttp.transport import map_aiohttp_exceptions  # noqa: E402
from multidict import CIMultiDict  # noqa: E402
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


class RequestHeaders:
    """Headers made once and sent with every request of a provider (`ProviderHttp.headers`), in
    the form aiohttp takes without converting them. Never shown by repr: they carry the key."""

    __slots__ = ("fields",)

    def __init__(self, headers: Mapping[str, str]) -> None:
        # Through httpx's Headers once, as before: names sent lowercase, values checked as it checks
        # them. Read, never changed: aiohttp copies it into each request.
        self.fields = CIMultiDict(httpx.Headers(headers).items())

    def __repr__(self) -> str:
        return f"<{len(self.fields)} headers>"


class ProviderResponse:
    """A response whose body is read as it arrives. `aclose()` it when done: a body read to its end
    returns the connection to the pool, an unfinished one closes it."""

    __slots__ = ("_response", "_next")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self._next: Callable[[], Awaitable[bytes]]
        if response.headers.get("content-encoding", "identity").lower() in ("", "identity"):
            self._next = response.content.readany  # b"" at the end: what a plain aiohttp client reads
        else:  # decoded by httpx's decoders, as for any httpx response
            self._next = httpx.Response(response.status, headers=response.raw_headers, stream=_Body(response)).aiter_bytes().__anext__

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
            return await self._next()
        except StopAsyncIteration:  # the decoding reader's end
            return b""
        except (aiohttp.ClientError, httpx.HTTPError) as exc:
            raise _failure(exc)  # noqa: B904 - it chains its cause

    async def aclose(self) -> None:
        try:
            await self._response.__aexit__(None, None, None)
        except (aiohttp.ClientError, httpx.HTTPError) as exc:
            raise _failure(exc)  # noqa: B904 - it chains its cause


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

    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            try:
                chunk = await self._response.content.readany()
            except Exception:
                with map_aiohttp_exceptions():
                    raise
            if not chunk:
                return
            yield chunk


class _Route:
    """Where an endpoint's requests go: its URL as aiohttp takes it, the session (direct, or
    through the proxy the environment names for it) and that proxy's request arguments."""

    __slots__ = ("url", "via")

    def __init__(self, url: URL, via: _Via) -> None:
        self.url = url
        self.via = via


class _Via:
    """One keep-alive pool: an aiohttp session, made in the loop on first use, and the proxy its
    requests name (its URL and credentials read once)."""

    __slots__ = ("_ssl", "_session", "proxy")

    def __init__(self, ssl_context: ssl.SSLContext, proxy_url: str) -> None:
        self._ssl = ssl_context
        self._session: aiohttp.ClientSession | None = None
        proxy = httpx.Proxy(proxy_url) if proxy_url else None  # its credentials come from the URL's userinfo
        self.proxy: dict[str, Any] = {
            "proxy": str(proxy.url) if proxy else None,
            "proxy_auth": aiohttp.BasicAuth(*proxy.auth) if proxy and proxy.auth else None,
            "proxy_headers": proxy.headers if proxy else None,
        }

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(keepalive_timeout=KEEPALIVE_SECONDS, ssl=self._ssl, limit=_MAX_CONNECTIONS)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


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
        via = route.via
        try:
            response = await via.session()._request(
                method,
                route.url,
                headers=headers.fields,
                data=body or None,
                allow_redirects=False,
                auto_decompress=False,
                compress=False,
                timeout=timeout,
                **via.proxy,
            )
        except aiohttp.ClientError as exc:
            raise _failure(exc)  # noqa: B904 - it chains its cause
        return ProviderResponse(response)

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
