"""A load balancer in front of several servers, as the IDE's HTTP client sees it: an httpx
transport that sends each request to the instance its rule picks (the Host header rewritten to
that instance, as a reverse proxy does). Deterministic, so a test chooses what crosses instances."""
from __future__ import annotations

from collections.abc import Callable

import httpx

from cursor_byok.protocol import BIDI_APPEND_PATH, RUN_SSE_PATH

# A rule: the request → the base URL of the instance that serves it.
Rule = Callable[[httpx.Request], str]


def by_path(run_sse: str, appends: str) -> Rule:
    """No affinity, made deterministic: every RunSSE to one instance, every BidiAppend to another."""

    def pick(request: httpx.Request) -> str:
        return run_sse if request.url.path == RUN_SSE_PATH else appends if request.url.path == BIDI_APPEND_PATH else run_sse

    return pick


class Balancer(httpx.AsyncBaseTransport):
    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = httpx.URL(self.rule(request))
        request.url = request.url.copy_with(host=target.host, port=target.port)
        request.headers["host"] = f"{target.host}:{target.port}"
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def balanced_client(rule: Rule) -> httpx.AsyncClient:
    """An IDE client behind the balancer (its base URL is only a placeholder the rule replaces)."""
    return httpx.AsyncClient(base_url="http://127.0.0.1:9", timeout=30.0, transport=Balancer(rule))
