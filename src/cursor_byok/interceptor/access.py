"""Who may use the proxy, and where it may go.

When the server requires its auth token, so does the proxy: Cursor sends the credentials of its
`http.proxy` URL (`http://cursor-byok:TOKEN@127.0.0.1:8788`) as `Proxy-Authorization: Basic`, and
anything else is answered 407 before a byte goes anywhere. Otherwise any local user could reach
the server through the proxy, which adds the token to what it forwards.

The proxy relays to Cursor's hosts (through the gateway) and to the internet; never to another
port of this machine (a local service that trusts loopback would be open to every local user).
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import ipaddress
import socket

from .http1 import HttpError

REALM = "cursor-byok"


class ProxyAuthRequired(HttpError):
    """407: the client gave no (or the wrong) proxy credentials."""

    def __init__(self) -> None:
        super().__init__(407, "proxy credentials required: use the http.proxy URL `cursor-byok cursor enable` writes")


def credentials_match(header: str | None, token: str) -> bool:
    """`Proxy-Authorization: Basic base64(user:TOKEN)` (any user name) carries `token`."""
    if header is None:
        return False
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    password = decoded.partition(b":")[2]
    return hmac.compare_digest(password, token.encode())


def _is_local_address(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


def is_local_name(host: str) -> bool:
    """A name or address that means this machine without asking DNS."""
    name = host.lower().rstrip(".")
    return name == "localhost" or name.endswith(".localhost") or _is_local_address(name)


async def refuse_local_target(host: str, port: int, allowed: set[tuple[str, int]]) -> None:
    """HttpError(403) when host:port is on this machine (by name, address or what DNS says) and
    not one of `allowed` (the gateway)."""
    if (host.lower(), port) in allowed:
        return
    if is_local_name(host):
        raise HttpError(403, "the proxy does not relay to this machine's own ports")
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return  # the dial says it cannot be reached
    if any(_is_local_address(str(info[4][0])) for info in infos):
        raise HttpError(403, "the proxy does not relay to this machine's own ports")
