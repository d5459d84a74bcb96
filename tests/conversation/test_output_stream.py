"""OutputStream: replay, live follow, and frames pushed by the writer to a caught-up reader."""
from __future__ import annotations

import asyncio
import gc

import pytest

from cursor_byok.conversation import OutputHub, ReplayUnavailable


class Recorder:
    """A Push that records what it was handed; `accept` decides whether it delivers."""

    def __init__(self, accept: bool = True) -> None:
        self.accept = accept
        self.sent: list[tuple[bytes, bool]] = []

    def __call__(self, data: bytes, more: bool) -> bool:
        if not self.accept:
            return False
        self.sent.append((data, more))
        return True


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_caught_up_reader_is_served_by_the_writer_without_waking() -> None:
    stream = OutputHub().open("r1")
    push = Recorder()
    reader = asyncio.ensure_future(stream.read(0, push))
    await settle()
    stream.write(b"a")
    stream.write(b"b")
    await settle()
    assert push.sent == [(b"a", True), (b"b", True)]
    assert not reader.done()  # nothing for the reader's own task to do
    stream.close(b"END")
    result = await reader
    assert push.sent[-1] == (b"END", False)
    assert result.complete and result.finished and result.data == b"" and result.position == 3
    assert stream.terminal_delivered


async def test_frames_written_in_one_pass_are_pushed_after_it_every_streams_back_to_back() -> None:
    """A push wakes the HTTP server's I/O thread: the frames of one pass of the loop go out after
    it, stream after stream, each stream's in order, not from inside each write (sends spread over
    a pass woke that thread once per frame). A close sends what is still due before the terminal."""
    hub = OutputHub()
    sent: list[tuple[bytes, bool]] = []  # both streams' pushes, each frame prefixed with its stream's name

    class Named(Recorder):
        def __init__(self, name: bytes) -> None:
            super().__init__()
            self.name, self.sent = name, sent

        def __call__(self, data: bytes, more: bool) -> bool:
            return super().__call__(self.name + data, more)

    a, b = hub.open("a"), hub.open("b")
    readers = [asyncio.ensure_future(a.read(0, Named(b"a"))), asyncio.ensure_future(b.read(0, Named(b"b")))]
    await settle()
    a.write(b"1")
    b.write(b"2")
    a.write(b"3")
    assert sent == []  # nothing from inside the writes
    await asyncio.sleep(0)
    assert sent == [(b"a1", True), (b"a3", True), (b"b2", True)]
    a.write(b"4")
    a.close(b"END")
    assert sent[3:] == [(b"a4", True), (b"aEND", False)]
    await asyncio.sleep(0)
    assert len(sent) == 5  # the pass's flush found nothing more to send
    b.close(b"END")
    assert (await readers[0]).complete and (await readers[1]).complete


async def test_a_frame_written_now_goes_at_once_after_what_is_due_before_it() -> None:
    """A run's first text is what a user waits for: written `now`, it is pushed from inside the
    write (after its stream's frames still due), not after the rest of the pass's work, which under
    load is other streams' deltas; the frames after it wait for the pass's end again."""
    stream = OutputHub().open("r1")
    push = Recorder()
    reader = asyncio.ensure_future(stream.read(0, push))
    await settle()
    stream.write(b"step")
    stream.write(b"first", now=True)
    assert push.sent == [(b"step", True), (b"first", True)]
    stream.write(b"next")
    assert len(push.sent) == 2
    await asyncio.sleep(0)
    assert push.sent[2:] == [(b"next", True)]
    stream.close(b"END")
    assert (await reader).complete


async def test_a_frame_retained_to_be_encoded_again_is_pushed_as_written_after_what_came_before() -> None:
    class Again:
        """Encodes the frame again for a replay; never for a reader following live."""

        def __len__(self) -> int:
            return 3

        def encode(self) -> bytes:
            raise AssertionError("encoded again for a live reader")

    stream = OutputHub().open("r1")
    push = Recorder()
    reader = asyncio.ensure_future(stream.read(0, push))
    await settle()
    stream.write(b"a")
    stream.write(b"CHK", retain=Again())
    assert push.sent == [(b"a", True), (b"CHK", True)]
    stream.write(b"b")
    await settle()
    stream.close(b"END")
    assert push.sent[2:] == [(b"b", True), (b"END", False)]
    assert (await reader).complete


