"""The inbox's append path: admit → journal what was admitted → hand over, in that order, here.

The gateway decodes an append and finds its transport; everything after is this module's. Admit
checks the append against its transport generation's order (`AppendOrder`) without changing it:
the seqno-0 rule, the reorder window, a seqno taken or held before with other content. Only an
admitted append is journaled, and only a journaled one changes the order and reaches the runtime:
refused input is never kept, so no later start can take it again. The IDE gets its 200 once the
journal row is durable; appends that come in the same instant share one commit.

What is journaled is the transport's view of an append (request id, generation, seqno, the
message's bytes), so a restart rebuilds each order as it stood (`AppendIntake.resume_journaled`): a
stream it cannot resume is quarantined, never a reason not to start.
"""
from __future__ import annotations

import asyncio
import enum
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .. import hotpath
from ..instance import storage_problem
from ..protocol import BidiAppend, ConnectError, client_message
from ..store import StoreError

if TYPE_CHECKING:
    from pathlib import Path

    from ..protocol import agent_pb2 as pb
    from ..store import InboundStream
    from .identity import ParentConversationRef
    from .service import ConversationService

log = logging.getLogger("cursor_byok.conversation.intake")


def fingerprint(append: BidiAppend) -> int:
    """What tells an append sent again from a different one with the same seqno. A digest, not the
    bytes: an order lives as long as its transport, and a run request (the whole user turn, often
    tens of KiB) would stay in memory all that time. Python's own hash of the bytes (SipHash, keyed
    with this process's secret; an order lives in memory only): two different appends agree by
    chance once in 2**64, and agreeing on purpose needs the key. All a match does is answer the
    append as a resend."""
    return hash(append.raw)


class Admitted(enum.Enum):
    NEW = "new"  # the next (or a held-ahead) append of this generation
    RESEND = "resend"  # the same append again: answered once its first row is durable, no effect
    GENERATION = "generation"  # a seqno-0 run request with a new Cursor run id: a fresh generation


class AppendOrder:
    """One transport generation's order: its seqno-0 run request (fingerprint, Cursor run id), the
    reorder buffer, and the fingerprints of the seqnos taken or held lately (a reuse with other
    content is refused; a resend of a seqno older than that is a duplicate, as before)."""

    __slots__ = ("buffer", "cursor_run_id", "request_id", "seqno0", "window", "_seen")

    def __init__(self, request_id: str, window: int = 64, start: int = 0) -> None:
        self.request_id = request_id
        self.window = window
        self.buffer = hotpath.ReorderBuffer(window, start)
        self.seqno0: int | None = None
        self.cursor_run_id = ""
        self._seen: dict[int, int] = {}  # seqno → fingerprint, for seqnos in [next - window, next + window)

    @property
    def next_seqno(self) -> int:
        return self.buffer.next_seqno

    def admit(self, append: BidiAppend) -> tuple[Admitted, str]:
        """Whether and how `append` may be taken, and the generation it is journaled under; raises
        ConnectError (or a HotPathError) when it may not. Changes nothing."""
        seqno = append.append_seqno
        if seqno == 0 and self.seqno0 is not None:
            if fingerprint(append) == self.seqno0:
                return Admitted.RESEND, self.cursor_run_id
            rr = append.message.run_request
            run_id = rr.run_id if rr.HasField("run_id") else ""
            if not run_id or run_id == self.cursor_run_id:
                raise ConnectError("failed_precondition", "a different seqno-0 message for the same request and run; refusing to guess")
            return Admitted.GENERATION, run_id
        if seqno == 0:
            rr = append.message.run_request
            return Admitted.NEW, rr.run_id if rr.HasField("run_id") else ""
        expected = self.buffer.next_seqno
        if seqno - expected >= self.window:
            raise hotpath.SeqnoOutOfWindow(f"seqno {seqno} is outside the reorder window [{expected}, {expected + self.window})")
        seen = self._seen.get(seqno)
        if seen is not None:
            if seen != fingerprint(append):
                raise ConnectError("invalid_argument", f"seqno {seqno} was already used for another message; a resend must repeat it exactly")
            return Admitted.RESEND, self.cursor_run_id
        return (Admitted.RESEND if seqno < expected else Admitted.NEW), self.cursor_run_id

    def take(self, append: BidiAppend, admitted: Admitted, generation: str) -> list[Any]:
        """An admitted append, journaled: into the order; the appends now deliverable, in order."""
        seqno = append.append_seqno
        if admitted is Admitted.GENERATION:
            self.buffer = hotpath.ReorderBuffer(self.window)
            self._seen.clear()
        if seqno == 0:
            self.seqno0, self.cursor_run_id = fingerprint(append), generation
        else:
            self._remember(seqno, fingerprint(append))
        return self.buffer.push(seqno, append)

    def _remember(self, seqno: int, digest: int) -> None:
        seen = self._seen
        seen[seqno] = digest
        if len(seen) > 2 * self.window:  # forget what fell out of the window behind
            floor = self.buffer.next_seqno - self.window
            for old in [s for s in seen if s < floor]:
                del seen[old]


