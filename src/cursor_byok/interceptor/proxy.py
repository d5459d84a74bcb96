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
import dataclasses
import json
import logging
import ssl
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import httpx

from ..http_client import passthrough_client
from .access import REALM, ProxyAuthRequired, credentials_match, refuse_local_target
from .ca import LocalCA
from .clients import Client, ClientConnections
from .dialer import UpstreamDialer
from .exchange import UPSTREAM_URL_HEADER, ClientGone, RequestForwarder
from .h2relay import H2Relay
from .http1 import ClientHttp, HttpError, RequestHead, simple_response
from .limits import ProxyLimits, ProxyStats
from .targets import TunnelOrigin, format_host, is_cursor_host, origin_form, parse_authority
from .tunnel import pipe

if TYPE_CHECKING:  # protobuf: loaded only in front of a team server
    from .team import TeamRoutes

log = logging.getLogger("cursor_byok.interceptor")

HEALTH_PATH = "/__byok-proxy__/healthz"
STATS_PATH = "/__byok-proxy__/stats"  # its counters and bounded resources, as JSON (authenticated)


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
        client_token: str = "",
        relay_loopback: bool = False,
        team: TeamRoutes | None = None,
        gateway_tls: ssl.SSLContext | None = None,
        cursor_base_url: str | None = None,
    ) -> None:
        """`team`: in front of a team server (the gateway): which requests go to it, the rest going
        to Cursor's host itself (or to `cursor_base_url`, a stand-in, when given). `gateway_tls`:
        the CAs an https gateway is verified with."""
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
        # The server's auth token: when set, every client must present it (see access.py).
        self._client_token = client_token
        # Tests relay to stand-ins on loopback; a real proxy relays there only to the gateway.
        self._relay_loopback = relay_loopback
        self._team = team
        if team is not None:
            ca.alpn = ("http/1.1",)  # routes are decided per HTTP/1.1 request (team.py)
        self._gateway_tls = gateway_tls
        self._cursor_base = httpx.URL(cursor_base_url) if cursor_base_url else None
        self._local_allowed = {(self._gateway.host.lower(), self._gateway.port or 80)}
        self.stats = ProxyStats()
        self._forwarder = RequestForwarder(self.limits, self.stats, self._gateway_headers)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._clients = ClientConnections(self.limits.max_connections)
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
        self._gateway_client = passthrough_client(timeout=timeout, trust_env=False, verify=self._gateway_tls or True)
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
        client = self._clients.open(writer)
        try:
            await self._serve_connection(client, reader, writer)
        except HttpError as exc:
            extra = [("Proxy-Authenticate", f'Basic realm="{REALM}"')] if isinstance(exc, ProxyAuthRequired) else []
            await self._send_error(writer, exc.status, str(exc), extra)
        except (ConnectionError, ssl.SSLError, TimeoutError, ClientGone):
            pass
        except asyncio.CancelledError:
            # Only stop() cancels connection tasks. Ending normally keeps asyncio's stream
            # callback from logging the cancellation as an error.
            pass
        except Exception:
            self.stats.errors += 1
            log.exception("proxy connection failed")
        finally:
            self._clients.close(client)
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 2)

    async def _send_error(self, writer: asyncio.StreamWriter, status: int, message: str, headers: Sequence[tuple[str, str]] = ()) -> None:
        self.stats.errors += 1
        with contextlib.suppress(Exception):
            writer.write(simple_response(status, f"cursor-byok proxy: {message}", headers=headers))
            await asyncio.wait_for(writer.drain(), 2)

    def _http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> ClientHttp:
        return ClientHttp(reader, writer, max_head_bytes=self.limits.max_head_bytes, head_seconds=self.limits.head_seconds)

    async def _serve_connection(self, client: Client, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        http = self._http(reader, writer)
        head = await http.next_request(self.limits.first_byte_seconds)  # a timeout closes quietly
        if head is None:
            return
        if head.method == "CONNECT":
            self._authenticate(head)  # once: every request inside the tunnel is the client's
            client.authenticated = bool(self._client_token)
            await self._on_connect(client, head, http.take_tunnel_bytes(), reader, writer)
        else:
            await self._serve_requests(client, http, None, first=head)

    async def _on_connect(
        self, client: Client, head: RequestHead, early: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """`early`: what the client sent past the CONNECT head before our answer."""
        host, port = parse_authority(head.target)
        if self._intercept(host):
            if early:
                raise HttpError(400, "data sent before the tunnel was established")
            self.stats.intercepted_tunnels += 1
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await writer.drain()
            ctx = self._ca.server_context(host)
            await writer.start_tls(ctx, ssl_handshake_timeout=self.limits.handshake_seconds)
            if writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2":
                await self._relay_h2(client, reader, writer, TunnelOrigin(host, port))
            else:
                await self._serve_requests(client, self._http(reader, writer), TunnelOrigin(host, port))
            return
        await self._refuse_local(host, port)
        up_reader, up_writer = await self.dialer.open(host, port)
        self.stats.raw_tunnels += 1
        try:
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await writer.drain()
            if early:
                up_writer.write(early)
            client.busy += 1  # a tunnel's traffic is opaque: never taken for idle
            await self._pipe(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()

    async def _relay_h2(self, client: Client, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, origin: TunnelOrigin) -> None:
        def counted() -> None:
            self.stats.gateway_requests += 1

        relay = H2Relay(reader, writer, origin, self._gateway, self._gateway_headers, UPSTREAM_URL_HEADER, counted)
        client.streams = relay.open_streams
        await relay.serve(self.limits.idle_seconds)

    # ---- HTTP exchanges ------------------------------------------------------------------
    async def _serve_requests(self, client: Client, http: ClientHttp, origin: TunnelOrigin | None, first: RequestHead | None = None) -> None:
        """Serve requests on one client connection (keep-alive) until it closes or must close."""
        while True:
            head = first or await http.next_request(self.limits.idle_seconds)  # a timeout closes quietly
            first = None
            if head is None:
                return
            client.busy += 1
            try:
                reusable = await self._exchange(http, head, origin)
            finally:
                client.busy -= 1
                self._clients.touch(client)
            client.authenticated = bool(self._client_token)  # it passed `_authenticate`: it gave the token
            if not reusable:
                return

    async def _exchange(self, http: ClientHttp, head: RequestHead, origin: TunnelOrigin | None) -> bool:
        """Answer one request; whether the connection can carry another one."""
        if origin is not None:
            path = origin_form(head.target)
            if head.is_upgrade:
                await self._upgrade_to_upstream(origin, head.raw() + http.take_tunnel_bytes(), http.reader, http.writer)
                return False
            if self._team is not None:
                return await self._team_or_cursor(self._team, http, head, origin, path)
            url = self._gateway.copy_with(raw_path=path.encode("ascii"))
            assert self._gateway_client is not None
            self.stats.gateway_requests += 1
            return await self._forwarder.forward(http, head, self._gateway_client, url, origin.url(path), to_gateway=True)

        if head.target.startswith("/"):
            if head.method in ("GET", "HEAD") and head.target == HEALTH_PATH:
                return await self._answer_locally(http, head, 204, [("x-cursor-byok-proxy", "1")])
            if head.method == "GET" and head.target == STATS_PATH:
                self._authenticate(head)
                stats = {**dataclasses.asdict(self.stats), "open_connections": len(self._clients), "connections_shed": self._clients.shed}
                body = json.dumps({**stats, "cached_leaves": self._ca.cached_leaves()}).encode()
                return await self._answer_locally(http, head, 200, [("content-type", "application/json")], body)
            raise HttpError(400, "this is a proxy: send absolute-form requests or CONNECT")
        self._authenticate(head)
        try:
            head.target.encode("ascii")
            target = httpx.URL(head.target)
        except (httpx.InvalidURL, UnicodeEncodeError):
            raise HttpError(400, "malformed request target") from None
        if target.scheme != "http" or not target.host:
            raise HttpError(400, "only http:// absolute-form requests are forwarded (use CONNECT for https)")
        if head.is_upgrade:
            raise HttpError(501, "upgrades over plain-HTTP proxy requests are not supported")
        if self._intercept(target.host) and self._team is None:  # a team server takes no plain HTTP
            url = self._gateway.copy_with(raw_path=target.raw_path)
            assert self._gateway_client is not None
            self.stats.gateway_requests += 1
            return await self._forwarder.forward(http, head, self._gateway_client, url, str(target), to_gateway=True)
        await self._refuse_local(target.host, target.port or 80)
        assert self._origin_client is not None
        self.stats.origin_requests += 1
        return await self._forwarder.forward(http, head, self._origin_client, target, None, to_gateway=False)

    async def _answer_locally(self, http: ClientHttp, head: RequestHead, status: int, headers: list[tuple[str, str]], body: bytes = b"") -> bool:
        if head.has_body:
            raise HttpError(400, "no body is taken here")
        return await self._answer(http, head, status, headers, body)

    async def _answer(self, http: ClientHttp, head: RequestHead, status: int, headers: list[tuple[str, str]], body: bytes = b"") -> bool:
        """Answer the request (its body already read) from here."""
        http.start_response(status, "", [*headers, ("content-length", str(len(body)))] if status != 204 else headers)
        if body and head.method != "HEAD":
            http.send_body(body)
        http.end_response()
        await http.writer.drain()
        return http.reusable

    def _authenticate(self, head: RequestHead) -> None:
        if self._client_token and not credentials_match(head.get("proxy-authorization"), self._client_token):
            raise ProxyAuthRequired()

    async def _refuse_local(self, host: str, port: int) -> None:
        if not self._relay_loopback and self.dialer.http_proxy is None:
            await refuse_local_target(host, port, self._local_allowed)

    # ---- in front of a team server ----------------------------------------------------------
    async def _team_or_cursor(self, team: TeamRoutes, http: ClientHttp, head: RequestHead, origin: TunnelOrigin, path: str) -> bool:
        route = path.partition("?")[0]
        if team.is_agent_rpc(head.method, route):
            if http.expects_continue:
                http.informational(100)
            body = b"".join([chunk async for chunk in http.body(head, self.limits.max_body_bytes, self.limits.body_seconds)])
            encoding = "gzip" if "gzip" in (head.get("connect-content-encoding") or head.get("grpc-encoding") or "") else "identity"
            if await team.to_team(route, body, encoding):
                return await self._to_team(team, http, head, path, body)
            return await self._to_cursor(http, head, origin, path, body)
        ours = team.listed(head.method, route)
        if ours:
            return await self._model_list(http, head, origin, path, ours)
        return await self._to_cursor(http, head, origin, path)

    def _cursor_url(self, origin: TunnelOrigin, path: str) -> httpx.URL:
        if self._cursor_base is not None:
            return self._cursor_base.copy_with(raw_path=path.encode("ascii"))
        return httpx.URL(origin.url(path))

    async def _to_cursor(self, http: ClientHttp, head: RequestHead, origin: TunnelOrigin, path: str, content: bytes | None = None) -> bool:
        assert self._origin_client is not None
        self.stats.origin_requests += 1
        return await self._forwarder.forward(http, head, self._origin_client, self._cursor_url(origin, path), None, to_gateway=False, content=content)

    async def _to_team(self, team: TeamRoutes, http: ClientHttp, head: RequestHead, path: str, body: bytes) -> bool:
        assert self._gateway_client is not None
        self.stats.gateway_requests += 1
        url = self._gateway.copy_with(raw_path=path.encode("ascii"))
        try:
            response = await self._forwarder.send(http, head, self._gateway_client, url, None, to_gateway=True, content=body, drop=team.cursor_only_headers)
        except HttpError as exc:  # no answer: said as Cursor shows a Connect error, naming the team server
            log.warning("the team server does not answer", extra={"team_server": team.team.url, "error": str(exc)})
            return await self._connect_error(http, head, 503, "unavailable", f"the team server {team.team.url} does not answer: {exc}")
        if response.status_code != 401:
            return await self._forwarder.relay(http, head, response)
        await response.aclose()
        log.error("the team server refused the developer token", extra={"team_server": team.team.url})
        return await self._connect_error(http, head, 401, "unauthenticated", team.refusal())

    async def _connect_error(self, http: ClientHttp, head: RequestHead, status: int, code: str, message: str) -> bool:
        error = json.dumps({"code": code, "message": message}).encode()
        return await self._answer(http, head, status, [("content-type", "application/json")], error)

    async def _model_list(self, http: ClientHttp, head: RequestHead, origin: TunnelOrigin, path: str, ours: bytes) -> bool:
        """Cursor's answer with the team's entries added; an answer they cannot be added to
        (an error, another codec, compressed) goes back as Cursor gave it."""
        assert self._origin_client is not None
        self.stats.origin_requests += 1
        identity = [("accept-encoding", "identity")]
        response = await self._forwarder.send(
            http, head, self._origin_client, self._cursor_url(origin, path), None, to_gateway=False, drop=frozenset({"accept-encoding"}), add=identity
        )
        mergeable = response.is_success and response.headers.get("content-type") == "application/proto" and "content-encoding" not in response.headers
        if not mergeable:
            return await self._forwarder.relay(http, head, response)
        try:
            theirs = await response.aread()
        finally:
            await response.aclose()
        merged = theirs + ours
        return await self._answer(http, head, response.status_code, [("content-type", "application/proto")], merged)

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
