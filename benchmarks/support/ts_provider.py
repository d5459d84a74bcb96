"""A tiny OpenAI-compatible streaming endpoint whose every text chunk carries the moment it was sent
(time.monotonic_ns, one clock for every process on the machine), for latency benchmarks.

    python -m benchmarks.support.ts_provider PORT FRAMES INTERVAL_MS

It stands in for a remote provider, so it must cost the machine as little as it can: on a 2-core
box its CPU is taken from the server under test. Each stream is a timer callback on uvloop that
writes a pre-built chunk (no task, no sleep future, no JSON encoder per chunk). Connections are kept
alive between responses, as real providers' are.
"""
from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable

import uvloop

from benchmarks.support.rawhttp import take_request

_HEAD = b'data: {"id":"b","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"'
_TAIL = b'|"},"finish_reason":null}]}\n\n'

END = (
    b'data: {"id":"b","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b'data: {"id":"b","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":500,"total_tokens":510}}\n\n'
    b"data: [DONE]\n\n"
)
RESPONSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(stamp: int) -> bytes:
    event = b"%s%d%s" % (_HEAD, stamp, _TAIL)
    return b"%x\r\n%s\r\n" % (len(event), event)


class _Stream:
    """Sends FRAMES stamped chunks INTERVAL apart, then the finish chunks; then `done()`."""

    __slots__ = ("transport", "left", "interval", "loop", "done")

    def __init__(self, transport: asyncio.Transport, frames: int, interval: float, done: Callable[[], None]) -> None:
        self.transport = transport
        self.left = frames
        self.interval = interval
        self.loop = asyncio.get_running_loop()
        self.done = done
        transport.write(RESPONSE_HEAD)
        self.tick()

    def tick(self) -> None:
        if self.transport.is_closing():
            return
        if self.left == 0:
            self.transport.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(END), END))
            self.done()
            return
        self.left -= 1
        self.transport.write(chunk(time.monotonic_ns()))
        self.loop.call_later(self.interval, self.tick)


class _Provider(asyncio.Protocol):
    """One keep-alive connection: each complete request (headers + Content-Length body) gets one
    stream; bytes that arrive meanwhile wait for the stream to end."""

    def __init__(self, frames: int, interval: float) -> None:
        self.frames, self.interval = frames, interval
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.streaming = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._next()

    def _next(self) -> None:
        if self.streaming:
            return
        rest = take_request(self.buffer)
        if rest is None:
            return
        assert self.transport is not None
        if self.buffer.startswith(b"HEAD "):  # the server warming its connection: no stream
            self.buffer = rest
            self.transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            self._next()
            return
        self.buffer = rest
        self.streaming = True
        assert self.transport is not None
        _Stream(self.transport, self.frames, self.interval, self._ended)

    def _ended(self) -> None:
        self.streaming = False
        self._next()


async def main(port: int, frames: int, interval_ms: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Provider(frames, interval_ms / 1000), "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
