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
import logging
import ssl
from collections.abc import Callable, Sequence

import httpx

from ..http_client import passthrough_client
from .ca import LocalCA
from .dialer import UpstreamDialer
from .exchange import UPSTREAM_URL_HEADER, ClientGone, Exchange, RequestForwarder
from .h2relay import H2Relay
from .http1 import HttpError, RequestHead, parse_request_head, read_request_head, simple_response
from .limits import ProxyLimits, ProxyStats
from .targets import TunnelOrigin, format_host, is_cursor_host, origin_form, parse_authority
from .tunnel import pipe

log = logging.getLogger("cursor_byok.interceptor")

HEALTH_PATH = "/__byok-proxy__/healthz"


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
        self._forwarder = RequestForwarder(self.limits, self.stats, self._gateway_headers)
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
        return f"http://{format_host(self.listen_host)}:{self.port}"

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
        except (ConnectionError, ssl.SSLError, TimeoutError, ClientGone, asyncio.IncompleteReadError):
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
                await self._relay_h2(reader, writer, TunnelOrigin(host, port))
            else:
                await self._serve_requests(reader, writer, TunnelOrigin(host, port))
            return
        up_reader, up_writer = await self.dialer.open(host, port)
        self.stats.raw_tunnels += 1
        try:
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await writer.drain()
            await self._pipe(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()

    async def _relay_h2(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, origin: TunnelOrigin) -> None:
        def counted() -> None:
            self.stats.gateway_requests += 1

        relay = H2Relay(reader, writer, origin, self._gateway, self._gateway_headers, UPSTREAM_URL_HEADER, counted)
        await relay.serve(self.limits.idle_seconds)

    # ---- HTTP exchanges ------------------------------------------------------------------
    async def _serve_requests(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        origin: TunnelOrigin | None,
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
        origin: TunnelOrigin | None,
    ) -> Exchange:
        if origin is not None:
            path = origin_form(head.target)
            if head.is_upgrade:
                await self._upgrade_to_upstream(origin, raw, reader, writer)
                return Exchange(keep_alive=False)
            url = self._gateway.copy_with(raw_path=path.encode("ascii"))
            assert self._gateway_client is not None
            self.stats.gateway_requests += 1
            return await self._forwarder.forward(head, reader, writer, self._gateway_client, url, origin.url(path), to_gateway=True)

        if head.target.startswith("/"):
            if head.method in ("GET", "HEAD") and head.target == HEALTH_PATH:
                writer.write(b"HTTP/1.1 204 No Content\r\nx-cursor-byok-proxy: 1\r\n\r\n")
                await writer.drain()
                return Exchange(keep_alive=head.keep_alive)
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
            return await self._forwarder.forward(head, reader, writer, self._gateway_client, url, str(target), to_gateway=True)
        assert self._origin_client is not None
        self.stats.origin_requests += 1
        return await self._forwarder.forward(head, reader, writer, self._origin_client, target, None, to_gateway=False)

    # ---- pass-through --------------------------------------------------------------------
    async def _upgrade_to_upstream(
        self, origin: TunnelOrigin, raw_head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
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
        self, a_reader: asyncio.StreamReader, a_writer: asyncio.StreamWriter, b_reader: asyncio.StreamReader, b_writer: asyncio.StreamWriter
    ) -> None:
        await pipe(a_reader, a_writer, b_reader, b_writer, idle_seconds=self.limits.tunnel_idle_seconds, write_seconds=self.limits.write_seconds)
