"""A fast OpenAI-compatible streaming endpoint for the turn-start benchmark: it notes the moment it
has a whole request (time.monotonic_ns, one clock for every process on the machine) and sends that
stamp back at once as the first text chunk; the rest of the answer follows at a model's pace.

    python -m benchmarks.support.stamp_provider PORT [CHUNKS INTERVAL_MS [LONG_WORDS FAST_BATCH]]
    (defaults: 10 chunks 20 ms apart; long answers of 2,000 words, sent 1 word per write)

The path says how the answer streams (every answer starts with the stamp): under `/v1/` CHUNKS
chunks INTERVAL_MS apart; under `/fast/v1/` LONG_WORDS one-word chunks as fast as the server takes
them (FAST_BATCH words per write, the next write on the next loop iteration, paused while the
connection's write buffer is full, as a provider streaming faster than its reader is held back);
under `/w50/v1/` LONG_WORDS words at 50 words/s (the turn-start benchmark's background streams).

Control paths, for the benchmark: `POST /control/hold` makes it keep every later request unanswered
(stamped on arrival) until `POST /control/release`; `POST /control/finish` ends every answer in
progress (its finish chunks next); `GET /control/count` answers how many model requests it has
received. Like the other stand-ins it is built to cost the machine little: bodies
are counted, not parsed, and each chunk is one prebuilt write from a timer callback.
"""
from __future__ import annotations

import asyncio
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import uvloop

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


_WORD = _chunk(_HEAD + b" word" + _TAIL)
_LAST = _chunk(_END) + b"0\r\n\r\n"


@dataclass(frozen=True)
class Pace:
    """How an answer streams after its stamp: `words` words, `batch` per write, `interval` seconds
    apart (0: on the next loop iteration, while the connection takes more)."""

    words: int
    interval: float
    batch: int = 1


class _Answer:
    """One streamed reply: the arrival stamp as the first text (ended by `|`) at once, then words at
    its pace (one callback per write), then the finish chunks; then `done()`."""

    __slots__ = ("connection", "transport", "left", "pace", "loop", "done", "__weakref__")

    def __init__(self, connection: _Connection, stamp: int, pace: Pace, done: Callable[[], None]) -> None:
        assert connection.transport is not None
        self.connection, self.transport, self.left, self.pace, self.done = connection, connection.transport, pace.words, pace, done
        self.loop = asyncio.get_running_loop()
        self.transport.write(_RESPONSE_HEAD + _chunk(b"%s%d|%s" % (_HEAD, stamp, _TAIL)))
        self._next()

    def _next(self) -> None:
        if self.pace.interval:
            self.loop.call_later(self.pace.interval, self.tick)
        elif self.connection.paused:
            self.connection.resume = self.tick  # the server is behind: on when it has read
        else:
            self.loop.call_soon(self.tick)

    def tick(self) -> None:
        if self.transport.is_closing():
            return
        if self.left == 0:
            self.transport.write(_LAST)
            self.done()
            return
        words = min(self.left, self.pace.batch)
        self.left -= words
        self.transport.write(_WORD * words)
        self._next()


def _plain(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


class _State:
    def __init__(self, paces: dict[bytes, Pace]) -> None:
        self.paces = paces  # by the request path's first segment
        self.hold = False
        self.held: list[tuple[_Connection, int, Pace]] = []
        self.answers: weakref.WeakSet[_Answer] = weakref.WeakSet()  # in progress
        self.count = 0


class _Connection(asyncio.Protocol):
    """One keep-alive connection: requests on it are answered in order, each once the answer to the
    one before has ended."""

    def __init__(self, state: _State) -> None:
        self.state = state
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.head: bytes | None = None  # the current request's head, once it is complete
        self.need = 0  # body bytes the current request still lacks
        self.answering = False
        self.paused = False  # the transport's write buffer is full
        self.resume: Callable[[], None] | None = None  # the answer waiting for it to drain

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.resume is not None:
            resume, self.resume = self.resume, None
            resume()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._next()

    def _next(self) -> None:
        while not self.answering and self._take():
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
        method, path, _ = head.split(b" ", 2)
        self._answer(method, path, stamp)
        return True

    def _answer(self, method: bytes, path: bytes, stamp: int) -> None:
        state, transport = self.state, self.transport
        assert transport is not None
        if method == b"HEAD":  # the server warming its connection: not a model request
            transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        elif path == b"/control/hold":
            state.hold = True
            transport.write(_plain(b"held"))
        elif path == b"/control/release":
            state.hold = False
            for held, held_stamp, pace in state.held:
                held.stream(held_stamp, pace)
            state.held.clear()
            transport.write(_plain(b"released"))
        elif path == b"/control/finish":
            for answer in state.answers:
                answer.left = 0
            transport.write(_plain(b"finished"))
        elif path == b"/control/count":
            transport.write(_plain(b"%d" % state.count))
        else:
            state.count += 1
            self.answering = True
            pace = state.paces.get(path.split(b"/", 2)[1], state.paces[b"v1"])
            if state.hold:
                state.held.append((self, stamp, pace))
            else:
                self.stream(stamp, pace)

    def stream(self, stamp: int, pace: Pace) -> None:
        assert self.transport is not None
        if not self.transport.is_closing():
            self.state.answers.add(_Answer(self, stamp, pace, self._ended))

    def _ended(self) -> None:
        self.answering = False
        self._next()


async def main(port: int, chunks: int, interval_ms: float, long_words: int, fast_batch: int) -> None:
    loop = asyncio.get_running_loop()
    state = _State({b"v1": Pace(chunks, interval_ms / 1000), b"fast": Pace(long_words, 0.0, fast_batch), b"w50": Pace(long_words, 1 / 50)})
    server = await loop.create_server(lambda: _Connection(state), "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    args = sys.argv[1:]
    defaults = ["0", "10", "20", "2000", "1"]
    port, chunks, interval_ms, long_words, fast_batch = args + defaults[len(args):]
    uvloop.run(main(int(port), int(chunks), float(interval_ms), int(long_words), int(fast_batch)))
