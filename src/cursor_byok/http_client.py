"""Outbound HTTP clients: httpx's API on aiohttp's connection pool and C HTTP parser (the
httpx-aiohttp transport). httpx's default transport (httpcore + h11 over anyio) costs ~65 µs of CPU
per streamed chunk and ~1.5 ms per request on a kept-alive loopback connection; aiohttp's costs
~20 µs and a fraction of that (benchmarks/results/gateway.md). Every hop we add sits in front of a
user's keystroke or a model's token, so all outbound traffic goes this way."""
from __future__ import annotations

import http.cookiejar
import ssl

import aiohttp
import httpx
import httpx_aiohttp.transport
from httpx_aiohttp import HttpxAiohttpClient

# httpx-aiohttp maps every aiohttp connection error, a refused connection or a dropped one included,
# to httpx.ConnectTimeout; callers that tell a timeout (504) from an unreachable peer (502) need the
# truth. Any non-timeout connection error is a NetworkError; the table's more specific entries
# (refused → ConnectError, cut body → ReadError, timeouts → TimeoutException) still win.
httpx_aiohttp.transport.AIOHTTP_EXC_MAP[aiohttp.ClientConnectionError] = httpx.NetworkError

# aiohttp's pool has no "unbounded": the transport maps a missing limit to aiohttp's default of 100
# connections, which would queue the 101st concurrent stream. Streams are bounded upstream of here
# (server.max_transports), so this only has to stay out of the way.
_LIMITS = httpx.Limits(max_connections=4096, keepalive_expiry=30.0)


def streaming_client(*, verify: ssl.SSLContext | bool = True, trust_env: bool = True) -> httpx.AsyncClient:
    """A client for model provider streams; the caller owns it (`await client.aclose()`). Proxies
    from the environment apply when `trust_env` is set, as with a plain httpx client."""
    return HttpxAiohttpClient(verify=verify, trust_env=trust_env, limits=_LIMITS)


class _KeepNoCookies(http.cookiejar.DefaultCookiePolicy):
    def set_ok(self, cookie: http.cookiejar.Cookie, request: object) -> bool:
        return False


def passthrough_client(
    *, timeout: httpx.Timeout, trust_env: bool = True, proxy: httpx.Proxy | str | None = None
) -> httpx.AsyncClient:
    """A client that relays the IDE's own requests. It keeps no cookies: a cookie jar would replay one
    response's Set-Cookie on the next request, which the IDE never sent. (Like any HTTP client it
    fills in a user agent and accept header only when the request has none; duplicate request
    header lines reach the origin joined into one, which HTTP defines as equivalent.) `proxy`, when
    given, is used for every request."""
    return HttpxAiohttpClient(
        timeout=timeout,
        limits=_LIMITS,
        trust_env=trust_env,
        proxy=proxy,
        cookies=http.cookiejar.CookieJar(policy=_KeepNoCookies()),
    )
