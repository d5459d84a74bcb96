"""One HTTP/1.1 request forwarded by the proxy (to the gateway or to an origin) and its response
relayed back as it arrives (RunSSE is one long response), watching the client for a hang-up."""
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx

from .http1 import ClientHttp, HttpError, RequestBody, RequestHead, forwardable_headers
from .limits import ProxyLimits, ProxyStats

UPSTREAM_URL_HEADER = "x-server-upstream-url"


class ClientGone(Exception):
    """The client hung up while its response was relayed."""


class RequestForwarder:
    """Sends a request on with its body streamed, and relays the response back to the client.
    `gateway_headers` go on every request to the gateway (a client's own copies are dropped).
    A body the client cuts short ends the request to the upstream unfinished: the upstream sees
    its connection close mid-body, never a complete request."""

    def __init__(self, limits: ProxyLimits, stats: ProxyStats, gateway_headers: Sequence[tuple[str, str]]) -> None:
        self.limits = limits
        self.stats = stats
        self._gateway_headers = list(gateway_headers)

    async def forward(
        self, http: ClientHttp, head: RequestHead, client: httpx.AsyncClient, url: httpx.URL, upstream_url: str | None, **options: Any
    ) -> bool:
        """Forward one request (`send`, with its `options`) and relay its response; whether the
        client connection can carry another one."""
        return await self.relay(http, head, await self.send(http, head, client, url, upstream_url, **options))

    async def send(
        self,
        http: ClientHttp,
        head: RequestHead,
        client: httpx.AsyncClient,
        url: httpx.URL,
        upstream_url: str | None,
        *,
        to_gateway: bool,
        content: bytes | None = None,
        drop: frozenset[str] = frozenset(),
        add: Sequence[tuple[str, str]] = (),
    ) -> httpx.Response:
        """Send one request on, its body streamed (or `content`); the response, its body unread.
        `drop`/`add`: headers of the client's left out / added."""
        dropped = {"expect", UPSTREAM_URL_HEADER, *(name for name, _ in self._gateway_headers), *drop}
        payload: bytes | RequestBody | None = content
        if content is None:
            body = http.body(head, self.limits.max_body_bytes, self.limits.body_seconds)
            payload = None if body.empty else body
            if http.expects_continue:
                http.informational(100)  # we stream the body on as it comes: the client need not wait
        else:
            dropped.add("content-length")  # httpx gives the one of `content`
        headers = [*forwardable_headers(head.headers, dropped), *add]
        if upstream_url is not None:
            headers.append((UPSTREAM_URL_HEADER, upstream_url))
        if to_gateway:
            headers.extend(self._gateway_headers)
        # httpx.Request directly (not client.build_request): no client default headers are added.
        request = httpx.Request(head.method, url, headers=headers, content=payload)
        try:
            return await client.send(request, stream=True)
        except HttpError:
            raise
        except httpx.TimeoutException:
            raise HttpError(504, f"timed out talking to {url.host}:{url.port or ''}") from None
        except httpx.HTTPError as exc:
            raise HttpError(502, f"{url.host}:{url.port or ''} unreachable: {exc.__class__.__name__}") from None

    async def relay(self, http: ClientHttp, head: RequestHead, response: httpx.Response) -> bool:
        """Relay a response back to the client as it arrives, then close it; whether the client
        connection can carry another request."""
        try:
            return await self._relay_response(http, head, response)
        finally:
            await response.aclose()

    async def _relay_response(self, http: ClientHttp, head: RequestHead, response: httpx.Response) -> bool:
        raw_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers.raw]
        headers = forwardable_headers(raw_headers)
        # A request body the upstream did not read to the end leaves the connection unusable.
        if not (head.keep_alive and http.request_done):
            headers.append(("Connection", "close"))
        http.start_response(response.status_code, response.reason_phrase, headers)
        await self.drain(http.writer)

        # While we wait on the upstream, watch the client: a hang-up must close the upstream
        # response promptly (for RunSSE that is how the gateway learns the transport detached).
        task = asyncio.current_task()
        assert task is not None
        state = {"gone": False}
        watch = asyncio.ensure_future(http.reader.read(1))

        def on_watch(done: asyncio.Future[bytes]) -> None:
            if done.cancelled():
                return
            if done.exception() is not None or done.result() == b"":
                state["gone"] = True
                task.cancel()

        watch.add_done_callback(on_watch)
        try:
            async for chunk in response.aiter_raw():
                if chunk:
                    http.send_body(chunk)
                    await self.drain(http.writer)
            http.end_response()
            await self.drain(http.writer)
        except asyncio.CancelledError:
            if state["gone"] and task.uncancel() == 0:
                raise ClientGone() from None
            raise
        except httpx.HTTPError:
            # The upstream broke mid-response: closing without the body's end tells the client.
            self.stats.errors += 1
            return False
        finally:
            watch.remove_done_callback(on_watch)
            if not watch.done():
                watch.cancel()
                # Let the read unwind before anyone reads this stream again (unread data stays buffered).
                await asyncio.gather(watch, return_exceptions=True)
        if watch.done() and not watch.cancelled() and watch.exception() is None:
            http.take_pipelined(watch.result())  # the first byte of a pipelined next request
        return http.reusable

    async def drain(self, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(self.limits.write_seconds):
            await writer.drain()
