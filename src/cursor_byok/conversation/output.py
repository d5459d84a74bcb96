"""OutputHub: the ordered server frames of each RunSSE stream, retained for replay.

One `OutputStream` per transport generation (request_id + generation). The conversation runtime is
its only writer (frames and the single terminal); RunSSE handlers are readers that replay from any
position and then follow live. Readers never block the writer: appends are O(1), and several
frames produced together go out in one send.

A reader that has caught up may lend the writer a `Push`: the frames written are then handed to
the client without waking the reader's task (which would cost an extra pass of the event loop per
frame, and under load doubled delta latency: benchmarks/results/gateway.md). They go at the end of
the loop's pass, every stream's together (`_PassFlush`), not from inside each write: a push wakes
the HTTP server's I/O thread, and sends spread over a pass between other streams' decoding woke it
once per frame (twice as often as the same sends back to back), each wake-up a context switch that
preempted the loop on a busy machine. When a push cannot deliver, the reader is woken and sends as
before.
"""
from __future__ import annotations

import asyncio
import logging
import time
from array import array
from collections.abc import Callable
from itertools import accumulate
from typing import Protocol

import msgspec

from ..loop_local import LoopLocal

log = logging.getLogger("cursor_byok.conversation.output")

Push = Callable[[bytes, bool], bool]
"""(data, more_body) → True once the data is on its way to the client in order; False when it is
not (nothing was sent; the reader's own task will send it). Never raises."""


class Rebuilt(Protocol):
    """A retained frame kept as what encodes it again, byte for byte, for a replay: something the
    server holds anyway (a history message for its checkpoint blob), instead of a second copy of its
    bytes for as long as the stream is retained. `len()` is its encoded size."""

    def __len__(self) -> int: ...

    def encode(self) -> bytes: ...


def _bytes(frame: bytes | Rebuilt) -> bytes:
    return frame if type(frame) is bytes else frame.encode()  # type: ignore[union-attr]


class _Packed(msgspec.Struct, eq=False):
    """A finished stream's frames as one buffer and the offsets between them. A list of frames is
    a container the cycle collector walks item by item on every full collection, and finished
    streams are retained for minutes (tens of thousands of frames under load); bytes and an array
    are not walked. A `Rebuilt` frame keeps an empty slot in `data` and is encoded on a replay."""

    data: bytes
    starts: array[int]  # frame n is data[starts[n]:starts[n + 1]]
    rebuilt: dict[int, Rebuilt]  # by index, ascending

    @classmethod
    def of(cls, frames: list[bytes | Rebuilt], rebuilt: list[int]) -> _Packed:
        """`rebuilt`: the indexes of `frames` that are `Rebuilt`, in order."""
        sizes, parts, at = list(map(len, frames)), [], 0
        for n in rebuilt:
            sizes[n] = 0
            parts += frames[at:n]
            at = n + 1
        parts += frames[at:]
        return cls(b"".join(parts), array("Q", accumulate(sizes, initial=0)), {n: frames[n] for n in rebuilt})  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.starts) - 1

    def tail(self, start: int) -> bytes:
        """Frames `start` to the last, joined."""
        later = [n for n in self.rebuilt if n >= start]  # in order: they were added so
        if not later:
            return self.data[self.starts[start]:]
        parts, at = [], self.starts[start]
        for n in later:
            parts += (self.data[at:self.starts[n]], self.rebuilt[n].encode())
            at = self.starts[n]
        parts.append(self.data[at:])
        return b"".join(parts)


class ReplayUnavailable(Exception):
    """A reader asked for frames that were trimmed from the retention window."""


class ReadResult(msgspec.Struct):
    data: bytes  # concatenated frames (possibly empty)
    position: int  # next position to read from
    finished: bool  # the terminal frame is included in `data` or was read earlier
    complete: bool = False  # the response already ended: a push delivered the terminal


class _Waiter(msgspec.Struct, eq=False):
    """A caught-up reader: woken through `wake`, or served by the writer through `push`."""

    position: int
    wake: asyncio.Future[None]
    push: Push | None
    complete: bool = False


class _PassFlush:
    """The streams written to in this pass of one event loop whose caught-up readers wait: their
    frames are pushed in one callback after the pass, stream after stream."""

    __slots__ = ("_loop", "_due")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._due: list[OutputStream] = []

    def add(self, stream: OutputStream) -> None:
        if not self._due:
            self._loop.call_soon(self._flush)
        self._due.append(stream)

    def _flush(self) -> None:
        due, self._due = self._due, []
        for stream in due:
            stream.flush()


_pass_flush = LoopLocal(_PassFlush).get  # the running loop's


