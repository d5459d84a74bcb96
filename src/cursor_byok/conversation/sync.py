"""KV blob exchange with the IDE (set_blob / get_blob), per request id.

Each request id has its own KvServerMessage id counter (from 1, shared by set and get); a blob
already acked on a request id, or named by the checkpoint the client sent with that request, is
not sent again, and one on its way there is not sent twice: a second push waits for its ack.
Replies arrive as client input and are matched by id. Only data moves here: the runtime decides
what a failed or missing reply means, and calls `forget` once the request id's stream has ended,
so nothing here outlives the streams in use.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import msgspec

from ..protocol import ConnectError, agent_pb2 as pb, encode_server_message, which
from . import updates
from .history import blob_id
from .output import OutputStream


class _SetBlobFrame(msgspec.Struct, frozen=True):
    """A set_blob frame as its stream retains it: the blob is encoded again for a replay."""

    kv_id: int
    blob_id: bytes
    data: Callable[[], bytes]
    size: int

    def __len__(self) -> int:
        return self.size

    def encode(self) -> bytes:
        return encode_server_message(updates.set_blob(self.kv_id, self.blob_id, self.data()))


class BlobSync:
    def __init__(self) -> None:
        self._next_id: dict[str, int] = {}
        self._acked: dict[str, set[bytes]] = {}
        self._pushing: dict[str, dict[bytes, asyncio.Future[pb.KvClientMessage]]] = {}  # sent, ack awaited
        self._waiters: dict[tuple[str, int], asyncio.Future[pb.KvClientMessage]] = {}
        self._named: dict[str, pb.ConversationStateStructure] = {}  # the client's checkpoint, not read yet
        self._roots: dict[str, bytes] = {}  # the root ids it names, encoded (see `client_roots`)

    def _request(self, request_id: str) -> tuple[int, asyncio.Future[pb.KvClientMessage]]:
        kv_id = self._next_id.get(request_id, 0) + 1
        self._next_id[request_id] = kv_id
        fut: asyncio.Future[pb.KvClientMessage] = asyncio.get_running_loop().create_future()
        key = (request_id, kv_id)
        self._waiters[key] = fut
        # A waiter that ends without its reply (timed out, cancelled) leaves with it.
        fut.add_done_callback(lambda done: self._waiters.pop(key) if self._waiters.get(key) is done else None)
        return kv_id, fut

    def held_by_client(self, request_id: str, state: pb.ConversationStateStructure) -> None:
        """The client's own checkpoint for this request id: it stores the blobs that names (it needs
        them to resume), so they are not pushed again. Without this every turn, on its new request
        id, would push the whole history once more. Read when a push asks (`held`, `client_roots`),
        not as the run starts: a root id per message of the history."""
        if state.ListFields():
            self._named[request_id] = state

    def held(self, request_id: str) -> set[bytes]:
        """Blob ids the client holds for this request id: acked, or named by its checkpoint besides
        its roots (which `client_roots` gives)."""
        acked = self._acked.setdefault(request_id, set())
        state = self._named.pop(request_id, None)
        if state is not None:
            acked.update(state.turns)
            acked.update(state.todos)
            if state.HasField("plan"):
                acked.add(state.plan)
            self._roots[request_id] = roots_of(state)
        return acked

    def client_roots(self, request_id: str) -> bytes | None:
        """The root ids the client's checkpoint names, encoded as the state holds them (see
        `RootBlobs.build`): a run's roots start with them while its history extends the client's.
        None: the client sent no checkpoint with this request id."""
        self.held(request_id)
        return self._roots.get(request_id)

    def set_blob(
        self, output: OutputStream, request_id: str, bid: bytes, data: bytes, rebuild: Callable[[], bytes] | None = None
    ) -> Awaitable[pb.KvClientMessage] | None:
        """Push one blob (`bid` is its id); the awaitable resolves on the client's ack (None: the
        client holds it already). `rebuild`: gives `data` again from what the server keeps anyway;
        the stream then retains that for a replay rather than the blob's bytes."""
        acked = self._acked.setdefault(request_id, set())
        if bid in acked:
            return None
        pushing = self._pushing.setdefault(request_id, {})
        sent = pushing.get(bid)
        if sent is not None:
            return sent  # a checkpoint before this one pushed it: its ack is this one's too
        kv_id, fut = self._request(request_id)
        pushing[bid] = fut

        def settled(f: asyncio.Future[pb.KvClientMessage]) -> None:
            if pushing.get(bid) is f:
                del pushing[bid]  # acked, or to be pushed again by the next checkpoint naming it
            if not f.cancelled() and f.exception() is None:
                acked.add(bid)

        fut.add_done_callback(settled)
        frame = encode_server_message(updates.set_blob(kv_id, bid, data))
        output.write(frame, None if rebuild is None else _SetBlobFrame(kv_id, bid, rebuild, len(frame)))
        return fut

    async def get_blob(self, output: OutputStream, request_id: str, bid: bytes) -> bytes:
        """Ask the client for a blob; it must be there and hash to its id."""
        kv_id, fut = self._request(request_id)
        output.write(encode_server_message(updates.get_blob(kv_id, bid)))
        result = (await fut).get_blob_result
        if not result.HasField("blob_data"):
            raise ConnectError("not_found", f"checkpoint blob {bid.hex()} is not stored by the client")
        if blob_id(result.blob_data) != bid:
            raise ConnectError("invalid_argument", f"checkpoint blob {bid.hex()} does not hash to its id")
        return result.blob_data

    def on_reply(self, request_id: str, msg: pb.KvClientMessage) -> None:
        kind = which(msg, "message")
        if kind is None:
            return  # no reply this build knows: not an ack (the wait for one times out)
        fut = self._waiters.pop((request_id, msg.id), None)
        if fut is None or fut.done():
            return  # a reply nobody waits for (late, or for a cancelled run)
        if kind == "set_blob_result" and msg.set_blob_result.HasField("error"):
            fut.set_exception(ConnectError("internal", "the client failed to store a checkpoint blob"))
        else:
            fut.set_result(msg)

    def forget(self, request_id: str) -> None:
        """The request id's stream has ended: stop waiting for its replies and drop what it held."""
        for key in [k for k in self._waiters if k[0] == request_id]:
            self._waiters.pop(key).cancel()
        self._next_id.pop(request_id, None)
        self._acked.pop(request_id, None)
        self._pushing.pop(request_id, None)
        self._named.pop(request_id, None)
        self._roots.pop(request_id, None)

    def request_ids(self) -> set[str]:
        """Request ids with any state here (for tests and benchmarks)."""
        return {*self._next_id, *self._acked, *self._pushing, *self._named, *self._roots, *(rid for rid, _ in self._waiters)}


def roots_of(state: pb.ConversationStateStructure) -> bytes:
    """The state's root ids as its encoding holds them: a copy with its other fields cleared,
    serialized (copied whole by the protobuf runtime, not an object per id)."""
    roots = pb.ConversationStateStructure()
    roots.CopyFrom(state)
    for field, _ in roots.ListFields():
        if field.name != "root_prompt_messages_json":
            roots.ClearField(field.name)
    roots.DiscardUnknownFields()
    return roots.SerializeToString()
