"""A loopback HTTP proxy for the Cursor IDE that terminates TLS only for Cursor's own hosts.

CONNECT to an intercepted host (default: cursor.sh and *.cursor.sh): answer 200, do the TLS server
handshake with a leaf certificate from our local CA (ALPN h2 or http/1.1), then read HTTP/1.1
requests off the tunnel and forward each one to the gateway over plain HTTP with the original URL in
`x-server-upstream-url` (with `h2`, each HTTP/2 stream goes to the gateway as an h2c stream:
`h2relay.py`). Responses stream back as they arrive (RunSSE is one long response).
WebSocket upgrades on intercepted hosts go to the real host instead (the gateway serves none).
CONNECT to any other host is a raw TCP tunnel: bytes are piped untouched, no TLS termination.
Plain-HTTP absolute-form requests are forwarded (to the gateway for intercepted hosts). With an
`upstream_proxy` (the corporate proxy Cursor used before), everything not sent to the gateway goes
through it.
"""
from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from ..http_client import passthrough_client
from .ca import LocalCA, is_permitted_host
from .dialer import UpstreamDialer
from .h2relay import H2Relay
from .http1 import (
    READ_SIZE,
    HttpError,
    RequestBody,
    RequestHead,
    forwardable_headers,
    parse_request_head,
    read_request_head,
    response_head,
    simple_response,
)

log = logging.getLogger("cursor_byok.interceptor")

UPSTREAM_URL_HEADER = "x-server-upstream-url"
HEALTH_PATH = "/__byok-proxy__/healthz"
_NO_BODY_STATUSES = frozenset({204, 304})


def is_cursor_host(host: str) -> bool:
    """The default interception rule: cursor.sh itself and every subdomain (the CA's permitted names)."""
    return is_permitted_host(host)


@dataclass(frozen=True, slots=True)
class ProxyLimits:
    max_head_bytes: int = 64 * 1024
    max_body_bytes: int = 256 * 1024 * 1024
    idle_seconds: float = 300.0  # waiting for the next request on a connection
    handshake_seconds: float = 15.0
    connect_seconds: float = 10.0
    write_seconds: float = 120.0  # a client that stops reading for this long is dropped
    tunnel_idle_seconds: float = 3600.0  # raw tunnels (WebSockets may sit quiet for a while)


@dataclass(slots=True)
class ProxyStats:
    connections: int = 0
    intercepted_tunnels: int = 0
    raw_tunnels: int = 0
    gateway_requests: int = 0
    origin_requests: int = 0
    upgrades: int = 0
    errors: int = 0


@dataclass(frozen=True, slots=True)
class _Origin:
    """The intercepted host a TLS tunnel was opened for."""

    host: str
    port: int

    def url(self, path: str) -> str:
        netloc = _format_host(self.host) + ("" if self.port == 443 else f":{self.port}")
        return f"https://{netloc}{path}"


@dataclass(slots=True)
class _Exchange:
    keep_alive: bool
    leftover: bytes = b""


class _ClientGone(Exception):
    pass


def _format_host(host: str) -> str:
    try:
        return f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        return host


def _origin_form(target: str) -> str:
    """The path+query of a request target inside a tunnel (clients send origin-form; accept absolute)."""
    if target.startswith("/"):
        path = target
    else:
        try:
            absolute = httpx.URL(target)
        except httpx.InvalidURL:
            raise HttpError(400, "malformed request target") from None
        if absolute.scheme not in ("http", "https") or not absolute.host:
            raise HttpError(400, "malformed request target")
        path = absolute.raw_path.decode("ascii")
    if not path.isascii() or any(ord(c) <= 0x20 or ord(c) == 0x7F for c in path):  # no spaces or controls
        raise HttpError(400, "malformed request target")
    return path


