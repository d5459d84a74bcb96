"""The inbound journal, gateway side: each locally served append is journaled before its 200, and
after a restart the streams it names are resumed.

What is journaled is the transport's view of an append (request id, generation, seqno, the
message's bytes), so a restart rebuilds each transport as it stood: its seqno-0 run request, the
seqnos already taken (a resend of one is a duplicate again) and the ones held behind a gap (the
IDE resends the append that got no 200, and the held ones follow it). The conversation layer
decides what each journaled message means when it is taken again, and when its rows can go.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from .. import hotpath
from ..instance import storage_problem
from ..protocol import BidiAppend, ConnectError, client_message
from ..store import StoreError
from .routing import route_for
from .transport import Route, Transport, fingerprint

if TYPE_CHECKING:
    from ..store import InboundStream
    from .app import Gateway

log = logging.getLogger("cursor_byok.gateway.journal")


def journal(gw: Gateway, transport: Transport, append: BidiAppend) -> asyncio.Future[Any]:
    """Queue the append's journal row; the IDE gets its 200 once the future resolves. Queued before
    the append is handed on, so whatever it causes is stored with it or after it. An append to a
    stream that has ended (a late reply, its run request again) has no effect and its stream's rows
    are gone: it is not journaled (it would stay for good). While the server stops, streams end
    cut, their rows kept for the next start: what comes for them then is journaled with them."""
    if not gw.stopping and gw.conversations.has_ended(append.request_id, transport.cursor_run_id, opened=append.append_seqno > 0):
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done
    try:
        return gw.store.record_append(append.request_id, transport.cursor_run_id, append.append_seqno, append.raw)
    except StoreError as exc:  # the store is closing: the IDE sends the append again
        raise unjournaled(gw, exc) from None


def unjournaled(gw: Gateway, exc: BaseException) -> ConnectError:
    return ConnectError("unavailable", f"the append was not stored: {storage_problem(exc, gw.config.database_path)}; send it again")


async def resume_journaled(gw: Gateway) -> None:
    """At start: rebuild the transport of every journaled stream and resume its run, oldest first."""
    streams = await gw.store.inbound_streams()
    replayed = 0
    for stream in streams:
        try:
            replayed += await _resume(gw, stream)
        except ConnectError as exc:
            log.warning("journaled stream not resumed: %s", exc.message, extra={"request_id": stream.request_id})
            if exc.code != "unavailable":  # it never will be (an unavailable store may recover by the next start)
                gw.store.forget_appends(stream.request_id, stream.generation)
    if streams:
        log.info("journaled streams resumed", extra={"streams": len(streams), "appends_taken_again": replayed})


async def _resume(gw: Gateway, stream: InboundStream) -> int:
    """Resume one stream; how many journaled appends after its run request are taken again."""
    first, rest = stream.appends[0], stream.appends[1:]
    if first.seqno != 0 or first.message is None:
        raise ConnectError("failed_precondition", "its run request is not in the journal")
    seqno0 = client_message(stream.request_id, 0, first.message, binary=False)
    if seqno0.variant != "run_request" or route_for(seqno0.message, gw.config) is not Route.LOCAL:
        raise ConnectError("failed_precondition", "its first append is not a run request this server runs")
    transport = Transport(stream.request_id, Route.LOCAL, gw.transports.window)
    transport.seqno0 = fingerprint(seqno0)
    transport.cursor_run_id = stream.generation
    start = 1
    if rest and rest[0].message is None:  # settled through here
        start = rest[0].seqno + 1
        rest = rest[1:]
    transport.buffer = hotpath.ReorderBuffer(transport.window, start)
    replay: list[tuple[int, Any]] = []
    for row in rest:
        assert row.message is not None
        for item in transport.buffer.push(row.seqno, client_message(stream.request_id, row.seqno, row.message, binary=False)):
            if item.variant != "client_heartbeat":
                replay.append((item.append_seqno, item.message))
    await gw.conversations.resume(stream.request_id, seqno0.message.run_request, replay)
    gw.transports.restore(transport)
    return len(replay)
