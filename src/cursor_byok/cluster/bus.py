"""The instances' message bus: PostgreSQL LISTEN/NOTIFY, one channel per instance and one for all.

Two connections: one only listens (psycopg hands its notifications to `_listen`), the other sends
and runs the lease statements; either is opened again when the database drops it. Notifications from one connection arrive in commit order, so what
one task sends in sequence arrives in sequence.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .notes import Assembler, Message, notes

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("cursor_byok.cluster")

EVERYONE = "cursor_byok_all"
RECONNECT_SECONDS = 1.0
APPLICATION = "cursor-byok cluster"  # its connections' application_name (pg_stat_activity shows it)


def channel(instance: str) -> str:
    return f"cursor_byok_{instance}"


class Bus:
    def __init__(self, url: str, me: str, on_message: Callable[[Message], None]) -> None:
        self.url = url
        self.me = me
        self.on_message = on_message
        self._talk: psycopg.AsyncConnection | None = None
        self._listening: asyncio.Task[None] | None = None
        self._serials = itertools.count()

    async def open(self) -> None:
        """Both connections up (a database that cannot be reached fails the start); the listener
        hears from then on."""
        self._talk = await self._connect()
        listener = await self._listen_on()
        self._listening = asyncio.get_running_loop().create_task(self._listen(listener), name="cluster-bus")

    async def close(self) -> None:
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(BaseException):
                await self._listening
        if self._talk is not None:
            await self._talk.close()

    async def execute(self, query: str, params: Sequence[object] | Mapping[str, object] = ()) -> psycopg.AsyncCursor[Any]:
        """One statement on the talking connection; one the database dropped is opened again and
        the statement sent once more (each is atomic on its own: a lost answer repeats no effect
        beyond what the statement itself allows)."""
        import psycopg

        try:
            assert self._talk is not None
            if self._talk.closed:
                raise psycopg.OperationalError("the connection is closed")
            return await self._talk.execute(query, params)
        except psycopg.OperationalError as exc:
            log.warning("the cluster's database connection failed; opening it again: %s", exc)
            with contextlib.suppress(Exception):
                await self._talk.close()  # type: ignore[union-attr]
            self._talk = await self._connect()
            return await self._talk.execute(query, params)

    async def send(self, to: str | None, message: Message) -> None:
        """`message` to the instance `to` (None: to every instance), in one statement."""
        payloads = notes(message, next(self._serials))
        target = channel(to) if to is not None else EVERYONE
        calls = ", ".join(["pg_notify(%s, %s)"] * len(payloads))
        await self.execute(f"SELECT {calls}", [v for p in payloads for v in (target, p)])

    async def _connect(self) -> psycopg.AsyncConnection:
        import psycopg  # the team extra's: only a server on PostgreSQL loads it

        return await psycopg.AsyncConnection.connect(self.url, autocommit=True, application_name=f"{APPLICATION} {self.me}")

    async def _listen_on(self) -> psycopg.AsyncConnection:
        conn = await self._connect()
        for name in (channel(self.me), EVERYONE):
            await conn.execute(f"LISTEN {name}")
        return conn

    async def _listen(self, conn: psycopg.AsyncConnection) -> None:
        """Hear until stopped. A listening connection the database drops is opened again (what was
        sent meanwhile is lost: a question unanswered times out, a relayed stream's reader checks
        its owner's lease), a second later at the most."""
        while True:
            try:
                await self._hear(conn)
            except Exception as exc:  # noqa: BLE001 - any failure of the connection: open it again
                log.error("the cluster's listening connection failed; opening it again: %s", exc)
            with contextlib.suppress(Exception):
                await conn.close()
            while True:
                try:
                    conn = await self._listen_on()
                    break
                except Exception as exc:  # noqa: BLE001 - the database is away: try again
                    log.error("the cluster's listening connection cannot be opened: %s", exc)
                    await asyncio.sleep(RECONNECT_SECONDS)
            log.info("the cluster's listening connection is open again")

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