class OutputStream(msgspec.Struct, eq=False):
    request_id: str
    generation: int
    max_retained_bytes: int = 64 * 1024 * 1024
    # With request_id, the key of the input journaled for this stream: its transport generation's
    # Cursor run id. The runtime tracks how far it has taken that input and how far it is settled.
    cursor_run_id: str = ""
    applied_seqno: int = 0
    settled_seqno: int = 0
    frames: list[bytes | Rebuilt] = msgspec.field(default_factory=list)  # while it runs; `packed` once finished
    packed: _Packed | None = None
    rebuilt: list[int] = msgspec.field(default_factory=list)  # positions of the frames retained as `Rebuilt`
    base: int = 0  # absolute position of frames[0]
    retained_bytes: int = 0
    closed: bool = False
    # When its IDE was last on it: a reader leaving, an append for its request id, its close. A
    # finished stream is retained from then, not from its close: an IDE still busy with frames it
    # was sent (acking them) may not have taken the terminal that went out with them.
    used_at: float = msgspec.field(default_factory=time.monotonic)
    readers: int = 0
    # A reader's task took the terminal and ended its response (a terminal the writer pushed to a
    # reader whose client then went away does not count: nobody read it).
    terminal_delivered: bool = False
    developer: str | None = None  # a team server's, whose request opened it (its runs are theirs)
    _waiters: list[_Waiter] = msgspec.field(default_factory=list)
    _pass: _PassFlush | None = None  # its loop's, once a write had a reader waiting
    _flush_due: bool = False  # frames written in this pass wait for the pass's end

    def theirs(self, developer: str | None) -> bool:
        """Whether a request of `developer` may read or append to this stream (on a team server a
        run is its developer's alone; elsewhere `developer` is None throughout)."""
        return self.developer in (None, developer)

    @property
    def end(self) -> int:
        return self.base + len(self.packed if self.packed is not None else self.frames)

    def flush(self) -> None:
        """Hand the frames written since each waiting reader's position to it: pushed where it can
        be, one push per frame in order, else the reader is woken (and reads them itself)."""
        self._flush_due = False
        if not self._waiters:
            return
        waiters, self._waiters = self._waiters, []
        frames, base, end = self.frames, self.base, self.end
        for w in waiters:
            if w.wake.done():
                continue  # that reader was cancelled (its client went away)
            push = w.push
            if push is not None and w.position >= base:  # else trimmed past it: it is told on waking
                # Plain frames only: a write retained as `Rebuilt` is pushed as written, at once.
                while w.position < end and push(frames[w.position - base], True):  # type: ignore[arg-type]
                    w.position += 1
                if w.position == end:
                    self._waiters.append(w)
                    continue
            w.wake.set_result(None)

    def _deliver(self, frame: bytes) -> None:
        """Hand the frame just retained to every waiting reader: pushed where it can be, else wake."""
        if not self._waiters:
            return
        waiters, self._waiters = self._waiters, []
        end, more = self.end, not self.closed
        for w in waiters:
            if w.wake.done():
                continue  # that reader was cancelled (its client went away)
            if w.push is not None and w.position == end - 1 and w.push(frame, more):
                w.position = end
                if more:
                    self._waiters.append(w)
                    continue
                w.complete = True
            w.wake.set_result(None)

    def _retain(self, frame: bytes | Rebuilt) -> None:
        self.frames.append(frame)
        self.retained_bytes += len(frame)
        if self.retained_bytes > self.max_retained_bytes:
            self._trim()

    def _trim(self) -> None:
        """Drop the oldest frames down to 7/8 of the cap in one cut (one cut per eighth of the cap,
        not one list shift per frame); a reader that falls behind them gets `unavailable`."""
        target = self.max_retained_bytes - self.max_retained_bytes // 8
        drop, size = 0, self.retained_bytes
        while size > target and drop < len(self.frames) - 1:
            size -= len(self.frames[drop])
            drop += 1
        del self.frames[:drop]
        self.retained_bytes = size
        self.base += drop
        self.rebuilt = [p for p in self.rebuilt if p >= self.base]

    def write(self, frame: bytes, retain: Rebuilt | None = None, *, now: bool = False) -> None:
        """Send `frame`; retained for replay as itself, or as `retain` (which encodes it again).
        `now`: pushed from inside this call (after the frames still due), not at the pass's end,
        behind the rest of the pass's work (other streams' deltas, under load): a run's first text."""
        if self.closed:
            raise RuntimeError(f"output stream {self.request_id}#{self.generation} is closed")
        if retain is not None:
            # Pushed as these bytes now, not encoded again at the pass's end; after what is due.
            if self._flush_due:
                self.flush()
            self.rebuilt.append(self.end)
            self._retain(retain)
            if self._waiters:
                self._deliver(frame)
            return
        self._retain(frame)
        if now:
            self.flush()
        elif self._waiters and not self._flush_due:
            self._flush_due = True
            if self._pass is None:
                self._pass = _pass_flush()
            self._pass.add(self)

    def close(self, terminal_frame: bytes) -> None:
        """Append the one terminal frame. A second close is a lifecycle bug."""
        if self.closed:
            raise RuntimeError(f"output stream {self.request_id}#{self.generation} already has its terminal")
        if self._flush_due:
            self.flush()  # the frames written in this pass go first
        self._retain(terminal_frame)
        self.closed = True
        self.packed, self.frames = _Packed.of(self.frames, [p - self.base for p in self.rebuilt]), []
        self.touch()
        self._deliver(terminal_frame)

    def touch(self) -> None:
        """Its IDE is on it now: a finished stream's retention starts again."""
        self.used_at = time.monotonic()

    def read_now(self, position: int) -> ReadResult:
        if position < self.base:
            raise ReplayUnavailable(f"frames before {self.base} are no longer retained")
        if position >= self.end:
            return ReadResult(b"", position, self.closed)
        start = position - self.base
        if self.packed is not None:
            return ReadResult(self.packed.tail(start), self.end, True)
        frames = self.frames
        if len(frames) - start == 1:
            chunk = _bytes(frames[start])
        elif self.rebuilt:
            chunk = b"".join([_bytes(f) for f in frames[start:]])
        else:
            chunk = b"".join(frames[start:])  # type: ignore[arg-type]
        return ReadResult(chunk, self.end, self.closed)

    async def read(self, position: int, push: Push | None = None) -> ReadResult:
        """Everything from `position` on; waits until there is something or the stream is closed.
        While it waits, frames written go to `push` (if given) and the wait goes on."""
        while True:
            result = self.read_now(position)
            if result.data or result.finished:
                return result
            waiter = _Waiter(position, asyncio.get_running_loop().create_future(), push)
            self._waiters.append(waiter)
            await waiter.wake  # a reader whose client went away is cancelled here
            if waiter.complete:
                self.terminal_delivered = True
                return ReadResult(b"", waiter.position, True, complete=True)
            position = waiter.position


