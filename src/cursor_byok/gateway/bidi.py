"""BidiAppend: decode, route, order by append_seqno, answer heartbeats at once, hand over to the runtime."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..conversation import ParentConversationRef
from ..hotpath import HotPathError
from ..protocol import BidiAppend, ConnectError, connect_error_from, decode_bidi_append, parse_request_headers
from .asgi import Receive, Scope, Send, read_body, reply_error, reply_proto
from .routing import route_for
from .transport import Route, Transport

if TYPE_CHECKING:
    from .app import Gateway

log = logging.getLogger("cursor_byok.gateway.bidi")


async def handle_append(gw: Gateway, scope: Scope, receive: Receive, send: Send) -> None:
    try:
        headers = parse_request_headers(scope["headers"])
        body = await read_body(receive, gw.config.server.max_body_bytes)
        append = decode_bidi_append(
            body, max_size=gw.config.server.max_frame_bytes, content_encoding=headers.content_encoding
        )
        transport = gw.transports.get_or_create(append.request_id)
        if transport is None:
            raise ConnectError("resource_exhausted", "too many open transports")
        if append.append_seqno == 0:
            if transport.route is None:
                transport.set_route(route_for(append.message, gw.config))
        elif not await transport.wait_routed(gw.config.server.runsse_wait_seconds):
            raise ConnectError("invalid_argument", "first BidiAppend message must select a model (seqno 0 never came)")
        if transport.route is Route.UPSTREAM:
            await gw.upstream.forward(scope, receive, send, body=body)
            return
        parent = _parent_ref(gw, headers.parent_request_id, headers.parent_tool_call_id)
        deliver_local(gw, transport, append, parent)
    except ConnectError as err:
        await reply_error(send, err)
        return
    except HotPathError as exc:
        await reply_error(send, connect_error_from(exc))
        return
    await reply_proto(send)


def deliver_local(gw: Gateway, transport: Transport, append: BidiAppend, parent: ParentConversationRef | None) -> None:
    """Order the append and hand every deliverable message to the conversation domain."""
    service = gw.conversations
    if append.append_seqno == 0 and transport.seqno0_raw:
        if append.raw == transport.seqno0_raw:
            return  # the same event again: idempotent
        rr = append.message.run_request
        run_id = rr.run_id if rr.HasField("run_id") else ""
        service.check_binding(append.request_id, service.conversation_for(rr, append.request_id))
        if not run_id or run_id == transport.cursor_run_id:
            raise ConnectError(
                "failed_precondition", "a different seqno-0 message for the same request and run; refusing to guess"
            )
        transport.new_generation(append, run_id)
    elif append.append_seqno == 0:
        rr = append.message.run_request
        service.check_binding(append.request_id, service.conversation_for(rr, append.request_id))
        transport.seqno0_raw = append.raw
        transport.cursor_run_id = rr.run_id if rr.HasField("run_id") else ""
    if append.variant == "client_heartbeat":
        service.heartbeat(append.request_id)
    for item in transport.buffer.push(append.append_seqno, append):
        if item.append_seqno == 0 and item.variant == "run_request":
            service.open_run(item.request_id, item.message.run_request, parent)
        elif item.variant != "client_heartbeat":
            service.deliver(item.request_id, item.message)


def _parent_ref(gw: Gateway, parent_request_id: str | None, tool_call_id: str | None) -> ParentConversationRef | None:
    if not parent_request_id or not tool_call_id:
        return None
    return gw.conversations.parent_ref(parent_request_id, tool_call_id)