async def test_a_push_that_cannot_deliver_wakes_the_reader_with_everything_since() -> None:
    stream = OutputHub().open("r1")
    push = Recorder()
    reader = asyncio.ensure_future(stream.read(0, push))
    await settle()
    stream.write(b"a")
    await settle()
    push.accept = False
    stream.write(b"b")
    stream.write(b"c")  # the reader is no longer waiting: retained for it
    result = await reader
    assert push.sent == [(b"a", True)]
    assert (result.data, result.position, result.finished, result.complete) == (b"bc", 3, False, False)


async def test_a_reader_behind_the_writer_replays_before_anything_is_pushed() -> None:
    stream = OutputHub().open("r1")
    stream.write(b"a")
    stream.write(b"b")
    push = Recorder()
    first = await stream.read(0, push)
    assert (first.data, first.position) == (b"ab", 2) and push.sent == []
    reader = asyncio.ensure_future(stream.read(first.position, push))
    await settle()
    stream.write(b"c")
    stream.close(b"END")
    assert (await reader).complete
    assert push.sent == [(b"c", True), (b"END", False)]


async def test_a_cancelled_reader_is_never_pushed_to() -> None:
    stream = OutputHub().open("r1")
    push = Recorder()
    reader = asyncio.ensure_future(stream.read(0, push))
    await settle()
    reader.cancel()
    await settle()
    stream.write(b"a")
    assert push.sent == []


async def test_a_pushing_and_a_pulling_reader_each_get_every_frame_in_order() -> None:
    stream = OutputHub().open("r1")
    push = Recorder()
    pushed = asyncio.ensure_future(stream.read(0, push))
    pulled: list[bytes] = []

    async def pull() -> None:
        position = 0
        while True:
            result = await stream.read(position)
            pulled.append(result.data)
            position = result.position
            if result.finished:
                return

    puller = asyncio.ensure_future(pull())
    await settle()
    for frame in (b"a", b"b", b"c"):
        stream.write(frame)
        await settle()
    stream.close(b"END")
    await asyncio.wait_for(asyncio.gather(pushed, puller), 5)
    assert b"".join(d for d, _ in push.sent) == b"".join(pulled) == b"abcEND"


async def test_past_the_retention_cap_old_frames_go_and_a_reader_behind_them_is_told() -> None:
    stream = OutputHub(max_retained_bytes=800).open("r1")
    for i in range(100):
        stream.write(bytes([i]) * 10)  # 1,000 bytes in all
        assert stream.retained_bytes <= 800
    assert stream.base > 0 and stream.end == 100
    assert stream.retained_bytes == sum(len(f) for f in stream.frames)
    with pytest.raises(ReplayUnavailable):
        stream.read_now(0)  # a reader behind the retained frames is told
    tail = stream.read_now(stream.base)
    assert tail.data == b"".join(bytes([i]) * 10 for i in range(stream.base, 100))


async def test_a_single_frame_larger_than_the_cap_is_still_delivered() -> None:
    stream = OutputHub(max_retained_bytes=100).open("r1")
    stream.write(b"x" * 50)
    stream.write(b"y" * 500)
    assert stream.read_now(stream.base).data == b"y" * 500


async def test_a_terminal_pushed_to_a_reader_that_went_away_is_replayed_at_once() -> None:
    """The writer hands the terminal to a caught-up reader whose client has just gone (its task is
    cancelled before it runs again): nobody read it, so a reconnecting reader gets the finished
    stream at once instead of waiting for a new generation."""
    hub = OutputHub()
    stream = hub.open("r1")
    push = Recorder()
    reader = asyncio.ensure_future(stream.read(0, push))
    await settle()
    stream.write(b"a")
    stream.close(b"END")
    assert push.sent == [(b"a", True), (b"END", False)]
    reader.cancel()  # the client went away before the reader's task saw the terminal
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert not stream.terminal_delivered
    again = asyncio.ensure_future(hub.wait_for("r1", timeout=60))
    await settle()
    assert again.done() and again.result() is stream
    assert stream.read_now(0).data == b"aEND"


