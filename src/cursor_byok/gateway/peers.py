"""Several instances on one database: what this instance does for the others (the cluster's
`Local`). What comes from another instance takes the same path into the conversation's inbox as an
append that came over HTTP, and its output is read as a local RunSSE reads it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..cluster import Answer
from ..hotpath import HotPathError
from ..protocol import BidiAppend, ConnectError, connect_error_from, decode_bidi_append, end_stream_error
from .bidi import check_theirs, deliver_local, local_parent, seqno0_transport
from .routing import route_of
from .stream import relay
from .transport import Route

if TYPE_CHECKING:
    from ..cluster import Cluster, Forwarded, Sink
    from .app import Gateway


class Peers:
    """What this instance does for the others (the cluster's `Local`)."""

    def __init__(self, gw: Gateway, cluster: Cluster) -> None:
        self.gw = gw
        self.cluster = cluster

    async def take_append(self, forwarded: Forwarded) -> Answer:
        """An append that came to another instance, taken as if it had come here."""
        gw, server = self.gw, self.gw.config.server
        try:
            append = decode_bidi_append(forwarded.body, max_size=server.max_frame_bytes, content_encoding=forwarded.content_encoding)
            request_id = append.request_id
            check_theirs(gw, request_id, forwarded.developer)
            if append.append_seqno == 0 and not await self._still_owned(append):
                raise ConnectError("unavailable", "the conversation moved to another instance on the way; send it again")
            await gw.conversations.resolve(request_id)
            transport = seqno0_transport(gw, append) if append.append_seqno == 0 else gw.transports.get(request_id)
            if transport is None or transport.route is not Route.LOCAL:
                raise ConnectError("not_found", f"no run for request {request_id} on the instance that runs its conversation")
            parent = local_parent(gw, forwarded.parent_request_id, forwarded.parent_tool_call_id)
            durable = deliver_local(gw, transport, append, parent, forwarded.developer)
            await gw.conversations.appends.stored(durable)
        except HotPathError as exc:
            error = connect_error_from(exc)
            return Answer(error.code, error.message)
        except ConnectError as error:
            return Answer(error.code, error.message)
        gw.appends += 1
        return Answer()

    async def _still_owned(self, run_request: BidiAppend) -> bool:
        """A turn forwarded here because this instance owned its conversation: it still does (the
        claim renews it, and holds it here until the turn reaches its runtime)."""
        conversation_id = run_request.message.run_request.conversation_id
        if not conversation_id or route_of(run_request.variant, run_request.message, self.gw.config) is not Route.LOCAL:
            return True
        return await self.cluster.claim(conversation_id, 0.0, run_request.request_id) == self.cluster.me

    async def serve_read(self, request_id: str, developer: str | None, sink: Sink) -> None:
        """Another instance's RunSSE on a stream written here: relayed as a local reader would read it
        (on a team server, only to the stream's developer)."""
        gw = self.gw
        stream = await gw.conversations.hub.wait_for(request_id, gw.config.server.runsse_wait_seconds)
        if stream is None or not stream.theirs(developer):
            await sink(end_stream_error(ConnectError("not_found", f"no run for request {request_id}")), False)
            return

        async def send(message: dict[str, Any]) -> None:
            await sink(message["body"], message["more_body"])

        gw.conversations.attach(request_id, stream)
        try:
            await relay(stream, send, direct_send=False)  # each send is a statement on the database: it suspends
        finally:
            gw.conversations.detach(request_id, stream)

    async def let_go(self, conversation_id: str) -> bool:
        return await self.gw.conversations.let_go(conversation_id)

    async def take_over(self, conversation_id: str) -> None:
        """What a restart does, for one conversation whose owner stopped: its cut runs marked so, its
        journaled streams resumed."""

        async def only_it(candidate: str | None) -> bool:
            return candidate == conversation_id

        await self.gw.conversations.restore(conversation_id=conversation_id)
        await self.gw.resume_journaled(only_it)
