"""The floor for the turn-start benchmark: a bare granian ASGI app that decodes each BidiAppend (as
ours does), and for a run request forwards ONE prebuilt provider request (a 2,000-word user message,
no history, no system prompt work, no persistence) through a plain aiohttp session (the library our
provider client wraps; used directly here so the floor stays the same when our client changes),
then streams the answer's text to that request id's RunSSE as text-delta frames.

Ours against this floor is the cost of everything a turn start does beyond the unavoidable: the
append's decode, one provider hop, and the frames back.
"""
from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Protocol

import aiohttp
import msgspec

from benchmarks.support.bare_app import HEADERS, decode, delta, whole_body
from cursor_byok.protocol import BidiAppend, agent_pb2 as pb, decode_bidi_append, end_stream_ok

PROVIDER = os.environ.get("BENCH_PROVIDER_URL", "http://127.0.0.1:9/v1") + "/chat/completions"
WORDS = 2_000
# The stamp provider's other paces, by the run request's model id (the turn-start benchmark's
# background streams); any other model streams at the default pace.
PACED = {model: PROVIDER.replace("/v1/", f"/{model}/v1/") for model in ("fast", "w50")}


def provider_url(run_request: pb.AgentClientMessage) -> str:
    return PACED.get(run_request.run_request.requested_model.model_id, PROVIDER)


def turn_text(words: int = WORDS) -> str:
    """A user message of `words` words (the same text every turn; a provider never sees it twice in
    one request)."""
    vocabulary = ("alpha", "branch", "commit", "delta", "engine", "future", "gateway", "history")
    return " ".join(vocabulary[i % len(vocabulary)] for i in range(words))


BODY = msgspec.json.encode(
    {
        "model": "fake-model",
        "messages": [{"role": "user", "content": turn_text()}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
)


_frames: dict[str, asyncio.Queue[bytes | None]] = {}  # request id → frames for its RunSSE


def _channel(request_id: str) -> asyncio.Queue[bytes | None]:
    queue = _frames.get(request_id)
    if queue is None:
        queue = _frames[request_id] = asyncio.Queue()
    return queue


_session: aiohttp.ClientSession | None = None


async def forward(session: aiohttp.ClientSession, url: str, text: Callable[[str], None]) -> None:
    """POST the prebuilt request and hand each text delta of the answer to `text`."""
    response = await session.post(url, data=BODY, headers={"content-type": "application/json"})
    try:
        buffer = b""
        while chunk := await response.content.readany():
            buffer += chunk
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                data = event.removeprefix(b"data: ")
                if data == b"[DONE]":
                    continue
                for choice in decode(data).choices:
                    if choice.delta.content:
                        text(choice.delta.content)
    finally:
        response.release()


def session() -> aiohttp.ClientSession:
    """The process's one provider session (made on first use, inside the server's loop)."""
    global _session
    if _session is None:
        _session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4096, keepalive_timeout=30))
    return _session


async def forward_frames(queue: asyncio.Queue[bytes | None], url: str) -> None:
    """The floor's answer: the provider's text as text-delta frames on the RunSSE's queue."""
    try:
        await forward(session(), url, lambda content: queue.put_nowait(delta(content)))
    finally:
        queue.put_nowait(None)


_tasks: set[asyncio.Task[None]] = set()
Answer = Callable[[asyncio.Queue[bytes | None], str], Awaitable[None]]  # fills a RunSSE's queue from a provider URL


class Journal(Protocol):
    """Makes a run request's append durable before its answer starts (`bare_durable_app`)."""

    path: str  # the path that answers `stats()`

    def commit(self, append: BidiAppend) -> None: ...

    def stats(self) -> bytes: ...


def turn_app(answer: Answer, headers: list[tuple[bytes, bytes]], end: bytes, journal: Journal | None = None) -> Callable[..., Awaitable[None]]:
    """An ASGI app: a BidiAppend's run request starts `answer` for its request id (once `journal`,
    if any, has committed it: if that fails, the append fails and nothing starts); that id's RunSSE
    sends `headers`, then what `answer` queues, then `end`."""

    async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        body = await whole_body(receive)
        path = scope["path"]
        if path.endswith("/BidiAppend"):
            append = decode_bidi_append(body)
            if append.variant == "run_request":
                if journal is not None:
                    journal.commit(append)
                task = asyncio.get_running_loop().create_task(answer(_channel(append.request_id), provider_url(append.message)))
                _tasks.add(task)
                task.add_done_callback(_tasks.discard)
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/proto")]})
            await send({"type": "http.response.body", "body": b""})
            return
        if path.endswith("/RunSSE"):
            request_id = _request_id(body)
            queue = _channel(request_id)
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            while (frame := await queue.get()) is not None:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            _frames.pop(request_id, None)
            await send({"type": "http.response.body", "body": end, "more_body": False})
            return
        if journal is not None and path == journal.path:
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": journal.stats()})
            return
        await send({"type": "http.response.start", "status": 204 if path.endswith("healthz") else 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    return app


app = turn_app(forward_frames, HEADERS, end_stream_ok())


def _request_id(body: bytes) -> str:
    return pb.BidiRequestId.FromString(body[5:]).request_id