class AppendIntake:
    """The append path of one conversation service (see the module docstring)."""

    def __init__(self, service: ConversationService, window: int = 64) -> None:
        self.service = service
        self.window = window  # of each resumed stream's order
        self.stopping = False  # the server stops: streams end cut, their rows kept for the next start

    def take(
        self, order: AppendOrder, append: BidiAppend, parent: ParentConversationRef | None, developer: str | None = None
    ) -> asyncio.Future[Any]:
        """Admit, journal, hand over; the future resolves once the journal row is durable. Raises
        ConnectError or HotPathError when the append is refused: then nothing of it is kept.
        `developer`: a team server's, whose request it came in (a run it opens is theirs)."""
        admitted, generation = order.admit(append)
        durable = self._journal(append, generation, developer)
        if admitted is Admitted.RESEND:
            return durable
        ready = order.take(append, admitted, generation)
        service = self.service
        if append.variant == "client_heartbeat":
            service.heartbeat(append.request_id)
        if len(ready) == 1:
            self._hand_over(ready[0], parent, developer)
        elif ready:
            with service.together():  # held ones reach the runtime with it, all at once
                for item in ready:
                    self._hand_over(item, parent, developer)
        return durable

    async def stored(self, durable: asyncio.Future[Any]) -> None:
        """Wait for an append's journal row; ConnectError unavailable when it could not be stored
        (taken, but not acknowledged: a resend is a duplicate)."""
        try:
            await durable
        except StoreError as exc:
            raise self._unjournaled(exc) from None

    def _journal(self, append: BidiAppend, generation: str, developer: str | None) -> asyncio.Future[Any]:
        """Queue the admitted append's journal row, before it is handed on: whatever it causes is
        stored with it or after it. An append to a stream that has ended (a late reply, its run
        request again) has no effect and its stream's rows are gone: it is not journaled (it would
        stay for good). While the server stops, streams end cut, their rows kept for the next
        start: what comes for them then is journaled with them."""
        service = self.service
        store = service.services.store
        opened = append.append_seqno > 0
        if store is None or (not self.stopping and service.has_ended(append.request_id, generation, opened=opened)):
            done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        try:
            return store.record_append(append.request_id, generation, append.append_seqno, append.raw, developer)
        except StoreError as exc:  # the store is closing: the IDE sends the append again
            raise self._unjournaled(exc) from None

    @property
    def _database(self) -> Path | None:
        """The SQLite file a storage fault names (a PostgreSQL store is named by its error)."""
        config = self.service.services.config
        return config.database_path if config.embedded_store else None

    def _unjournaled(self, exc: BaseException) -> ConnectError:
        problem = storage_problem(exc, self._database)
        return ConnectError("unavailable", f"the append was not stored: {problem}; send it again")

    def _hand_over(self, item: BidiAppend, parent: ParentConversationRef | None, developer: str | None) -> None:
        service = self.service
        if item.append_seqno == 0 and item.variant == "run_request":
            service.open_run(item.request_id, item.message.run_request, parent, wire=item.raw, developer=developer)
        elif item.variant != "client_heartbeat":
            service.deliver(item.request_id, item.message, seqno=item.append_seqno, wire=item.raw)

    # -- after a restart ----------------------------------------------------------------------------
    async def resume_journaled(self, runs_locally: RunsLocally, keep: Keep | None = None) -> list[AppendOrder]:
        """At start: rebuild the order of every journaled stream and resume its run, oldest first;
        the orders, for the gateway's transports. Each stream on its own: one that cannot be
        resumed, for whatever reason, is quarantined (one WARNING naming its conversation) and the
        others go on: a start never fails because of a stored row. `keep`: whether this server
        resumes the streams of a conversation (several instances on one database: only those it
        owns); the others' rows are left as they are."""
        store = self.service.services.store
        if store is None:
            return []
        orders: list[AppendOrder] = []
        replayed = 0
        try:
            streams = await store.inbound_streams()
        except (StoreError, sqlite3.Error, OSError) as exc:  # its rows stay: the next start tries again
            log.warning("the inbound journal could not be read; no cut stream is resumed: %s", storage_problem(exc, self._database))
            return []
        for stream in streams:
            if keep is not None and not await keep(_conversation_of(stream)):
                continue
            try:
                order, taken = await self._resume(stream, runs_locally)
            except ConnectError as exc:
                if exc.code == "unavailable":  # the store, not the row: it may recover by the next start
                    log.warning("journaled stream not resumed: %s", exc.message, extra={"request_id": stream.request_id})
                    continue
                self._quarantine(stream, exc.message)
            except Exception as exc:  # noqa: BLE001 - whatever a stored row does, the server starts
                self._quarantine(stream, f"{type(exc).__name__}: {exc}")
            else:
                orders.append(order)
                replayed += taken
        if streams:
            log.info("journaled streams resumed", extra={"streams": len(orders), "appends_taken_again": replayed})
        return orders

    async def _resume(self, stream: InboundStream, runs_locally: RunsLocally) -> tuple[AppendOrder, int]:
        """Resume one stream: its order, and how many journaled appends after its run request are
        taken again. Rows below its settle mark had their effect; a row the order does not admit
        now (from a version that journaled refused input) was refused when it came: skipped."""
        first = stream.appends[0]
        if first.seqno != 0 or first.message is None:
            raise ConnectError("failed_precondition", "its run request is not in the journal")
        seqno0 = client_message(stream.request_id, 0, first.message, binary=False)
        if seqno0.variant != "run_request" or not runs_locally(seqno0.message):
            raise ConnectError("failed_precondition", "its first append is not a run request this server runs")
        settled = max((row.seqno for row in stream.appends if row.message is None), default=0)
        order = AppendOrder(stream.request_id, self.window, settled + 1)
        order.seqno0, order.cursor_run_id = fingerprint(seqno0), stream.generation
        replay: list[tuple[int, pb.AgentClientMessage]] = []
        for row in stream.appends:
            if row.seqno <= settled or row.message is None:
                continue
            append = client_message(stream.request_id, row.seqno, row.message, binary=False)
            try:
                admitted, generation = order.admit(append)
            except (ConnectError, hotpath.HotPathError) as exc:
                log.info("journaled append not taken again: %s", exc, extra={"request_id": stream.request_id})
                continue
            if admitted is not Admitted.RESEND:
                replay += [(item.append_seqno, item.message) for item in order.take(append, admitted, generation) if item.variant != "client_heartbeat"]
        await self.service.resume(stream.request_id, seqno0.message.run_request, replay, developer=stream.developer)
        return order, len(replay)

    def _quarantine(self, stream: InboundStream, reason: str) -> None:
        conversation_id = _conversation_of(stream)
        log.warning(
            "journaled stream quarantined, the server goes on without it: conversation %s (request %s): %s; "
            "its input is kept aside (`cursor-byok doctor` lists it)",
            conversation_id or "unknown", stream.request_id, reason,
            extra={"conversation_id": conversation_id, "request_id": stream.request_id},
        )
        store = self.service.services.store
        assert store is not None
        store.quarantine_appends(stream.request_id, stream.generation, conversation_id, reason)


def _conversation_of(stream: InboundStream) -> str | None:
    """The conversation a journaled stream's run request names, if it can be read."""
    first = stream.appends[0]
    if first.seqno != 0 or first.message is None:
        return None
    try:
        return client_message(stream.request_id, 0, first.message, binary=False).message.run_request.conversation_id or None
    except Exception:  # noqa: BLE001 - only a name for the log line
        return None


RunsLocally = Callable[["pb.AgentClientMessage"], bool]
Keep = Callable[[str | None], Awaitable[bool]]  # a conversation id (None: unreadable) → resumed here