async def test_a_cancelled_wait_for_a_new_generation_leaves_nothing_behind() -> None:
    hub = OutputHub()
    stream = hub.open("r1")
    stream.close(b"END")
    stream.terminal_delivered = True  # a reader read it: a RunSSE now may be for a new generation
    waiter = asyncio.ensure_future(hub.wait_for("r1", timeout=60))
    await settle()
    assert not waiter.done()
    waiter.cancel()
    await settle()
    assert hub.waiting == 0


def test_a_finished_stream_is_retained_from_when_its_ide_was_last_on_it(caplog: pytest.LogCaptureFixture) -> None:
    """Retention counts from the last sign of the IDE on the stream (its close, an append for its
    request id, a reader leaving), not from the close alone; a forgotten stream is logged."""
    hub = OutputHub(retention_seconds=10.0)
    forgotten: list[str] = []
    hub.on_forget = forgotten.append
    stream = hub.open("r1")
    stream.close(b"END")
    closed = stream.used_at
    stream.used_at = closed + 8  # an append for its request id came 8 s after the close
    assert hub.sweep(now=closed + 15) == 0 and hub.get("r1") is stream
    stream.readers = 1  # a reader is on it: never forgotten under it
    assert hub.sweep(now=closed + 100) == 0
    stream.readers = 0
    with caplog.at_level("DEBUG", logger="cursor_byok.conversation.output"):
        assert hub.sweep(now=closed + 18.5) == 1
    assert hub.get("r1") is None and forgotten == ["r1"]
    [record] = [r for r in caplog.records if r.getMessage() == "finished stream forgotten"]
    assert record.request_id == "r1" and record.idle_seconds == 10.5  # type: ignore[attr-defined]


def test_touch_restarts_a_finished_streams_retention() -> None:
    hub = OutputHub(retention_seconds=1.0)
    stream = hub.open("r1")
    stream.close(b"END")
    stream.used_at -= 5  # closed long ago
    stream.touch()
    assert hub.sweep() == 0 and hub.get("r1") is stream


def _collector_visits(root: object) -> int:
    """References the cycle collector follows from `root` on a full collection: every object it
    tracks that `root` reaches, each costing one visit per reference it holds (classes and what
    they reach left out: those are start-up's, frozen out of collections)."""
    seen: set[int] = set()
    todo, visits = [root], 0
    while todo:
        obj = todo.pop()
        if id(obj) in seen or not gc.is_tracked(obj) or isinstance(obj, type):
            continue
        seen.add(id(obj))
        referents = gc.get_referents(obj)
        visits += len(referents)
        todo.extend(referents)
    return visits


class _Blob:
    """A retained frame kept as what encodes it again (a checkpoint blob's message)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def encode(self) -> bytes:
        return self.data


async def test_a_finished_stream_gives_the_collector_nothing_per_frame_and_replays_the_same_bytes() -> None:
    """A finished stream is retained for two minutes; with 32 conversations that is ~100k frames.
    Held as one list per stream, every full collection walked each of them (15-33 ms pauses on
    the loop while others start turns: issue 35). Replay from any position is unchanged."""
    stream = OutputHub().open("r1")
    frames = [f"frame{n}".encode() for n in range(2000)]
    for n, frame in enumerate(frames):
        if n == 700:
            stream.write(frame, retain=_Blob(frame))
        else:
            stream.write(frame)
    stream.close(b"END")
    assert _collector_visits(stream) < 100
    whole = b"".join(frames) + b"END"
    for position in (0, 1, 699, 700, 701, 1999, 2000):
        result = stream.read_now(position)
        assert result.data == whole[len(b"".join(frames[:position])):]
        assert (result.position, result.finished) == (2001, True)
    assert stream.read_now(2001).data == b""
    assert stream.retained_bytes == len(whole)


async def test_a_finished_stream_trimmed_past_its_rebuilt_frames_replays_what_is_left() -> None:
    stream = OutputHub(max_retained_bytes=80).open("r1")
    frames = [f"f{n:08}".encode() for n in range(20)]  # 10 bytes each: 8 of them fit
    for n, frame in enumerate(frames):
        stream.write(frame, retain=_Blob(frame) if n % 3 == 0 else None)
    stream.close(b"END")
    assert stream.base > 0
    with pytest.raises(ReplayUnavailable):
        stream.read_now(stream.base - 1)
    for position in range(stream.base, 21):
        assert stream.read_now(position).data == b"".join(frames[position:]) + b"END"
