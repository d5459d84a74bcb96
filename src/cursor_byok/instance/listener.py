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
    return _bind(host, port, "server", listen=True)


def ensure_port_free(host: str, port: int, section: str) -> None:
    """PortUnavailable unless `host:port` can be bound now (checked before anything is created that
    a refused start would leave behind; the bind itself follows later). `section`: the config table
    that sets the port, `server` or `proxy`."""
    _bind(host, port, section).close()


def _bind(host: str, port: int, section: str, *, listen: bool = False) -> socket.socket:
    where = f"{'' if section == 'server' else section + ' '}cannot listen on {display_address(host, port)}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise PortUnavailable(f"{where}: {exc.strerror}: check [{section}] host") from None
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
        if listen:
            sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise PortUnavailable(f"{where}: {_advice(exc, port, section)}") from None
    return sock


def port_holder(port: int) -> str:
    """Who listens on `port`: `PID 123 (python3 -m http.server 8788)`, or `another program` where
    the system does not say (another user's process, a platform that needs privileges for it)."""
    import psutil  # only when a port is busy

    try:
        listening = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]
    except (psutil.Error, OSError):
        listening = []
    pid = next((c.pid for c in listening if c.pid), None)
    if pid is None:
        return "another program"
    try:
        argv = psutil.Process(pid).cmdline()
    except psutil.Error:
        argv = []
    command = " ".join([os.path.basename(argv[0]), *argv[1:]]) if argv else "?"
    if len(command) > 80:
        command = command[:77] + "..."
    return f"PID {pid} ({command})"


def _port_option(section: str) -> str:
    return f"{'--port' if section == 'server' else f'--{section}-port'} or [{section}] port"


def busy_port_advice(port: int, section: str) -> str:
    """What a refused bind of a busy `port` says: its holder, and how to choose another port."""
    return f"the port is in use by {port_holder(port)}: stop that, or choose another port with {_port_option(section)}"


def _advice(exc: OSError, port: int, section: str) -> str:
    if exc.errno == errno.EADDRINUSE:
        return busy_port_advice(port, section)
    if exc.errno == errno.EACCES:
        return f"permission denied (ports below 1024 need privileges): choose another port with {_port_option(section)}"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"this machine has no such address: check [{section}] host"
    return f"{exc.strerror or exc}"
