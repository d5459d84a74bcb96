"""Which hosts are Cursor's, and which proxy Cursor's Run relay goes through: checks the server
makes before it listens (the health probe's guard, a start error), kept apart from the HTTP
clients so making them imports none."""
from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..proxy_env import env_proxy

if TYPE_CHECKING:
    import httpx


class UnusableProxy(Exception):
    """The environment names a proxy the Run relay cannot tunnel through (one line, credentials masked)."""


def is_cursor_host(host: str) -> bool:
    host = host.lower().rstrip(".")
    return host == "cursor.sh" or host.endswith(".cursor.sh")


def relay_proxy(url: httpx.URL) -> str | None:
    """The proxy the Run relay dials `url` through: the one every outbound client takes from the
    environment (`env_proxy`). The relay tunnels with HTTP CONNECT, so that must be an http://
    proxy; another scheme raises UnusableProxy rather than the relay going direct."""
    proxy = env_proxy(url)
    if not proxy:
        return None
    parts = urlsplit(proxy)
    if parts.scheme != "http":
        shown = f"{parts.scheme}://{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
        raise UnusableProxy(
            f"the environment's proxy for {url.scheme}://{url.host} is {shown}, but Cursor's Run stream relay can "
            f"only go through an http:// proxy: set HTTPS_PROXY (or ALL_PROXY) to an http:// proxy, or add {url.host} to NO_PROXY"
        )
    return proxy


__all__ = ["UnusableProxy", "is_cursor_host", "relay_proxy"]
