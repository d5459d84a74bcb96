"""BidiAppend: decode and route; the conversation's inbox admits, journals and hands over.

An append is decoded and its identifiers, the first-message rule and the binding checked before a
transport is created or touched: refused input allocates nothing. A locally served one then goes
to the conversation side in one step (`AppendIntake.take`: admit → journal → hand over), which
keeps nothing of what it refuses, and is answered 200 only once its journal row is durable: what
the IDE has been told was received survives a crash.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ..conversation import ParentConversationRef, fingerprint
from ..hotpath import HotPathError
from ..protocol import BidiAppend, ConnectError, connect_error_from, decode_bidi_append, parse_request_headers
from .asgi import DisconnectWatch, Receive, Scope, Send, reply_error, reply_proto
from .crossing import forward_append, owner_elsewhere
from .deadline import Deadline
from .guard import developer_of
from .routing import route_of
from .transport import Route, Transport, Waiter

if TYPE_CHECKING:
    from .app import Gateway

log = logging.getLogger("cursor_byok.gateway.bidi")


async def handle_append(gw: Gateway, scope: Scope, receive: Receive, send: Send) -> None:
    server = gw.config.server
    try:
        headers = parse_request_headers(scope["headers"])
        deadline = Deadline.of(headers.timeout_ms)
        body = await gw.pending.read_body(scope, receive, server.max_body_bytes, server.body_read_timeout_seconds, headers.content_length)
        append = decode_bidi_append(body, max_size=server.max_frame_bytes, content_encoding=headers.content_encoding)
        developer = developer_of(scope)
        check_theirs(gw, append.request_id, developer)
        cluster = gw.cluster
        if cluster is not None:  # several instances on one database: this append's conversation may run in another
            owner = await owner_elsewhere(gw, cluster, append)
            if owner is not None and await forward_append(gw, cluster, owner, append, body, headers, developer):
                gw.appends += 1
                await reply_proto(send)
                return
        # From each resolve to the hand-over below nothing awaits: the checks see the binding it found.
        durable: asyncio.Future[Any] | None = None  # its journal row, when its seqno 0 took it along
        if append.append_seqno == 0:
            await gw.conversations.resolve(append.request_id)
            transport = seqno0_transport(gw, append)
        else:
            transport = gw.transports.get(append.request_id)
            if transport is None:
                transport, durable = await _later_before_seqno0(gw, scope, receive, append, deadline)
            if durable is None and transport.route is Route.LOCAL:
                await gw.conversations.resolve(append.request_id)
        if transport.route is Route.UPSTREAM:
            await gw.upstream.forward(scope, receive, send, body=body)
            return
        if durable is None:
            parent = local_parent(gw, headers.parent_request_id, headers.parent_tool_call_id)
            durable = deliver_local(gw, transport, append, parent, developer)
        # Durable within the hand-over's step (the loop committed it): the run's model request,
        # which that commit released, has left in that step too.
        committed_in_step = durable.done()
        stored = gw.conversations.appends.stored(durable)
        if deadline.timeout_ms is None:
            await stored
        else:
            try:  # shielded: the row's future is its commit's, shared with other appends
                async with asyncio.timeout_at(deadline.when):
                    await asyncio.shield(stored)
            except TimeoutError:
                raise deadline.error() from None
        gw.appends += 1
        if append.append_seqno == 0 and not committed_in_step:
            # The commit that made this durable released the run's model request as well: that
            # goes out first, this 200 (which nobody waits on to see the answer) right after.
            await asyncio.sleep(0)
    except ConnectError as err:
        await reply_error(send, err)
        return
    except HotPathError as exc:
        await reply_error(send, connect_error_from(exc))
        return
    await reply_proto(send)


def seqno0_transport(gw: Gateway, append: BidiAppend) -> Transport:
    """The transport a valid seqno-0 append opens or continues; ConnectError (nothing allocated)
    when it does not select a model or conflicts with the request id's binding."""
    transport = gw.transports.get(append.request_id)
    if transport is not None and fingerprint(append) == transport.order.seqno0:
        return transport  # the same event again: idempotent
    route = route_of(append.variant, append.message, gw.config)
    if (transport.route if transport is not None else route) is Route.LOCAL:
        service = gw.conversations
        rr = append.message.run_request
        service.check_binding(append.request_id, service.conversation_for(rr, append.request_id))
    return transport if transport is not None else gw.transports.create(append.request_id, route)


