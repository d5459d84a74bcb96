"""Connections to the hosts the proxy does not intercept: direct, or through the proxy Cursor used
before we took its place (a corporate proxy), with an HTTP CONNECT per tunnel.

On a network that only lets traffic out through a corporate proxy, a direct dial hangs or fails;
chaining keeps every other host reachable for Cursor exactly as before `cursor enable`.
"""
from __future__ import annotations

import asyncio
import base64
import ssl
from urllib.parse import unquote, urlsplit

import httpx

from .http1 import HttpError


class UpstreamDialer:
    """Opens a byte stream to host:port, through `proxy_url` (an http:// proxy) when one is set."""

    def __init__(self, proxy_url: str | None, connect_seconds: float) -> None:
        self._connect_seconds = connect_seconds
        self._proxy: tuple[str, int] | None = None
        self._auth: str | None = None
        self.shown = ""  # the proxy as it may be printed (credentials masked)
        if proxy_url:
            parts = urlsplit(proxy_url)
            if parts.scheme != "http" or not parts.hostname:
                raise ValueError(f"upstream proxy must be an http:// URL, got {parts.scheme}://{parts.hostname}")
            self._proxy = (parts.hostname, parts.port or 80)
            netloc = parts.netloc.rpartition("@")[2]
            self.shown = f"http://{'***@' if parts.username else ''}{netloc}"
            if parts.username is not None:
                user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
                self._auth = "Basic " + base64.b64encode(user_pass.encode("utf-8")).decode("ascii")

    @property
    def http_proxy(self) -> httpx.Proxy | None:
        """The proxy for plain-HTTP requests through an HTTP client (credentials as a header)."""
        if self._proxy is None:
            return None
        host, port = self._proxy
        netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return httpx.Proxy(f"http://{netloc}", headers={"Proxy-Authorization": self._auth} if self._auth else None)

    async def open(
        self, host: str, port: int, *, tls: ssl.SSLContext | None = None, server_hostname: str | None = None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to host:port (TLS on top when `tls` is given). HttpError(502) when it fails."""
        try:
            async with asyncio.timeout(self._connect_seconds):
                if self._proxy is None:
                    return await asyncio.open_connection(host, port, ssl=tls, server_hostname=server_hostname if tls else None)
                reader, writer = await asyncio.open_connection(*self._proxy)
                try:
                    await self._tunnel(reader, writer, host, port)
                    if tls is not None:
                        await writer.start_tls(tls, server_hostname=server_hostname or host)
                except BaseException:
                    writer.close()
                    raise
                return reader, writer
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            via = f" through {self.shown}" if self._proxy else ""
            raise HttpError(502, f"cannot connect to {host}:{port}{via}: {exc.__class__.__name__}") from None

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, port: int) -> None:
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        head = f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
        if self._auth:
            head += f"Proxy-Authorization: {self._auth}\r\n"
        writer.write((head + "\r\n").encode("latin-1"))
        await writer.drain()
        try:
            response = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            raise HttpError(502, f"the upstream proxy {self.shown} gave no valid answer to CONNECT {authority}") from None
        status_line = response.split(b"\r\n", 1)[0].decode("latin-1", "replace")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].startswith("2"):
            raise HttpError(502, f"the upstream proxy {self.shown} refused CONNECT {authority}: {status_line[:100]}")


__all__ = ["UpstreamDialer"]
