"""The HTTP client every adapter streams through: httpx's API on aiohttp's connection pool and C
HTTP parser (the httpx-aiohttp transport). Reading a streamed chunk costs ~20 µs of CPU there
against ~65 µs through httpx's default transport (httpcore + h11 over anyio), and a busy server
reads tens of thousands of chunks a second (benchmarks/results/gateway.md)."""
from __future__ import annotations

import ssl

import httpx
from httpx_aiohttp import HttpxAiohttpClient

# aiohttp's pool has no "unbounded": the transport maps a missing limit to aiohttp's default of 100
# connections, which would queue the 101st concurrent stream. Streams are bounded upstream of here
# (server.max_transports), so this only has to stay out of the way.
MAX_CONNECTIONS = 4096
KEEPALIVE_SECONDS = 30.0


def new_http_client(*, verify: ssl.SSLContext | bool = True, trust_env: bool = True) -> httpx.AsyncClient:
    """A client for provider streams; the caller owns it (`await client.aclose()`). Proxies from
    the environment apply when `trust_env` is set, as with a plain httpx client."""
    limits = httpx.Limits(max_connections=MAX_CONNECTIONS, keepalive_expiry=KEEPALIVE_SECONDS)
    return HttpxAiohttpClient(verify=verify, trust_env=trust_env, limits=limits)
