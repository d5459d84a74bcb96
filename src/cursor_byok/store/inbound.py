"""The inbound journal: every locally served BidiAppend, stored before the IDE gets its 200.

Keyed by its transport identity: request id, generation (the Cursor run id of the generation's
seqno-0 run request; '' when it carried none) and append seqno. An append is recorded before it is
handed to the conversation, so whatever it causes is queued after it and commits with it or later:
once its effect is durable, so is its row. After a crash the rows still here are the input to apply
again (the conversation layer decides what each one means then).

Rows go once their effect is durable: all of a generation when its stream has ended, and the
middle of one (`settle`) while a long run goes on: rows 1..S-1 are deleted and row S keeps only its
seqno (`message` NULL; written even when row S itself never was, e.g. a Run stream's message whose
journal write failed), so a restart knows where the stream stood. Row 0, the run request, stays
until the stream ends: it is what a restart resumes. A generation a start could not resume is moved
to `quarantined_appends` (`quarantine`): kept for a look, never replayed.
"""
from __future__ import annotations

import asyncio
import sqlite3
import msgspec

from .core import StoreCore
from .ops import BatchContext, RowWrite, Stage, Statement, WriteOp

RECORD_APPEND = """
INSERT INTO inbound_appends (request_id, generation, seqno, message, received_at_ms, user_name)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (request_id, generation, seqno) DO NOTHING
"""

FORGET_GENERATION = "DELETE FROM inbound_appends WHERE request_id = ? AND generation = ?"

SETTLE_BEFORE = "DELETE FROM inbound_appends WHERE request_id = ? AND generation = ? AND seqno > 0 AND seqno < ?"
SETTLE_MARK = """
INSERT INTO inbound_appends (request_id, generation, seqno, message, received_at_ms) VALUES (?, ?, ?, NULL, ?)
ON CONFLICT (request_id, generation, seqno) DO UPDATE SET message = NULL
"""

QUARANTINE = """
INSERT INTO quarantined_appends
    (request_id, generation, seqno, message, received_at_ms, conversation_id, reason, quarantined_at_ms)
SELECT request_id, generation, seqno, message, received_at_ms, ?, ?, ? FROM inbound_appends WHERE request_id = ? AND generation = ?
ON CONFLICT (request_id, generation, seqno) DO UPDATE SET
    message = excluded.message, received_at_ms = excluded.received_at_ms, conversation_id = excluded.conversation_id,
    reason = excluded.reason, quarantined_at_ms = excluded.quarantined_at_ms
"""

SELECT_INBOUND = (
    "SELECT rowid, request_id, generation, seqno, message, user_name FROM inbound_appends ORDER BY request_id, generation, seqno"
)
HAS_QUARANTINE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'quarantined_appends'"

SELECT_QUARANTINED = """
SELECT MAX(conversation_id), request_id, MAX(reason), COUNT(*), MAX(quarantined_at_ms) FROM quarantined_appends
GROUP BY request_id, generation ORDER BY MAX(quarantined_at_ms)
"""


class InboundAppend(msgspec.Struct, frozen=True):
    seqno: int
    message: bytes | None  # the AgentClientMessage as received; None: settled (its seqno only)


class InboundStream(msgspec.Struct, frozen=True):
    """What is journaled of one transport generation, appends in seqno order."""

    request_id: str
    generation: str
    appends: list[InboundAppend]
    developer: str | None = None  # a team server's, whose run request opened it


class QuarantinedStream(msgspec.Struct, frozen=True):
    """A journaled stream a start could not resume (`doctor` and `db stats` list them)."""

    conversation_id: str | None
    request_id: str
    reason: str
    appends: int
    quarantined_at_ms: int


