"""The server port's connections as a bounded resource, which the HTTP server does not bound.

Granian (hyper underneath) has a header read timeout for an HTTP/1 request once it has begun, but
in its auto mode (HTTP/1.1 and h2c on one port) the first read, which tells the two apart, waits
without one; it has no cap on open connections either. A client that connects and sends nothing
keeps its socket for as long as it likes, and a thousand of them take every file descriptor of a
desktop's default limit: the IDE can no longer connect.

So the warden looks at this process's own sockets (Linux: /proc/self/fd, a few microseconds per
socket) every `sweep_seconds` and ends those of the server's port that
- sent no byte within `first_byte_seconds` (the kernel's count of bytes received, TCP_INFO);
- sent no whole request head within `head_seconds` of being first seen (the gateway tells the
  `ConnectionBook` which connections its requests came on);
- are in excess of `max_connections`: the oldest idle ones first, those whose requests passed the
  guard (the IDE's) last, and never one with a request in progress.
A connection is ended with shutdown() on a duplicate of its descriptor: granian sees it end and
closes it itself (closing granian's descriptor from here would pull it away under granian).
What it ends is logged one line per reason and interval, never one per connection.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import os
import resource
import socket
import struct
import time
from collections.abc import Hashable, Iterator, MutableMapping
from typing import Any

import msgspec

log = logging.getLogger("cursor_byok.connections")

_TCP_INFO_BYTES_RECEIVED = 128  # offset of tcpi_bytes_received in struct tcp_info (Linux 4.1+)
_FD_DIR = "/proc/self/fd"
# Descriptors read per pass of the loop in a sweep (~2.3 µs each): what a turn start may wait behind.
LINKS_PER_PASS = 32
LOG_INTERVAL_SECONDS = 60.0


# Of the open-file limit, the share one port's connections may take (two ports, and the proxy's
# own connection on to the gateway or an origin for each of its clients).
_PORT_SHARE = 3


def connection_cap(configured: int) -> int:
    """The connections one port keeps open: `configured`, or fewer when the open-file limit (raised
    first) could not hold that many on both ports, with room to spare for everything else."""
    soft, _ = raise_open_file_limit()
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(16, min(configured, soft // _PORT_SHARE))


def raise_open_file_limit() -> tuple[int, int]:
    """The soft RLIMIT_NOFILE raised to the hard one (a desktop's soft 1,024 is a few hundred idle
    sockets away from refusing the IDE); the limits as they are then."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):  # macOS caps below an infinite hard limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


class PeerState(msgspec.Struct):
    """What the gateway saw of one client connection (by its address and port)."""

    active: int = 0  # requests in progress
    trusted: bool = False  # one of its requests carried the auth token (the IDE's, when one is required)
    last_active: float = 0.0


class ConnectionBook:
    """The gateway's side: which connections requests came on, how many are in progress, and
    whether they passed the guard. Off (`enabled` False) where no warden reads it."""

    def __init__(self) -> None:
        self.enabled = False
        self.peers: dict[Hashable, PeerState] = {}

    def enter(self, scope: MutableMapping[str, Any]) -> PeerState | None:
        if not self.enabled:
            return None
        client = scope.get("client")
        if not client:
            return None
        # The warden looks a socket up by its peer name (an int port); granian's scope gives the
        # port as a string.
        key = (client[0], int(client[1]))
        state = self.peers.get(key)
        if state is None:
            state = self.peers[key] = PeerState()
        state.active += 1
        return state

    @staticmethod
    def leave(state: PeerState | None) -> None:
        if state is not None:
            state.active -= 1
            state.last_active = time.monotonic()


class _Socket(msgspec.Struct):
    fd: int
    inode: int
    peer: tuple[str, int]
    first_seen: float


class WardenLimits(msgspec.Struct, frozen=True):
    port: int
    first_byte_seconds: float
    head_seconds: float
    max_connections: int

    @property
    def sweep_seconds(self) -> float:
        return max(0.05, min(0.5, self.first_byte_seconds / 4, self.head_seconds / 4))


