"""The server's listening socket, bound here exclusively before the server starts.

Never shared: no SO_REUSEPORT, so no other process (a second cursor-byok, an orphan, any program)
can bind the same port and have the kernel split connections with us. SO_REUSEADDR on POSIX only
lets a restart bind while the previous run's connections sit in TIME_WAIT (it never admits a second
listener); on Windows SO_EXCLUSIVEADDRUSE keeps everyone else off the port.
"""
from __future__ import annotations

import errno
import os
import socket

BACKLOG = 2048  # room above our own pending-request cap: junk beyond it is evicted by us, not by a full accept queue


class PortUnavailable(Exception):
    """The server cannot listen where configured; the message names the address and what to do."""


def display_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port, or PortUnavailable."""
    where = display_address(host, port)
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise PortUnavailable(f"cannot listen on {where}: {exc.strerror}: check [server] host") from None
    sock = socket.socket(family, kind, proto)
    try:
        if os.name == "nt":  # pragma: no cover - Windows only
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_EXCLUSIVEADDRUSE, 1)  # type: ignore[attr-defined]
        else:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Inherited by every accepted connection: a stream's frames are small writes one after
        # another, and with Nagle's algorithm each would wait for the peer's delayed ACK (40 ms).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise PortUnavailable(f"cannot listen on {where}: {_advice(exc)}") from None
    return sock


def _advice(exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return "the port is already in use (by another cursor-byok or another program): stop that, or choose another port with --port or [server] port"
    if exc.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges): choose another port with --port or [server] port"
    if exc.errno == errno.EADDRNOTAVAIL:
        return "this machine has no such address: check [server] host"
    return f"{exc.strerror or exc}"
