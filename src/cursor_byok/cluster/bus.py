"""The instances' message bus: PostgreSQL LISTEN/NOTIFY, one channel per instance and one for all.

Two connections: one only listens (psycopg hands its notifications to `_listen`), the other sends
and runs the lease statements. Notifications from one connection arrive in commit order, so what
one task sends in sequence arrives in sequence.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .notes import Assembler, Message, notes

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("cursor_byok.cluster")

EVERYONE = "cursor_byok_all"


def channel(instance: str) -> str:
    return f"cursor_byok_{instance}"


class Bus:
    def __init__(self, url: str, me: str, on_message: Callable[[Message], None]) -> None:
        self.url = url
        self.me = me
        self.on_message = on_message
        self.talk: psycopg.AsyncConnection | None = None
        self._listener: psycopg.AsyncConnection | None = None
        self._listening: asyncio.Task[None] | None = None
        self._serials = itertools.count()

    async def open(self) -> None:
        import psycopg  # the team extra's: only a server on PostgreSQL loads it

        self.talk = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        self._listener = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        for name in (channel(self.me), EVERYONE):
            await self._listener.execute(f"LISTEN {name}")
        self._listening = asyncio.get_running_loop().create_task(self._listen(self._listener), name="cluster-bus")

    async def close(self) -> None:
        if self._listening is not None:
            self._listening.cancel()
        for conn in (self._listener, self.talk):
            if conn is not None:
                await conn.close()

    async def send(self, to: str | None, message: Message) -> None:
        """`message` to the instance `to` (None: to every instance), in one statement."""
        assert self.talk is not None
        payloads = notes(message, next(self._serials))
        target = channel(to) if to is not None else EVERYONE
        calls = ", ".join(["pg_notify(%s, %s)"] * len(payloads))
        await self.talk.execute(f"SELECT {calls}", [v for p in payloads for v in (target, p)])

    async def _listen(self, conn: psycopg.AsyncConnection) -> None:
        try:
            await self._hear(conn)
        except Exception as exc:
            log.error("the cluster's listening connection failed: this instance no longer hears the others: %s", exc, exc_info=exc)
            raise

    async def _hear(self, conn: psycopg.AsyncConnection) -> None:
        assembler = Assembler()
        async for note in conn.notifies():
            try:
                message = assembler.feed(note.payload)
            except ValueError as exc:  # not one of ours: someone else NOTIFYs on the channel
                log.warning("a note on %s was not understood: %s", note.channel, exc)
                continue
            if message is not None and message.sender != self.me:
                self.on_message(message)
