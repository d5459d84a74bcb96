"""What a client asked the proxy for: the CONNECT authority, the request target inside a tunnel,
and the intercepted origin a tunnel was opened for. Pure parsing; errors are `HttpError(400)`."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import httpx

from .ca import is_permitted_host
from .http1 import HttpError


def is_cursor_host(host: str) -> bool:
    """The default interception rule: cursor.sh itself and every subdomain (the CA's permitted names)."""
    return is_permitted_host(host)


@dataclass(frozen=True, slots=True)
class TunnelOrigin:
    """The intercepted host a TLS tunnel was opened for."""

    host: str
    port: int

    def url(self, path: str) -> str:
        netloc = format_host(self.host) + ("" if self.port == 443 else f":{self.port}")
        return f"https://{netloc}{path}"


def format_host(host: str) -> str:
    """A host as it goes in a URL: an IPv6 address in brackets."""
    try:
        return f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        return host


def origin_form(target: str) -> str:
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
