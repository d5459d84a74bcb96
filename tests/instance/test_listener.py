"""The listening socket: exclusive, and a port in use is one line."""
from __future__ import annotations

import os
import socket

import pytest

from cursor_byok.instance import PortUnavailable, bind_listener


@pytest.mark.parametrize("reuse_port", [False, True], ids=["plain", "so-reuseport"])
def test_a_port_held_by_anyone_is_refused_with_advice(reuse_port: bool) -> None:
    with socket.socket() as other:
        if reuse_port:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(PortUnavailable, match=rf"cannot listen on 127\.0\.0\.1:{port}: the port is in use by PID {os.getpid()} \(.*--port"):
            bind_listener("127.0.0.1", port)


def test_nobody_can_join_our_listener() -> None:
    with bind_listener("127.0.0.1", 0) as ours, socket.socket() as joiner:
        joiner.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        with pytest.raises(OSError):
            joiner.bind(ours.getsockname())


def test_a_restart_binds_while_old_connections_linger() -> None:
    """Connections of the previous run in TIME_WAIT do not keep the next one off the port."""
    with bind_listener("127.0.0.1", 0) as first:
        port = first.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = first.accept()
        accepted.close()  # the server side closes first: its end goes to TIME_WAIT
        client.close()
    bind_listener("127.0.0.1", port).close()


def test_an_address_this_machine_does_not_have() -> None:
    with pytest.raises(PortUnavailable, match="check \\[server\\] host"):
        bind_listener("192.0.2.1", 0)  # TEST-NET-1: never local


def test_connections_send_small_writes_at_once() -> None:
    """Every connection the server accepts has Nagle's algorithm off: a stream's frames are small
    writes one after another (a step start, then the first text), and with it on the second waits
    for the IDE's delayed acknowledgement of the first (40 ms on Linux) before it leaves."""
    with bind_listener("127.0.0.1", 0) as listener, socket.create_connection(listener.getsockname()):
        accepted, _ = listener.accept()
        with accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