class OutputHub:
    """request_id → the latest OutputStream generation, with bounded retention of finished ones."""

    def __init__(self, retention_seconds: float = 120.0, max_retained_bytes: int = 64 * 1024 * 1024) -> None:
        self.retention_seconds = retention_seconds
        self.max_retained_bytes = max_retained_bytes
        self._streams: dict[str, OutputStream] = {}
        self._next_generation: dict[str, list[asyncio.Future[None]]] = {}  # readers waiting for one
        self.on_forget: Callable[[str], None] | None = None  # told each request id `sweep` drops

    def open(self, request_id: str, cursor_run_id: str = "") -> OutputStream:
        """A new generation for request_id (the previous one must already be closed or is replaced)."""
        prev = self._streams.get(request_id)
        stream = OutputStream(request_id, (prev.generation + 1) if prev else 0, self.max_retained_bytes, cursor_run_id)
        self._streams[request_id] = stream
        for waiter in self._next_generation.pop(request_id, ()):
            if not waiter.done():
                waiter.set_result(None)
        return stream

    def get(self, request_id: str) -> OutputStream | None:
        return self._streams.get(request_id)

    async def wait_for(self, request_id: str, timeout: float) -> OutputStream | None:
        """The stream a RunSSE for request_id should read, waiting up to `timeout` for it.

        A finished stream whose terminal nobody has read yet is a late arrival's to replay. One whose
        terminal was already delivered most likely precedes a new generation on the same request id,
        so wait for that; if none comes, replay the finished one.
        """
        stream = self._streams.get(request_id)
        if stream is not None and not (stream.closed and stream.terminal_delivered):
            return stream
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._next_generation.setdefault(request_id, [])
        waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            return stream
        finally:
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters and self._next_generation.get(request_id) is waiters:
                del self._next_generation[request_id]
        return self._streams.get(request_id)

    @property
    def waiting(self) -> int:
        """Request ids a reader waits on for a new stream generation."""
        return len(self._next_generation)

    def sweep(self, now: float | None = None) -> int:
        """Forget finished streams with no reader attached whose IDE has not been on them for
        their retention time."""
        now = time.monotonic() if now is None else now
        expired = [
            s for s in self._streams.values() if s.closed and s.readers == 0 and now - s.used_at > self.retention_seconds
        ]
        for s in expired:
            del self._streams[s.request_id]
            log.debug(
                "finished stream forgotten",
                extra={
                    "request_id": s.request_id, "generation": s.generation, "idle_seconds": round(now - s.used_at, 3),
                    "terminal_delivered": s.terminal_delivered,
                },
            )
            if self.on_forget is not None:
                self.on_forget(s.request_id)
        return len(expired)

    def __len__(self) -> int:
        return len(self._streams)

    def streams(self) -> list[OutputStream]:
        return list(self._streams.values())