def parse_authority(authority: str, default_port: int = 443) -> tuple[str, int]:
    """`host:port` / `[v6]:port` → (host, port). Raises HttpError(400)."""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise HttpError(400, "malformed CONNECT authority")
        host, rest = authority[1:end], authority[end + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise HttpError(400, "malformed CONNECT authority")
    else:
        host, sep, port_text = authority.rpartition(":")
        if not sep:
            host, port_text = authority, ""
    if not host:
        raise HttpError(400, "malformed CONNECT authority")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise HttpError(400, "malformed CONNECT port")
    return host, int(port_text)


class InterceptingProxy:
    """See the module docstring. `start()` binds; `port` is the bound port; `stop()` closes everything."""

    def __init__(
        self,
        ca: LocalCA,
        gateway_url: str,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        intercept: Callable[[str], bool] = is_cursor_host,
        *,
        limits: ProxyLimits | None = None,
        upstream_tls: ssl.SSLContext | None = None,
        upstream_address: Callable[[str, int], tuple[str, int]] | None = None,
        upstream_proxy: str | None = None,
        gateway_headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        self._ca = ca
        self._gateway = httpx.URL(gateway_url)
        if self._gateway.scheme not in ("http", "https"):
            raise ValueError(f"gateway_url must be http(s): {gateway_url!r}")
        self.listen_host = listen_host
        self._listen_port = listen_port
        self._intercept = intercept
        self.limits = limits or ProxyLimits()
        self.dialer = UpstreamDialer(upstream_proxy, self.limits.connect_seconds)
        # Used only for WebSocket upgrades on intercepted hosts, which go to the real host.
        self._upstream_tls = upstream_tls
        self._upstream_address = upstream_address or (lambda host, port: (host, port))
        # Added to every request sent to the gateway (its mark of our requests, the auth token);
        # a client's own copies of these headers are dropped.
        self._gateway_headers = list(gateway_headers)
        self.stats = ProxyStats()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._gateway_client: httpx.AsyncClient | None = None
        self._origin_client: httpx.AsyncClient | None = None

    # ---- lifecycle -----------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("proxy is not started")
        return self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://{_format_host(self.listen_host)}:{self.port}"

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("proxy already started")
        timeout = httpx.Timeout(
            connect=self.limits.connect_seconds, read=None, write=self.limits.write_seconds, pool=None
        )
        # trust_env=False: an HTTP(S)_PROXY in the environment may well point at this very proxy.
        self._gateway_client = passthrough_client(timeout=timeout, trust_env=False)
        self._origin_client = passthrough_client(timeout=timeout, trust_env=False, proxy=self.dialer.http_proxy)
        try:
            self._server = await asyncio.start_server(
                self._on_connection,
                self.listen_host,
                self._listen_port,
                limit=self.limits.max_head_bytes,
            )
        except BaseException:
            await self._close_clients()
            raise
        log.debug("proxy listening", extra={"proxy_url": self.url, "gateway": str(self._gateway)})

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)
        await self._close_clients()

    async def _close_clients(self) -> None:
        for client in (self._gateway_client, self._origin_client):
            if client is not None:
                await client.aclose()
        self._gateway_client = self._origin_client = None

    async def __aenter__(self) -> InterceptingProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---- connections ---------------------------------------------------------------------
    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.stats.connections += 1
        try:
            await self._serve_connection(reader, writer)
        except HttpError as exc:
            await self._send_error(writer, exc.status, str(exc))
        except (ConnectionError, ssl.SSLError, TimeoutError, _ClientGone, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # Only stop() cancels connection tasks. Ending normally keeps asyncio's stream
            # callback from logging the cancellation as an error.
            pass
        except Exception:
            self.stats.errors += 1
            log.exception("proxy connection failed")
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 2)

    async def _send_error(self, writer: asyncio.StreamWriter, status: int, message: str) -> None:
        self.stats.errors += 1
        with contextlib.suppress(Exception):
            writer.write(simple_response(status, f"cursor-byok proxy: {message}"))
            await asyncio.wait_for(writer.drain(), 2)

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(self.limits.idle_seconds):
            raw = await read_request_head(reader)
        if raw is None:
            return
        head = parse_request_head(raw)
        if head.method == "CONNECT":
            await self._on_connect(head, reader, writer)
        else:
            await self._serve_requests(reader, writer, None, first=(head, raw))

    async def _on_connect(self, head: RequestHead, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port = parse_authority(head.target)
        if self._intercept(host):
            self.stats.intercepted_tunnels += 1
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await writer.drain()
            ctx = self._ca.server_context(host)
            await writer.start_tls(ctx, ssl_handshake_timeout=self.limits.handshake_seconds)
            if writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2":
                await self._relay_h2(reader, writer, _Origin(host, port))
            else:
                await self._serve_requests(reader, writer, _Origin(host, port))
            return
        up_reader, up_writer = await self.dialer.open(host, port)
        self.stats.raw_tunnels += 1
        try:
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await writer.drain()
            await self._pipe(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()

    async def _relay_h2(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, origin: _Origin) -> None:
        def counted() -> None:
            self.stats.gateway_requests += 1

        relay = H2Relay(reader, writer, origin, self._gateway, self._gateway_headers, UPSTREAM_URL_HEADER, counted)
        await relay.serve(self.limits.idle_seconds)

    # ---- HTTP exchanges ------------------------------------------------------------------
    async def _serve_requests(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        origin: _Origin | None,
        first: tuple[RequestHead, bytes] | None = None,
    ) -> None:
        """Serve requests on one client connection (keep-alive) until it closes or must close."""
        leftover = b""
        while True:
            if first is not None:
                head, raw = first
                first = None
            else:
                try:
                    async with asyncio.timeout(self.limits.idle_seconds):
                        got = await read_request_head(reader, leftover)
                except TimeoutError:
                    return  # idle keep-alive connection: close quietly
                leftover = b""
                if got is None:
                    return
                raw = got
                head = parse_request_head(raw)
            result = await self._exchange(head, raw, reader, writer, origin)
            if not result.keep_alive:
                return
            leftover = result.leftover

    async def _exchange(
        self,
        head: RequestHead,
        raw: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        origin: _Origin | None,
    ) -> _Exchange:
        if origin is not None:
            path = _origin_form(head.target)
            if head.is_upgrade:
                await self._upgrade_to_upstream(origin, raw, reader, writer)
                return _Exchange(keep_alive=False)
            url = self._gateway.copy_with(raw_path=path.encode("ascii"))
            assert self._gateway_client is not None
            self.stats.gateway_requests += 1
            return await self._forward(head, reader, writer, self._gateway_client, url, origin.url(path))

        if head.target.startswith("/"):
            if head.method in ("GET", "HEAD") and head.target == HEALTH_PATH:
                writer.write(b"HTTP/1.1 204 No Content\r\nx-cursor-byok-proxy: 1\r\n\r\n")
                await writer.drain()
                return _Exchange(keep_alive=head.keep_alive)
            raise HttpError(400, "this is a proxy: send absolute-form requests or CONNECT")
        try:
            head.target.encode("ascii")
            target = httpx.URL(head.target)
        except (httpx.InvalidURL, UnicodeEncodeError):
            raise HttpError(400, "malformed request target") from None
        if target.scheme != "http" or not target.host:
            raise HttpError(400, "only http:// absolute-form requests are forwarded (use CONNECT for https)")
        if head.is_upgrade:
            raise HttpError(501, "upgrades over plain-HTTP proxy requests are not supported")
        if self._intercept(target.host):
            url = self._gateway.copy_with(raw_path=target.raw_path)
            assert self._gateway_client is not None
            self.stats.gateway_requests += 1
            return await self._forward(head, reader, writer, self._gateway_client, url, str(target))
        assert self._origin_client is not None
        self.stats.origin_requests += 1
        return await self._forward(head, reader, writer, self._origin_client, target, None)

    async def _forward(
        self,
        head: RequestHead,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client: httpx.AsyncClient,
        url: httpx.URL,
        upstream_url: str | None,
    ) -> _Exchange:
        body = RequestBody(reader, head, self.limits.max_body_bytes)
        to_gateway = client is self._gateway_client
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
    ) -> _Exchange:
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
        await self._drain(writer)
        if not has_body:
            return _Exchange(keep_alive=keep_alive)

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
                await self._drain(writer)
            if chunked:
                writer.write(b"0\r\n\r\n")
            await self._drain(writer)
        except asyncio.CancelledError:
            if state["gone"] and task.uncancel() == 0:
                raise _ClientGone() from None
            raise
        except httpx.HTTPError:
            # The upstream broke mid-response: closing without the final chunk tells the client.
            self.stats.errors += 1
            return _Exchange(keep_alive=False)
        finally:
            watch.remove_done_callback(on_watch)
            if not watch.done():
                watch.cancel()
                # Let the read unwind before anyone reads this stream again (unread data stays buffered).
                await asyncio.gather(watch, return_exceptions=True)
        leftover = b""
        if watch.done() and not watch.cancelled() and watch.exception() is None:
            leftover = watch.result()  # the first byte of a pipelined next request
        return _Exchange(keep_alive=keep_alive, leftover=leftover)

    async def _drain(self, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(self.limits.write_seconds):
            await writer.drain()

    # ---- pass-through --------------------------------------------------------------------
    async def _upgrade_to_upstream(
        self, origin: _Origin, raw_head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """A WebSocket (or other) upgrade on an intercepted host: splice it to the real host over TLS."""
        host, port = self._upstream_address(origin.host, origin.port)
        tls = self._upstream_tls or ssl.create_default_context()
        up_reader, up_writer = await self.dialer.open(host, port, tls=tls, server_hostname=origin.host)
        self.stats.upgrades += 1
        try:
            up_writer.write(raw_head)
            await up_writer.drain()
            await self._pipe(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()

    async def _pipe(
        self,
        a_reader: asyncio.StreamReader,
        a_writer: asyncio.StreamWriter,
        b_reader: asyncio.StreamReader,
        b_writer: asyncio.StreamWriter,
    ) -> None:
        """Copy bytes both ways until both sides are done or the tunnel idles out."""
        loop = asyncio.get_running_loop()
        idle = self.limits.tunnel_idle_seconds
        last = [loop.time()]

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while True:
                try:
                    async with asyncio.timeout(idle):
                        data = await src.read(READ_SIZE)
                except TimeoutError:
                    if loop.time() - last[0] < idle:
                        continue  # the other direction is alive
                    raise
                if not data:
                    if dst.can_write_eof():
                        dst.write_eof()  # half-close: the other direction may still talk
                        return
                    raise ConnectionResetError("peer closed")
                last[0] = loop.time()
                dst.write(data)
                async with asyncio.timeout(self.limits.write_seconds):
                    await dst.drain()

        tasks = [asyncio.ensure_future(copy(a_reader, b_writer)), asyncio.ensure_future(copy(b_reader, a_writer))]
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if any(t.exception() is not None for t in done if not t.cancelled()):
                    break
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