class ConnectionWarden:
    """See the module docstring. `run()` until cancelled; `sweep()` is one look."""

    def __init__(self, limits: WardenLimits, book: ConnectionBook) -> None:
        self.limits = limits
        self.book = book
        self._sockets: dict[int, _Socket] = {}  # by inode: the server port's connections
        self._foreign: set[int] = set()  # inodes of every other socket (the listener, outbound ones)
        self._reserve: int | None = None  # a descriptor kept to look with when all others are taken
        self._found: list[tuple[int, int]] | None = None  # what the last look found (None: look afresh)
        self.ended: collections.Counter[str] = collections.Counter()
        self._unlogged: collections.Counter[str] = collections.Counter()
        self._logged_at: dict[str, float] = {}

    @staticmethod
    def available() -> bool:
        return os.path.isdir(_FD_DIR)

    async def run(self) -> None:
        import asyncio  # here: the CLI imports this package without an event loop

        self.book.enabled = True
        self._reserve = _open_reserve()
        try:
            while True:
                await asyncio.sleep(self.limits.sweep_seconds)
                try:
                    self.apply(await self._read_sockets_in_passes(), time.monotonic())
                except Exception:  # noqa: BLE001 - a bug here must not end the watch for good
                    log.exception("connection sweep failed")
        finally:
            self.book.enabled = False
            if self._reserve is not None:
                os.close(self._reserve)

    def sweep(self) -> None:
        """One look, all of it on the calling thread."""
        self.apply(self.read_sockets(), time.monotonic())

    def read_sockets(self) -> list[tuple[int, int]] | None:
        """(descriptor, inode) of each open socket: the part of a look that only reads /proc. None:
        not even the reserve descriptor could read the directory."""
        names = self._descriptors()
        return None if names is None else _sockets(names)

    async def _read_sockets_in_passes(self) -> list[tuple[int, int]] | None:
        """`read_sockets` on the loop's thread, LINKS_PER_PASS descriptors per pass of the loop: a
        pass carries ~75 µs of it, and a sweep of hundreds of descriptors is no stall. (On a worker
        thread, the interpreter lock that thread took back after each readlink made a busy loop
        hand it over once per descriptor: ~300 lock waits a second at 32 streams of 50 words/s.)"""
        import asyncio  # here: the CLI imports this package without an event loop

        names = self._descriptors()
        if names is None:
            return None
        found: list[tuple[int, int]] = []
        for start in range(0, len(names), LINKS_PER_PASS):
            if start:
                await asyncio.sleep(0)
            found += _sockets(names[start : start + LINKS_PER_PASS])
        return found

    def _descriptors(self) -> list[str] | None:
        """This process's open descriptors, by name. None: not even the reserve one could list them."""
        try:
            return os.listdir(_FD_DIR)
        except OSError:  # no descriptor left to read the directory with: use the reserve's
            if self._reserve is None:
                return None
            os.close(self._reserve)
            self._reserve = None
            try:
                return os.listdir(_FD_DIR)
            except OSError:
                return None

    def apply(self, found: list[tuple[int, int]] | None, now: float) -> None:
        """The rest of a look, on the loop: what the sockets are, and the deadlines and cap enforced."""
        try:
            if found is not None:
                self._look(found, now)
                self._enforce(now)
        finally:
            if self._reserve is None:
                self._reserve = _open_reserve()

    def _look(self, found: list[tuple[int, int]], now: float) -> None:
        if found == self._found:  # the very same descriptors and sockets as last time: nothing new to learn
            return
        self._found = found
        seen: dict[int, _Socket] = {}
        foreign: set[int] = set()
        for fd, inode in found:
            known = self._sockets.get(inode)
            if known is None and inode not in self._foreign:
                known = self._inspect(fd, inode, now)
            if known is None:
                foreign.add(inode)
            else:
                seen[inode] = known
        # A closed connection's client port may already be a new connection's (the kernel reuses
        # them): what the gateway noted under it is dropped only when no open socket has it.
        open_peers = {entry.peer for entry in seen.values()}
        for gone in self._sockets.keys() - seen.keys():
            if self._sockets[gone].peer not in open_peers:
                self.book.peers.pop(self._sockets[gone].peer, None)
        self._sockets, self._foreign = seen, foreign

    def _inspect(self, fd: int, inode: int, now: float) -> _Socket | None:
        with _duplicate(fd, inode) as sock:
            if sock is None:
                return None
            if sock.family not in (socket.AF_INET, socket.AF_INET6):
                return None
            try:
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) or sock.getsockname()[1] != self.limits.port:
                    return None
                peer = sock.getpeername()
            except OSError:
                return None
            return _Socket(fd, inode, (peer[0], peer[1]), now)
        return None

    def _enforce(self, now: float) -> None:
        limits = self.limits
        peers = self.book.peers
        # A socket a request came on is past both deadlines: only the others are looked at (a
        # sweep of a few hundred connections then makes no call per connection).
        for entry in [e for e in self._sockets.values() if e.peer not in peers]:
            age = now - entry.first_seen
            if age >= limits.head_seconds:
                self._end(entry, "no whole request head within server.header_read_timeout_seconds")
            elif age >= limits.first_byte_seconds and self._bytes_received(entry) == 0:
                self._end(entry, "no byte within server.first_byte_timeout_seconds")
        excess = len(self._sockets) - limits.max_connections  # those ended are gone from it
        if excess > 0:
            idle = [e for e in self._sockets.values() if not ((state := peers.get(e.peer)) and state.active)]
            idle.sort(key=self._shed_order)
            for entry in idle[:excess]:
                self._end(entry, "over server.max_connections (oldest idle first)")
        self._log(now)

    def _shed_order(self, entry: _Socket) -> tuple[bool, float]:
        state = self.book.peers.get(entry.peer)
        if state is None:
            return (False, entry.first_seen)
        return (state.trusted, state.last_active or entry.first_seen)

    def _bytes_received(self, entry: _Socket) -> int | None:
        with _duplicate(entry.fd, entry.inode) as sock:
            if sock is None:
                return None
            with contextlib.suppress(OSError):
                info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
                if len(info) >= _TCP_INFO_BYTES_RECEIVED + 8:
                    return int(struct.unpack_from("=Q", info, _TCP_INFO_BYTES_RECEIVED)[0])
        return None

    def _end(self, entry: _Socket, reason: str) -> None:
        with _duplicate(entry.fd, entry.inode) as sock:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        self._sockets.pop(entry.inode, None)
        self._found = None  # its descriptor may still be open: the next look sees it afresh
        self.book.peers.pop(entry.peer, None)
        self.ended[reason] += 1
        self._unlogged[reason] += 1

    def _log(self, now: float) -> None:
        for reason, count in list(self._unlogged.items()):
            if now - self._logged_at.get(reason, -LOG_INTERVAL_SECONDS) >= LOG_INTERVAL_SECONDS:
                log.warning("closed %d connection%s: %s", count, "s" * (count != 1), reason)
                self._logged_at[reason] = now
                del self._unlogged[reason]


def _sockets(names: list[str]) -> list[tuple[int, int]]:
    """(descriptor, inode) of each of the descriptors `names` that is a socket."""
    found: list[tuple[int, int]] = []
    for name in names:
        try:
            link = os.readlink(f"{_FD_DIR}/{name}")
        except OSError:
            continue
        if link.startswith("socket:["):
            found.append((int(name), int(link[8:-1])))
    return found


@contextlib.contextmanager
def _duplicate(fd: int, inode: int) -> Iterator[socket.socket | None]:
    """A socket object on a duplicate of `fd` if it still is socket `inode` (the number may have
    been closed and reused since it was listed); None otherwise."""
    try:
        dup = os.dup(fd)
    except OSError:
        yield None
        return
    try:
        if os.fstat(dup).st_ino != inode:
            os.close(dup)
            yield None
            return
        sock = socket.socket(fileno=dup)
    except OSError:
        os.close(dup)
        yield None
        return
    try:
        yield sock
    finally:
        sock.close()


def _open_reserve() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return None