async def _later_before_seqno0(
    gw: Gateway, scope: Scope, receive: Receive, append: BidiAppend, deadline: Deadline
) -> tuple[Transport, asyncio.Future[Any] | None]:
    """The transport for a later append that found none: its seqno 0 may be on its way (wait for
    it), unless the request id is bound to a stream that has ended (before a restart, or since its
    transport went): then no seqno 0 will come, and the IDE is told at once. While it waits the
    append is parked: a local seqno 0 takes it along, and its journal row comes back with the
    transport (None: it goes on as any append)."""
    request_id = append.request_id
    await gw.conversations.resolve(request_id)
    if gw.conversations.stream_ended(request_id):
        raise ConnectError("not_found", f"the run for request {request_id} has ended; nothing more can be appended to it")
    wait = gw.config.server.runsse_wait_seconds

    def never_came() -> ConnectError:
        return ConnectError("invalid_argument", "first BidiAppend message must select a model (seqno 0 never came)")

    on_timeout = never_came
    if deadline.remaining() < wait:  # the client gives up first
        wait = deadline.remaining()
        on_timeout = deadline.error
    early = gw.transports.park(append)
    me = asyncio.current_task()
    assert me is not None
    waiting, left_first = True, False  # the client leaving cancels the wait, and only the wait

    def leave() -> None:
        nonlocal left_first
        if waiting:
            left_first = True
            me.cancel()

    left = DisconnectWatch(receive, leave)
    try:
        try:
            with gw.pending.slot(scope, wait, on_timeout):
                transport = await gw.transports.wait_for(request_id, Waiter.APPEND)
        except asyncio.CancelledError:
            if not left_first:
                raise
            me.uncancel()
            raise ConnectError("canceled", "the client left while its append waited for seqno 0") from None
        finally:
            waiting = False
    except ConnectError:
        taken = gw.transports.get(request_id)
        if taken is None or (early.durable is None and early.error is None):
            raise
        transport = taken  # its seqno 0 took it along before the wait was cut: answered as taken
    finally:
        left.stop()
        gw.transports.unpark(early)
    if early.error is not None:
        raise early.error
    return transport, early.durable


def deliver_local(
    gw: Gateway, transport: Transport, append: BidiAppend, parent: ParentConversationRef | None, developer: str | None = None
) -> asyncio.Future[Any]:
    """The append to its conversation's inbox (admitted, journaled, handed over; refused: raises and
    nothing is kept), with the later appends that waited for it when it is their seqno 0; the
    returned future resolves once its journal row is durable. `developer`: a team server's, whose
    token the request carried (a run it opens is theirs)."""
    intake = gw.conversations.appends
    parked = gw.transports.early  # later appends waiting for their seqno 0: it takes them along
    if not (parked and append.append_seqno == 0 and append.request_id in parked):
        durable = intake.take(transport.order, append, parent, developer)
    else:
        # Appends that waited for this one reach the runtime with it: a cancel among them is seen
        # before the model is called.
        with gw.conversations.together():
            durable = intake.take(transport.order, append, parent, developer)
            for early in parked.pop(append.request_id):
                try:
                    early.durable = intake.take(transport.order, early.append, None)
                except (ConnectError, HotPathError) as exc:  # its own request's answer
                    early.error = exc
    if append.append_seqno == 0 and gw.cluster is not None:
        gw.cluster.bound_here(append.request_id)  # several instances: its run is this one's
    return durable


def check_theirs(gw: Gateway, request_id: str, developer: str | None) -> None:
    """On a team server, a run stream is its developer's alone: permission_denied (before anything
    is allocated) for a request from another."""
    if gw.guard.team is None:
        return  # a single-user server: nothing to look up
    stream = gw.conversations.hub.get(request_id)
    if stream is not None and not stream.theirs(developer):
        raise ConnectError("permission_denied", f"request {request_id} is another developer's run")


def local_parent(gw: Gateway, parent_request_id: str | None, tool_call_id: str | None) -> ParentConversationRef | None:
    if not parent_request_id or not tool_call_id:
        return None
    return gw.conversations.parent_ref(parent_request_id, tool_call_id)
