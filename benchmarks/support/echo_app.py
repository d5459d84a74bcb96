"""The floor for the tool round-trip benchmark: a bare granian ASGI app that answers each
BidiAppend by writing one frame of the same size as an exec request onto the request's open RunSSE
stream (no decoding, no model, no tools), so a round trip costs only HTTP and framing."""
from __future__ import annotations

import asyncio

from cursor_byok.protocol import agent_pb2 as pb, aiserver_pb2, encode_server_message, end_stream_ok

HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
streams: dict[str, asyncio.Queue[bytes]] = {}


def exec_frame() -> bytes:
    m = pb.AgentServerMessage()
    m.exec_server_message.id = 1
    m.exec_server_message.read_args.path = "/tmp/workspace/file.txt"
    return encode_server_message(m)


FRAME = exec_frame()


async def body(receive) -> bytes:  # type: ignore[no-untyped-def]
    chunks = []
    while True:
        msg = await receive()
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body"):
            return b"".join(chunks)


async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    data = await body(receive)
    if scope["path"].endswith("/RunSSE"):
        rid = pb.BidiRequestId.FromString(data[5:]).request_id
        queue = streams.setdefault(rid, asyncio.Queue())
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        await send({"type": "http.response.body", "body": FRAME, "more_body": True})
        while (frame := await queue.get()) != b"":
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": end_stream_ok(), "more_body": False})
        return
    if scope["path"].endswith("/BidiAppend"):
        req = aiserver_pb2.BidiAppendRequest.FromString(data)
        queue = streams.setdefault(req.request_id.request_id, asyncio.Queue())
        queue.put_nowait(b"" if req.append_seqno < 0 else FRAME)
    status = 204 if scope["path"] == "/healthz" else 200
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/proto")]})
    await send({"type": "http.response.body", "body": b""})
