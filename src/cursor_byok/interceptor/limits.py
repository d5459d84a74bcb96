"""The intercepting proxy's bounds and counters."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProxyLimits:
    max_head_bytes: int = 64 * 1024
    max_body_bytes: int = 256 * 1024 * 1024
    first_byte_seconds: float = 10.0  # a new connection's first byte
    head_seconds: float = 10.0  # a request head, from its first byte
    body_seconds: float = 300.0  # a whole request body, however it trickles
    # Open client connections; past it the oldest idle ones are closed (authenticated ones last).
    max_connections: int = 256
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
