"""A fast OpenAI-compatible streaming endpoint for the turn-start benchmark: it notes the moment it
has a whole request (time.monotonic_ns, one clock for every process on the machine) and sends that
stamp back as the first text chunk, followed by a short answer, all at once.

    python -m benchmarks.support.stamp_provider PORT

Control paths, for the benchmark: `POST /control/hold` makes it keep every later request unanswered
(stamped on arrival) until `POST /control/release`; `GET /control/count` answers how many model
requests it has received. Like the other stand-ins it is built to cost the machine little: bodies
are counted, not parsed, and every reply is written with one call.
"""
from __future__ import annotations

import asyncio
import sys
import time

import uvloop

ANSWER_CHUNKS = 8

_HEAD = b'data: {"id":"t","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"'
_TAIL = b'"},"finish_reason":null}]}\n\n'
_END = (
    b'data: {"id":"t","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b'data: {"id":"t","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3000,"completion_tokens":9,"total_tokens":3009}}\n\n'
    b"data: [DONE]\n\n"
)
_RESPONSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunk(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


_REST = b"".join(_chunk(_HEAD + b" word" + _TAIL) for _ in range(ANSWER_CHUNKS)) + _chunk(_END) + b"0\r\n\r\n"


def answer(stamp: int) -> bytes:
    """The whole streamed reply: the arrival stamp as the first text (ended by `|`), then words."""
    return _RESPONSE_HEAD + _chunk(b"%s%d|%s" % (_HEAD, stamp, _TAIL)) + _REST


def _plain(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


class _State:
    def __init__(self) -> None:
        self.hold = False
        self.held: list[tuple[asyncio.Transport, int]] = []
        self.count = 0


class _Connection(asyncio.Protocol):
    """One keep-alive connection; requests on it are answered in order as they complete."""

    def __init__(self, state: _State) -> None:
        self.state = state
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.head: bytes | None = None  # the current request's head, once it is complete
        self.need = 0  # body bytes the current request still lacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self._take():
            pass

    def _take(self) -> bool:
        if self.head is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return False
            self.head = bytes(self.buffer[:end])
            del self.buffer[: end + 4]
            self.need = 0
            for line in self.head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    self.need = int(line[15:])
        if len(self.buffer) < self.need:
            return False
        stamp = time.monotonic_ns()
        del self.buffer[: self.need]
        head, self.head = self.head, None
        self._answer(head.split(b" ", 2)[1], stamp)
        return True

    def _answer(self, path: bytes, stamp: int) -> None:
        state, transport = self.state, self.transport
        assert transport is not None
        if path == b"/control/hold":
            state.hold = True
            transport.write(_plain(b"held"))
        elif path == b"/control/release":
            state.hold = False
            for held, held_stamp in state.held:
                if not held.is_closing():
                    held.write(answer(held_stamp))
            state.held.clear()
            transport.write(_plain(b"released"))
        elif path == b"/control/count":
            transport.write(_plain(b"%d" % state.count))
        else:
            state.count += 1
            if state.hold:
                state.held.append((transport, stamp))
            else:
                transport.write(answer(stamp))


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    state = _State()
    server = await loop.create_server(lambda: _Connection(state), "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1])))
