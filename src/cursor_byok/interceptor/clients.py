"""The proxy's client connections as a bounded resource.

Past `max_connections` open at once, idle connections are closed to make room, oldest idle first
and the authenticated ones (the IDE's) last; a connection with a request or stream in progress is
never closed for room. So junk that connects and waits can neither exhaust the process's file
descriptors nor push the IDE out.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def _no_streams() -> int:
    return 0


@dataclass(slots=True, eq=False)
class Client:
    writer: asyncio.StreamWriter
    last_active: float = field(default_factory=time.monotonic)
    authenticated: bool = False  # it presented the token (or none is required) and was served
    busy: int = 0  # exchanges or tunnels in progress
    streams: Callable[[], int] = _no_streams  # HTTP/2 streams open, for a relayed h2 connection

    @property
    def idle(self) -> bool:
        return not self.busy and not self.streams()


class ClientConnections:
    def __init__(self, max_connections: int) -> None:
        self.max_connections = max_connections
        self._open: dict[Client, None] = {}  # insertion order: oldest first
        self.shed = 0  # connections closed to make room

    def __len__(self) -> int:
        return len(self._open)

    def open(self, writer: asyncio.StreamWriter) -> Client:
        client = Client(writer)
        self._open[client] = None
        if len(self._open) > self.max_connections:
            self._make_room(client)
        return client

    def close(self, client: Client) -> None:
        self._open.pop(client, None)

    def touch(self, client: Client) -> None:
        client.last_active = time.monotonic()

    def _make_room(self, newest: Client) -> None:
        idle = [c for c in self._open if c is not newest and c.idle]
        idle.sort(key=lambda c: (c.authenticated, c.last_active))
        excess = len(self._open) - self.max_connections
        for client in idle[:excess]:
            self._open.pop(client, None)
            self.shed += 1
            client.writer.transport.abort()  # its task sees the connection reset and ends
        if len(self._open) > self.max_connections:
            # Every other connection is busy: the newest waits its turn no better than junk would.
            self._open.pop(newest, None)
            self.shed += 1
            newest.writer.transport.abort()
