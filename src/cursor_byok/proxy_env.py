"""The proxy the environment names for a URL, as every outbound client reads it.

Apart from the HTTP clients on purpose: `serve` checks the environment's proxy before it listens,
and that check should not import a client (aiohttp alone is ~100 ms of a cold start)."""
from __future__ import annotations

import urllib.request
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx


def env_proxy(url: httpx.URL) -> str:
    """The proxy the environment names for the URL ("" for none), read as httpx's client reads it:
    <SCHEME>_PROXY, else ALL_PROXY, unless NO_PROXY covers the host. Every outbound connection
    that honours the environment (provider calls, the passthrough, the Run relay) goes by this."""
    proxies = urllib.request.getproxies()
    found = proxies.get(url.scheme) or proxies.get("all") or ""
    if not found or urllib.request.proxy_bypass_environment(url.host, proxies):
        return ""
    return found if "://" in found else "http://" + found


def any_proxy() -> bool:
    """Whether the environment names any proxy at all (when not, `env_proxy` is "" for every URL)."""
    return bool(urllib.request.getproxies())


__all__ = ["any_proxy", "env_proxy"]
