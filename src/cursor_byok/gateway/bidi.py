"""BidiAppend: decode, route, order by append_seqno, answer heartbeats at once, hand over to the runtime.

An append is checked completely (decode, identifiers, seqno, the first-message rule, the binding)
before a transport is created or touched: refused input allocates nothing. A locally served one is
journaled before it is handed over and answered 200 only once that row is durable (journal.py):
what the IDE has been told was received survives a crash. Appends that come in the same instant
share one commit.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ..conversation import ConversationService, ParentConversationRef
from ..hotpath import HotPathError
from ..protocol import BidiAppend, ConnectError, connect_error_from, decode_bidi_append, parse_request_headers
from ..store import StoreError
from .asgi import Receive, Scope, Send, reply_error, reply_proto, watch_disconnect
from .deadline import Deadline
from .journal import journal, unjournaled
from .routing import route_for
from .transport import EarlyAppend, Route, Transport, Waiter, fingerprint

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
        # From each resolve to the hand-over below nothing awaits: the checks see the binding it found.
        durable: asyncio.Future[Any] | None = None  # its journal row, when its seqno 0 took it along
        if append.append_seqno == 0:
            await gw.conversations.resolve(append.request_id)
            transport = _seqno0_transport(gw, append)
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
            durable = deliver_local(gw, transport, append, _parent_ref(gw, headers.parent_request_id, headers.parent_tool_call_id))
        try:
            if deadline.timeout_ms is None:
                await durable
            else:  # shielded: the row's future is its commit's, shared with other appends
                async with asyncio.timeout_at(deadline.when):
                    await asyncio.shield(durable)
        except TimeoutError:
            raise deadline.error() from None
        except StoreError as exc:  # taken, but not durable: not acknowledged (a resend is a duplicate)
            raise unjournaled(gw, exc) from None
        gw.appends += 1
        if append.append_seqno == 0:
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


def _seqno0_transport(gw: Gateway, append: BidiAppend) -> Transport:
    """The transport a valid seqno-0 append opens or continues; ConnectError (nothing allocated)
    when it does not select a model or conflicts with the request id's binding."""
    transport = gw.transports.get(append.request_id)
    if transport is not None and fingerprint(append) == transport.seqno0:
        return transport  # the same event again: idempotent
    route = route_for(append.message, gw.config)
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

    left = asyncio.get_running_loop().create_task(watch_disconnect(receive, leave))
    try:
        try:
            async with gw.pending.slot(scope, wait, on_timeout):
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
        left.cancel()
        gw.transports.unpark(early)
    if early.error is not None:
        raise early.error
    return transport, early.durable


def deliver_local(gw: Gateway, transport: Transport, append: BidiAppend, parent: ParentConversationRef | None) -> asyncio.Future[Any]:
    """Journal the append, order it and hand every deliverable message to the conversation domain;
    the returned future resolves once the journal row is durable."""
    service = gw.conversations
    if append.append_seqno == 0 and transport.seqno0 is not None:
        seqno0 = fingerprint(append)
        if seqno0 == transport.seqno0:
            return journal(gw, transport, append)  # the same event again: idempotent
        rr = append.message.run_request
        run_id = rr.run_id if rr.HasField("run_id") else ""
        if not run_id or run_id == transport.cursor_run_id:
            raise ConnectError(
                "failed_precondition", "a different seqno-0 message for the same request and run; refusing to guess"
            )
        transport.new_generation(seqno0, run_id)
    elif append.append_seqno == 0:
        rr = append.message.run_request
        transport.seqno0 = fingerprint(append)
        transport.cursor_run_id = rr.run_id if rr.HasField("run_id") else ""
    durable = _journaled(gw, transport, append)
    parked = gw.transports.early  # later appends waiting for their seqno 0: it takes them along
    early = parked.pop(append.request_id, ()) if parked and append.append_seqno == 0 else ()
    ready = transport.buffer.push(append.append_seqno, append)
    if len(ready) == 1 and not early:
        hand_over(service, ready[0], parent)
    elif ready:
        # Appends that waited for this one reach the runtime with it: a cancel among them is
        # seen before the model is called.
        with service.together():
            for item in ready:
                hand_over(service, item, parent)
            for waiting in early:
                _take_along(gw, transport, waiting)
    return durable


def _take_along(gw: Gateway, transport: Transport, early: EarlyAppend) -> None:
    """A parked later append, journaled and handed over after its seqno 0 (in order); what goes
    wrong with it is its own request's answer."""
    try:
        early.durable = _journaled(gw, transport, early.append)
        for item in transport.buffer.push(early.append.append_seqno, early.append):
            hand_over(gw.conversations, item, None)
    except (ConnectError, HotPathError) as exc:
        early.error = exc


def _journaled(gw: Gateway, transport: Transport, append: BidiAppend) -> asyncio.Future[Any]:
    """The append journaled (its durable future); a heartbeat also counts as one."""
    durable = journal(gw, transport, append)
    if append.variant == "client_heartbeat":
        gw.conversations.heartbeat(append.request_id)
    return durable


def hand_over(service: ConversationService, item: BidiAppend, parent: ParentConversationRef | None) -> None:
    """One append, in order, to the conversation domain."""
    if item.append_seqno == 0 and item.variant == "run_request":
        service.open_run(item.request_id, item.message.run_request, parent, wire=item.raw)
    elif item.variant != "client_heartbeat":
        service.deliver(item.request_id, item.message, seqno=item.append_seqno, wire=item.raw)


def _parent_ref(gw: Gateway, parent_request_id: str | None, tool_call_id: str | None) -> ParentConversationRef | None:
    if not parent_request_id or not tool_call_id:
        return None
    return gw.conversations.parent_ref(parent_request_id, tool_call_id)