class _Settle(WriteOp):
    __slots__ = ("_generation", "_now", "_request_id", "_through")

    def __init__(self, request_id: str, generation: str, through: int, now: int) -> None:
        self._request_id = request_id
        self._generation = generation
        self._through = through
        self._now = now

    def describe(self) -> str:
        return f"settle inbound appends of {self._request_id} through {self._through}"

    def plan(self, ctx: BatchContext, out: list[Statement]) -> None:
        key = (self._request_id, self._generation, self._through)
        out.append((Stage.INBOUND, SETTLE_BEFORE, key))
        out.append((Stage.INBOUND, SETTLE_MARK, (*key, self._now)))


class _Quarantine(WriteOp):
    __slots__ = ("_conversation_id", "_generation", "_now", "_reason", "_request_id")

    def __init__(self, request_id: str, generation: str, conversation_id: str | None, reason: str, now: int) -> None:
        self._request_id = request_id
        self._generation = generation
        self._conversation_id = conversation_id
        self._reason = reason
        self._now = now

    def describe(self) -> str:
        return f"quarantine inbound appends of {self._request_id}"

    def plan(self, ctx: BatchContext, out: list[Statement]) -> None:
        key = (self._request_id, self._generation)
        out.append((Stage.INBOUND, QUARANTINE, (self._conversation_id, self._reason, self._now, *key)))
        out.append((Stage.INBOUND, FORGET_GENERATION, key))


class InboundRecords(StoreCore):
    """The inbound journal (a mixin of `Store`)."""

    def record_append(
        self, request_id: str, generation: str, seqno: int, message: bytes, developer: str | None = None
    ) -> asyncio.Future[None]:
        """Journal one append (`developer`: a team server's, whose request it came in); a repeat of
        a recorded (request id, generation, seqno) is a no-op."""
        row = (request_id, generation, seqno, bytes(message), self._clock(), developer)
        return self._enqueue(RowWrite(f"journal append {request_id}#{seqno}", Stage.INBOUND, RECORD_APPEND, row))

    def forget_appends(self, request_id: str, generation: str) -> asyncio.Future[None]:
        """The generation's stream has ended: everything appended to it has had its effect."""
        row = (request_id, generation)
        return self._enqueue(RowWrite(f"forget inbound appends of {request_id}", Stage.INBOUND, FORGET_GENERATION, row))

    def settle_appends(self, request_id: str, generation: str, through: int) -> asyncio.Future[None]:
        """Appends 1..`through` of the generation have had their durable effect (queued before this)."""
        return self._enqueue(_Settle(request_id, generation, through, self._clock()))

    def quarantine_appends(self, request_id: str, generation: str, conversation_id: str | None, reason: str) -> asyncio.Future[None]:
        """The generation could not be resumed: its rows move aside, out of every later start's way."""
        return self._enqueue(_Quarantine(request_id, generation, conversation_id, reason[:500], self._clock()))

    async def inbound_streams(self) -> list[InboundStream]:
        """Every journaled generation, oldest first (by its first append's arrival)."""
        return await self._read_job(select_inbound)


def select_inbound(conn: sqlite3.Connection) -> list[InboundStream]:
    streams: dict[tuple[str, str], list[InboundAppend]] = {}
    first: dict[tuple[str, str], int] = {}  # the rowid of each generation's earliest row: arrival order
    developers: dict[tuple[str, str], str] = {}  # of each generation's run request
    rows = conn.execute(SELECT_INBOUND)
    for rowid, request_id, generation, seqno, message, developer in rows:
        key = (request_id, generation)
        streams.setdefault(key, []).append(InboundAppend(seqno, message))
        first[key] = min(rowid, first.get(key, rowid))
        if seqno == 0 and developer is not None:
            developers[key] = developer
    return [InboundStream(*key, streams[key], developers.get(key)) for key in sorted(streams, key=first.__getitem__)]


def select_quarantined(conn: sqlite3.Connection) -> list[QuarantinedStream]:
    """The quarantined streams, oldest first (none in a database from before the table)."""
    if conn.execute(HAS_QUARANTINE).fetchone() is None:
        return []
    return [QuarantinedStream(*row) for row in conn.execute(SELECT_QUARANTINED)]
