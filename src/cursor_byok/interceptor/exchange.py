"""One HTTP/1.1 request forwarded by the proxy (to the gateway or to an origin) and its response
relayed back as it arrives (RunSSE is one long response), watching the client for a hang-up."""
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from .http1 import HttpError, RequestBody, RequestHead, forwardable_headers, response_head
from .limits import ProxyLimits, ProxyStats

UPSTREAM_URL_HEADER = "x-server-upstream-url"
_NO_BODY_STATUSES = frozenset({204, 304})


@dataclass(slots=True)
class Exchange:
    keep_alive: bool
    leftover: bytes = b""


class ClientGone(Exception):
    """The client hung up while its response was relayed."""


class RequestForwarder:
    """Sends a request on with its body streamed, and relays the response back to the client.
    `gateway_headers` go on every request to the gateway (a client's own copies are dropped)."""

    def __init__(self, limits: ProxyLimits, stats: ProxyStats, gateway_headers: Sequence[tuple[str, str]]) -> None:
        self.limits = limits
        self.stats = stats
        self._gateway_headers = list(gateway_headers)

    async def forward(
        self,
        head: RequestHead,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client: httpx.AsyncClient,
        url: httpx.URL,
        upstream_url: str | None,
        *,
        to_gateway: bool,
    ) -> Exchange:
        body = RequestBody(reader, head, self.limits.max_body_bytes)
        drop = {"expect", UPSTREAM_URL_HEADER, *(name for name, _ in self._gateway_headers)}
        if (head.get("expect") or "").lower() == "100-continue":
            # We stream the body on as it comes; tell the client not to wait.
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        headers = forwardable_headers(head.headers, drop)
        if upstream_url is not None:
            headers.append((UPSTREAM_URL_HEADER, upstream_url))
        if to_gateway:
            headers.extend(self._gateway_headers)
        # httpx.Request directly (not client.build_request): no client default headers are added.
        request = httpx.Request(head.method, url, headers=headers, content=None if body.empty else body)
        try:
            response = await client.send(request, stream=True)
        except HttpError:
            raise
        except httpx.TimeoutException:
            raise HttpError(504, f"timed out talking to {url.host}:{url.port or ''}") from None
        except httpx.HTTPError as exc:
            raise HttpError(502, f"{url.host}:{url.port or ''} unreachable: {exc.__class__.__name__}") from None
        try:
            return await self._relay_response(head, body, reader, writer, response)
        finally:
            await response.aclose()

    async def _relay_response(
        self,
        head: RequestHead,
        body: RequestBody,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        response: httpx.Response,
    ) -> Exchange:
        raw_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers.raw]
        headers = forwardable_headers(raw_headers)
        has_body = head.method != "HEAD" and response.status_code not in _NO_BODY_STATUSES and response.status_code >= 200
        has_length = any(k.lower() == "content-length" for k, _ in headers)
        chunked = has_body and not has_length
        # A request body the upstream did not read to the end leaves the connection unusable.
        keep_alive = head.keep_alive and body.done
        if chunked:
            headers.append(("Transfer-Encoding", "chunked"))
        if not keep_alive:
            headers.append(("Connection", "close"))
        writer.write(response_head(response.status_code, response.reason_phrase, headers))
        await self.drain(writer)
        if not has_body:
            return Exchange(keep_alive=keep_alive)

        # While we wait on the upstream, watch the client: a hang-up must close the upstream
        # response promptly (for RunSSE that is how the gateway learns the transport detached).
        task = asyncio.current_task()
        assert task is not None
        state = {"gone": False}
        watch = asyncio.ensure_future(reader.read(1))

        def on_watch(done: asyncio.Future[bytes]) -> None:
            if not done.cancelled() and done.exception() is None and done.result() == b"":
                state["gone"] = True
                task.cancel()
            elif not done.cancelled() and done.exception() is not None:
                state["gone"] = True
                task.cancel()

        watch.add_done_callback(on_watch)
        try:
            async for chunk in response.aiter_raw():
                if not chunk:
                    continue
                if chunked:
                    writer.writelines((b"%x\r\n" % len(chunk), chunk, b"\r\n"))
                else:
                    writer.write(chunk)
                await self.drain(writer)
            if chunked:
                writer.write(b"0\r\n\r\n")
            await self.drain(writer)
        except asyncio.CancelledError:
            if state["gone"] and task.uncancel() == 0:
                raise ClientGone() from None
            raise
        except httpx.HTTPError:
            # The upstream broke mid-response: closing without the final chunk tells the client.
            self.stats.errors += 1
            return Exchange(keep_alive=False)
        finally:
            watch.remove_done_callback(on_watch)
            if not watch.done():
                watch.cancel()
                # Let the read unwind before anyone reads this stream again (unread data stays buffered).
                await asyncio.gather(watch, return_exceptions=True)
        leftover = b""
        if watch.done() and not watch.cancelled() and watch.exception() is None:
            leftover = watch.result()  # the first byte of a pipelined next request
        return Exchange(keep_alive=keep_alive, leftover=leftover)

    async def drain(self, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(self.limits.write_seconds):
            await writer.drain()
