"""Conversation leases: one owner per conversation across instances (table `conversation_leases`).

A lease names its owner and ends at `expires_at_ms` on the database's clock (never a machine's: the
instances' clocks may disagree). The owner renews all its leases in one statement a few times per
lease; an owner that stops renewing (killed, cut off) loses them when they end, and the next
instance that needs one of its conversations takes it over. Each statement is atomic on its own
(an upsert guarded by its WHERE), so two instances claiming one conversation cannot both win.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any, Protocol

    import psycopg

    class Connection(Protocol):
        """What runs a statement: a psycopg connection, or the bus's (which opens itself again)."""

        async def execute(self, query: str, params: Sequence[object] | Mapping[str, object] = ...) -> psycopg.AsyncCursor[Any]: ...

NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

# The row is ours afterwards when it was free, ours, or its lease had ended; `previous` is the
# owner before (as this statement's snapshot saw it): another one means a takeover.
CLAIM = f"""
WITH previous AS (SELECT owner FROM conversation_leases WHERE conversation_id = %(conversation)s)
INSERT INTO conversation_leases AS lease (conversation_id, owner, expires_at_ms)
VALUES (%(conversation)s, %(me)s, {NOW_MS} + %(ms)s)
ON CONFLICT (conversation_id) DO UPDATE SET owner = EXCLUDED.owner, expires_at_ms = EXCLUDED.expires_at_ms
WHERE lease.owner = EXCLUDED.owner OR lease.expires_at_ms < {NOW_MS}
RETURNING (SELECT owner FROM previous)
"""
OWNER = "SELECT owner FROM conversation_leases WHERE conversation_id = %s"
RENEW = f"UPDATE conversation_leases SET expires_at_ms = {NOW_MS} + %s WHERE owner = %s"
RELEASE = "DELETE FROM conversation_leases WHERE conversation_id = %s AND owner = %s"
# On a graceful stop the leases end at once rather than go: a conversation left with a cut stream
# is then taken over (resumed from its journal) by whichever instance needs it next.
EXPIRE = f"UPDATE conversation_leases SET expires_at_ms = {NOW_MS} - 1 WHERE owner = %s"
OF_REQUEST = f"""
SELECT b.conversation_id, l.owner, l.expires_at_ms < {NOW_MS}
FROM request_bindings b LEFT JOIN conversation_leases l ON l.conversation_id = b.conversation_id
WHERE b.request_id = %s
"""
LIVE = f"SELECT 1 FROM conversation_leases WHERE conversation_id = %s AND owner = %s AND expires_at_ms >= {NOW_MS}"


@dataclass(frozen=True, slots=True)
class Claim:
    owner: str  # who holds the conversation now
    taken_from: str | None = None  # the other owner whose ended lease this claim took


@dataclass(frozen=True, slots=True)
class RequestOwner:
    conversation_id: str
    owner: str | None  # None: no instance holds its conversation (free, or its lease ended)


class Leases:
    """The lease statements of one instance (`me`), on a connection in autocommit mode."""

    def __init__(self, conn: Connection, me: str, seconds: float) -> None:
        self.conn = conn
        self.me = me
        self.ms = max(1, int(seconds * 1000))

    async def claim(self, conversation_id: str) -> Claim:
        row = await (await self.conn.execute(CLAIM, {"conversation": conversation_id, "me": self.me, "ms": self.ms})).fetchone()
        if row is not None:
            previous = row[0]
            return Claim(self.me, previous if previous not in (None, self.me) else None)
        held = await (await self.conn.execute(OWNER, (conversation_id,))).fetchone()
        if held is None:  # released between the two statements: free now
            return await self.claim(conversation_id)
        return Claim(held[0])

    async def renew(self) -> int:
        return (await self.conn.execute(RENEW, (self.ms, self.me))).rowcount

    async def release(self, conversation_id: str) -> None:
        await self.conn.execute(RELEASE, (conversation_id, self.me))

    async def expire_all(self) -> None:
        await self.conn.execute(EXPIRE, (self.me,))

    async def of_request(self, request_id: str) -> RequestOwner | None:
        """Where a bound request id's conversation lives; None: the request id is not bound (yet)."""
        row = await (await self.conn.execute(OF_REQUEST, (request_id,))).fetchone()
        if row is None:
            return None
        conversation_id, owner, ended = row
        return RequestOwner(conversation_id, None if owner is None or ended else owner)

    async def holds(self, conversation_id: str, owner: str) -> bool:
        """`owner`'s lease on the conversation has not ended."""
        return await (await self.conn.execute(LIVE, (conversation_id, owner))).fetchone() is not None
