"""Several instances on one database: where a request goes when its conversation runs in another
instance. Routing only, as for any request: an append for a conversation another instance owns goes
there and its answer comes back; a RunSSE for a stream another instance writes relays its frames.
With affinity (one instance per request id) nothing leaves the instance: a run request claims its
conversation here and the rest finds its transport here. What this instance does for the others is
`peers.Peers`.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..cluster import Forwarded, OwnerGone
from ..protocol import BidiAppend, ConnectError, end_stream_error
from .asgi import STREAM_HEADERS, DisconnectWatch, Receive, Send
from .routing import route_of
from .transport import Route

if TYPE_CHECKING:
    from ..cluster import Cluster
    from ..protocol import RequestHeaders
    from .app import Gateway

OWNER_GONE = ConnectError("unavailable", "the instance running this conversation stopped; send it again")


async def owner_elsewhere(gw: Gateway, cluster: Cluster, append: BidiAppend) -> str | None:
    """The other instance that runs the append's conversation; None: it is taken here (its
    transport is here, or its run request claims the conversation here)."""
    request_id = append.request_id
    if gw.transports.get(request_id) is not None:
        return None  # the fast path: this request id's stream is here
    wait = gw.config.server.runsse_wait_seconds
    if append.append_seqno == 0:
        if route_of(append.variant, append.message, gw.config) is not Route.LOCAL:
            return None
        conversation_id = append.message.run_request.conversation_id
        owner = await cluster.claim(conversation_id, wait, request_id) if conversation_id else await cluster.owner_of_request(request_id, wait)
    else:
        owner = await cluster.owner_of_request(request_id, wait)
    return None if owner in (None, cluster.me) else owner


async def claim_for_run(gw: Gateway, cluster: Cluster, first: BidiAppend) -> None:
    """A `Run` stream (HTTP/2, one stream per turn, never split) is served where it lands: its
    conversation is claimed here. ConnectError unavailable when another instance is busy with it."""
    if await owner_elsewhere(gw, cluster, first) is not None:
        raise ConnectError("unavailable", "another instance is running this conversation; send it again when its turn has ended")


async def stream_elsewhere(cluster: Cluster, request_id: str, wait: float, unbound: Callable[[], ConnectError]) -> str | None:
    """The other instance that writes the request id's stream; None: it is written here. Raises
    `unbound()` when no instance binds the request id within `wait`."""
    owner = await cluster.owner_of_request(request_id, wait)
    if owner is None:
        raise unbound()
    return None if owner == cluster.me else owner


async def forward_append(
    gw: Gateway, cluster: Cluster, owner: str, append: BidiAppend, body: bytes, headers: RequestHeaders, developer: str | None
) -> bool:
    """The append to its owner: True once the owner took it (its refusal raised as the owner worded
    it); False when the owner went silent and its lease ended: the conversation was taken over
    here, and the append is to be taken here (a copy the owner journaled first is a resend).
    `developer`: a team server's, whose token the request carried (checked and recorded there)."""
    forwarded = Forwarded(body, headers.content_encoding, headers.parent_request_id, headers.parent_tool_call_id, developer)
    while owner is not None:
        answer = await cluster.forward_append(owner, forwarded)
        if answer is not None:
            if answer.code:
                raise ConnectError(answer.code, answer.message)
            return True
        owner = await owner_elsewhere(gw, cluster, append)
    return False


async def relay_remote(
    cluster: Cluster, owner: str, request_id: str, developer: str | None, receive: Receive, send: Send
) -> bool:
    """A RunSSE whose stream another instance writes: its frames, as they come, through its
    terminal. False when the owner went silent and its lease ended before any frame came: nothing
    was sent, and the stream is to be found again (another instance, or this one, took it over).
    `developer`: a team server's reader; the owner relays only that developer's stream."""
    me = asyncio.current_task()
    assert me is not None
    watch = DisconnectWatch(receive, me.cancel)
    started = False
    try:
        async for frames, more in cluster.read(owner, request_id, developer):
            if not started:
                await send({"type": "http.response.start", "status": 200, "headers": STREAM_HEADERS})
                started = True
            await send({"type": "http.response.body", "body": frames, "more_body": more})
    except OwnerGone:
        if not started:
            return False
        await send({"type": "http.response.body", "body": end_stream_error(OWNER_GONE), "more_body": False})
    except asyncio.CancelledError:
        if not watch.ended:
            raise  # the client left otherwise: the reader's LEAVE told the owner
    finally:
        watch.stop()
    return True
