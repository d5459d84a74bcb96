"""The connection warden on real sockets of this process: what it ends, and in which order."""
from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from cursor_byok.instance import connections
from cursor_byok.instance import ConnectionBook, ConnectionWarden, PeerState, WardenLimits, raise_open_file_limit

pytestmark = pytest.mark.skipif(not ConnectionWarden.available(), reason="the warden reads /proc/self/fd (Linux)")


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


def connect(listener: socket.socket, send: bytes = b"") -> tuple[socket.socket, socket.socket]:
    """(client side, accepted side): the accepted one is what the warden looks after."""
    client = socket.create_connection(listener.getsockname(), timeout=5)
    accepted, _ = listener.accept()
    if send:
        client.sendall(send)
        assert accepted.recv(len(send)) == send  # read, as the server reads it at once
    return client, accepted


def ended(client: socket.socket) -> bool:
    client.settimeout(5)
    try:
        return client.recv(1) == b""
    except ConnectionResetError:
        return True


def test_no_byte_and_no_head_are_ended_a_request_keeps_it(listener: socket.socket) -> None:
    book = ConnectionBook()
    book.enabled = True
    warden = ConnectionWarden(WardenLimits(listener.getsockname()[1], 0.0, 3600.0, 100), book)
    silent, silent_side = connect(listener)
    talking, talking_side = connect(listener, b"GET / HT")
    warden.sweep()
    assert ended(silent)
    assert warden.ended == {"no byte within server.first_byte_timeout_seconds": 1}
    book.peers[talking.getsockname()] = PeerState(trusted=True)
    warden = ConnectionWarden(WardenLimits(listener.getsockname()[1], 0.0, 0.0, 100), book)
    warden.sweep()  # its head came: no deadline ends it
    talking.settimeout(0.05)
    with pytest.raises(TimeoutError):
        talking.recv(1)
    for sock in (silent, silent_side, talking, talking_side):
        sock.close()


def test_over_the_cap_the_untrusted_idle_go_first_and_a_busy_one_never(listener: socket.socket) -> None:
    book = ConnectionBook()
    book.enabled = True
    pairs = [connect(listener, b"x") for _ in range(4)]
    (busy, _), (ide, _), (junk, _), (old_junk, _) = pairs
    book.peers[busy.getsockname()] = PeerState(active=1, trusted=False, last_active=0.0)
    book.peers[ide.getsockname()] = PeerState(trusted=True, last_active=1.0)
    book.peers[junk.getsockname()] = PeerState(last_active=3.0)
    book.peers[old_junk.getsockname()] = PeerState(last_active=2.0)
    warden = ConnectionWarden(WardenLimits(listener.getsockname()[1], 3600.0, 3600.0, 2), book)
    warden.sweep()
    assert ended(old_junk) and ended(junk)
    for still in (busy, ide):
        still.settimeout(0.05)
        with pytest.raises(TimeoutError):
            still.recv(1)
    for pair in pairs:
        for sock in pair:
            sock.close()


def test_the_soft_open_file_limit_is_raised_to_the_hard_one() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 256), hard))
        raised = raise_open_file_limit()[0]
        assert raised == hard if hard != resource.RLIM_INFINITY else raised > 256
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_reused_client_port_keeps_what_the_gateway_noted_for_the_new_connection(listener: socket.socket) -> None:
    book = ConnectionBook()
    book.enabled = True
    warden = ConnectionWarden(WardenLimits(listener.getsockname()[1], 3600.0, 0.0, 100), book)
    old = socket.socket()
    old.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # A port of its own, bound before connecting: a port the kernel picks at connect may be shared
    # with other processes' connections to other peers, and those would refuse the second bind.
    old.bind(("127.0.0.1", 0))
    old.connect(listener.getsockname())
    old_side, _ = listener.accept()
    old.sendall(b"x")
    assert old_side.recv(1) == b"x"
    peer = old.getsockname()
    book.peers[peer] = PeerState()
    warden.sweep()
    # The same client port, as the kernel may hand it out again: held by the new socket before the
    # old one lets it go (both reuse the address, neither listens), so no other process can take it
    # in between.
    new = socket.socket()
    new.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    new.bind(peer)
    old.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset: no TIME_WAIT holds the port
    old.close()
    old_side.close()
    new.connect(listener.getsockname())
    new_side, _ = listener.accept()
    book.peers[peer] = PeerState(active=1)  # the gateway saw the new connection's request
    warden.sweep()  # the old socket is gone, the new one has its port: its request must count
    assert book.peers.get(peer) is not None
    new.settimeout(0.05)
    with pytest.raises(TimeoutError):
        new.recv(1)
    new.close()
    new_side.close()


def test_a_request_noted_as_the_http_server_names_its_client_keeps_the_connection(listener: socket.socket) -> None:
    """Granian's ASGI scope gives the client port as a string: a request the gateway noted under it
    is the connection the warden sees (with an int port), not one that never sent a head."""
    book = ConnectionBook()
    book.enabled = True
    warden = ConnectionWarden(WardenLimits(listener.getsockname()[1], 0.0, 0.0, 100), book)
    client, accepted = connect(listener, b"POST /agent.v1.AgentService/RunSSE HTTP/1.1\r\n\r\n")
    host, port = client.getsockname()
    state = book.enter({"type": "http", "client": (host, str(port))})
    warden.sweep()  # the request is in progress: no deadline ends its connection
    client.settimeout(0.05)
    with pytest.raises(TimeoutError):
        client.recv(1)
    book.leave(state)
    assert book.peers[(host, port)].active == 0
    client.close()
    accepted.close()


async def test_a_sweep_reads_proc_on_the_loop_thread_a_slice_per_pass(listener: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweeps of `run()` read /proc on the loop's own thread, a slice of descriptors per pass
    of the loop. (Read on a worker thread, each readlink handed the interpreter lock back and forth
    with a busy loop: ~0.1 extra waits of the loop thread per word streamed, 5-12 % CPU per word
    at 32 streams of 50 words/s.) A pass then carries one slice's reads, which is all a turn start
    can wait behind."""
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()
    passes = 0

    def count_passes() -> None:
        nonlocal passes
        passes += 1
        ticker[0] = loop.call_soon(count_passes)

    ticker = [loop.call_soon(count_passes)]
    reads: list[tuple[int, int]] = []  # (thread, pass) of each readlink
    readlink = os.readlink

    def recorded(path: str) -> str:
        reads.append((threading.get_ident(), passes))
        return readlink(path)

    monkeypatch.setattr(connections.os, "readlink", recorded)
    book = ConnectionBook()
    others = [socket.socket() for _ in range(3 * connections.LINKS_PER_PASS)]  # more descriptors than a slice
    silent, silent_side = connect(listener)
    silent.setblocking(False)
    warden = ConnectionWarden(WardenLimits(listener.getsockname()[1], 0.0, 3600.0, 100), book)
    watch = asyncio.ensure_future(warden.run())
    try:
        assert await asyncio.wait_for(loop.sock_recv(silent, 1), 10) == b""  # the sweep ended it
    finally:
        watch.cancel()
        ticker[0].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
    assert reads and {thread for thread, _ in reads} == {loop_thread}
    assert max(collections.Counter(n for _, n in reads).values()) <= connections.LINKS_PER_PASS
    for sock in (*others, silent, silent_side):
        sock.close()
