"""Is a port free, served by a running cursor-byok, or held by another program."""
from __future__ import annotations

import enum
import os
import socket

from .common import connect_host, url_host


class PortState(str, enum.Enum):
    FREE = "free"
    OURS = "ours"  # a cursor-byok health endpoint answers there
    OTHER = "other"  # something else listens (or the address cannot be bound)


def port_state(host: str, port: int, health_path: str) -> PortState:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        if os.name == "posix":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            return PortState.FREE
        except OSError:
            pass
    import httpx

    try:
        url = f"http://{url_host(connect_host(host))}:{port}{health_path}"
        response = httpx.get(url, timeout=1.0, trust_env=False)
    except httpx.HTTPError:
        return PortState.OTHER
    return PortState.OURS if response.status_code == 204 else PortState.OTHER


__all__ = ["PortState", "port_state"]
