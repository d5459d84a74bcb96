"""Connect envelope encode/decode: unit behaviour on both implementations, then twin == compiled."""
from __future__ import annotations

import gc
import gzip
import random
import struct
import tracemalloc
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cursor_byok import hotpath
from cursor_byok.hotpath import CompressionError, FrameTooLarge, HotPathError, TruncatedFrame

from .conftest import BOUNDED, SOAK, cut, outcome, twin_and_compiled

CAP = hotpath.DEFAULT_MAX_FRAME


def header(flags: int, length: int) -> bytes:
    return struct.pack(">BI", flags, length)


# --- constants and encoding -------------------------------------------------------------------


def test_constants_match_the_connect_envelope(frames: ModuleType) -> None:
    assert (frames.FLAG_DATA, frames.FLAG_COMPRESSED, frames.FLAG_END_STREAM) == (0, 1, 2)
    assert frames.DEFAULT_MAX_FRAME == 16 * 1024 * 1024 == hotpath.DEFAULT_MAX_FRAME


def test_encode_frame_writes_flags_and_big_endian_length(frames: ModuleType) -> None:
    assert frames.encode_frame(b"abc") == b"\x00\x00\x00\x00\x03abc"
    assert frames.encode_frame(b"", 2) == b"\x02\x00\x00\x00\x00"
    assert frames.encode_frame(b"x" * 0x01020304)[:5] == b"\x00\x01\x02\x03\x04"
    assert frames.encode_frame(bytearray(b"hi"), flags=1) == b"\x01\x00\x00\x00\x02hi"
    assert frames.encode_frame(memoryview(b"hi")) == b"\x00\x00\x00\x00\x02hi"


@pytest.mark.parametrize("flags", [-1, 256, 1000])
def test_encode_frame_rejects_flags_outside_a_byte(frames: ModuleType, flags: int) -> None:
    with pytest.raises((ValueError, OverflowError)):
        frames.encode_frame(b"x", flags)


def test_encode_frame_rejects_text(frames: ModuleType) -> None:
    with pytest.raises(TypeError):
        frames.encode_frame("text")


def test_encode_frames_concatenates_data_frames(frames: ModuleType) -> None:
    payloads = [b"", b"a", b"bc" * 100, bytearray(b"xyz")]
    assert frames.encode_frames(payloads) == b"".join(frames.encode_frame(p) for p in payloads)
    assert frames.encode_frames([]) == b""
    assert frames.encode_frames(iter([b"q"])) == frames.encode_frame(b"q")


def test_encode_end_stream_sets_flag_two(frames: ModuleType) -> None:
    assert frames.encode_end_stream(b"{}") == b"\x02\x00\x00\x00\x02{}"


# --- decoding -----------------------------------------------------------------------------------


def test_decoder_returns_every_frame_of_one_chunk(frames: ModuleType) -> None:
    decoder = frames.FrameDecoder()
    stream = frames.encode_frames([b"one", b"", b"three"]) + frames.encode_end_stream(b"{}")
    assert decoder.feed(stream) == [(0, b"one"), (0, b""), (0, b"three"), (2, b"{}")]
    assert decoder.buffered == 0
    decoder.close()


def test_decoder_reassembles_frames_fed_one_byte_at_a_time(frames: ModuleType) -> None:
    payloads = [b"alpha", b"", b"\x00" * 300, bytes(range(256))]
    stream = frames.encode_frames(payloads)
    decoder = frames.FrameDecoder()
    got = []
    for i in range(len(stream)):
        got.extend(decoder.feed(stream[i : i + 1]))
    assert got == [(0, p) for p in payloads]
    assert decoder.buffered == 0


def test_decoder_accepts_bytearray_and_memoryview(frames: ModuleType) -> None:
    decoder = frames.FrameDecoder()
    stream = frames.encode_frames([b"ab", b"cd"])
    assert decoder.feed(bytearray(stream[:4])) == []
    assert decoder.feed(memoryview(stream)[4:]) == [(0, b"ab"), (0, b"cd")]
    assert all(type(p) is bytes for _, p in decoder.feed(frames.encode_frame(b"z")))


def test_decoder_rejects_text(frames: ModuleType) -> None:
    with pytest.raises(TypeError):
        frames.FrameDecoder().feed("\x00\x00\x00\x00\x00")


def test_buffered_counts_pending_header_and_payload_bytes(frames: ModuleType) -> None:
    decoder = frames.FrameDecoder()
    assert decoder.feed(b"\x00\x00") == []
    assert decoder.buffered == 2
    assert decoder.feed(b"\x00\x00\x04ab") == []
    assert decoder.buffered == 7
    assert decoder.feed(b"cd\x02") == [(0, b"abcd")]
    assert decoder.buffered == 1


def test_payload_is_copied_out_of_the_caller_buffer(frames: ModuleType) -> None:
    chunk = bytearray(frames.encode_frame(b"keep"))
    decoder = frames.FrameDecoder()
    (frame,) = decoder.feed(chunk)
    chunk[5:9] = b"XXXX"
    assert frame == (0, b"keep")


def test_unknown_flag_bits_pass_through(frames: ModuleType) -> None:
    assert frames.FrameDecoder().feed(header(0x80, 1) + b"z") == [(0x80, b"z")]


@pytest.mark.parametrize("size", [0, 1, 4, 5, 6, 65536])
def test_boundary_payload_sizes_round_trip(frames: ModuleType, size: int) -> None:
    payload = bytes(random.Random(size).randbytes(size))
    stream = frames.encode_frame(payload) * 2
    for step in (1, 4, 5, 7, len(stream)):
        decoder = frames.FrameDecoder()
        got = []
        for i in range(0, len(stream), step):
            got.extend(decoder.feed(stream[i : i + step]))
        assert got == [(0, payload), (0, payload)]


def test_frame_of_exactly_the_default_cap_passes(frames: ModuleType) -> None:
    payload = b"\xab" * CAP
    decoder = frames.FrameDecoder()
    assert decoder.feed(header(0, CAP)) == []
    (frame,) = decoder.feed(payload)
    assert frame[0] == 0 and frame[1] == payload


def test_header_one_past_the_cap_fails_at_the_header(frames: ModuleType) -> None:
    decoder = frames.FrameDecoder()
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(header(0, CAP + 1))
    assert info.value.code == "resource_exhausted"
    assert str(info.value) == f"frame of {CAP + 1} bytes exceeds the {CAP}-byte limit"


@pytest.mark.parametrize("cap", [0, 1, 4, 5, 100])
def test_custom_cap_boundary(frames: ModuleType, cap: int) -> None:
    assert frames.FrameDecoder(cap).feed(frames.encode_frame(b"x" * cap)) == [(0, b"x" * cap)]
    with pytest.raises(FrameTooLarge):
        frames.FrameDecoder(cap).feed(header(0, cap + 1))
    assert frames.FrameDecoder(cap).max_frame_size == cap


def test_cap_beyond_the_wire_length_means_no_cap(frames: ModuleType) -> None:
    decoder = frames.FrameDecoder(2**70, gzip=True)
    assert decoder.max_frame_size == 2**70
    assert decoder.feed(header(0, 0xFFFFFFFF)) == []
    assert decoder.buffered == 5
    body = b"inflate me" * 50
    assert frames.FrameDecoder(2**70, gzip=True).feed(frames.encode_frame(gzip.compress(body), 1)) == [(0, body)]


def test_negative_cap_is_rejected(frames: ModuleType) -> None:
    with pytest.raises(ValueError):
        frames.FrameDecoder(-1)


def test_huge_announced_length_raises_without_allocating(frames: ModuleType) -> None:
    decoder = frames.FrameDecoder()
    gc.collect()
    tracemalloc.start()
    try:
        with pytest.raises(FrameTooLarge):
            decoder.feed(b"\x00" + b"\xff\xff\xff\xff" + b"tail")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_header_split_across_chunks_is_checked_when_complete(frames: ModuleType) -> None:
    decoder = frames.FrameDecoder(10)
    assert decoder.feed(b"\x00\x00\x00") == []
    with pytest.raises(FrameTooLarge):
        decoder.feed(b"\x00\x0b")


def test_error_leaves_the_decoder_unusable(frames: ModuleType) -> None:
    decoder = frames.FrameDecoder(3)
    with pytest.raises(FrameTooLarge):
        decoder.feed(header(0, 4))
    with pytest.raises(FrameTooLarge):
        decoder.feed(frames.encode_frame(b"ok"))
    with pytest.raises(FrameTooLarge):
        decoder.close()


def test_close_with_a_partial_header_is_truncation(frames: ModuleType) -> None:
    decoder = frames.FrameDecoder()
    decoder.feed(b"\x00\x00\x00")
    with pytest.raises(TruncatedFrame) as info:
        decoder.close()
    assert info.value.code == "invalid_argument"
    assert "3 of 5" in str(info.value)


def test_close_with_a_partial_payload_is_truncation(frames: ModuleType) -> None:
    decoder = frames.FrameDecoder()
    decoder.feed(header(0, 10) + b"abc")
    with pytest.raises(TruncatedFrame) as info:
        decoder.close()
    assert "3 of 10 payload bytes" in str(info.value)


def test_close_on_a_frame_boundary_is_clean(frames: ModuleType) -> None:
    decoder = frames.FrameDecoder()
    decoder.close()
    decoder.feed(frames.encode_frame(b"x"))
    decoder.close()


# --- compression ----------------------------------------------------------------------------------


def test_gzip_frame_is_inflated_and_flag_cleared(frames: ModuleType) -> None:
    body = b"hello " * 1000
    stream = frames.encode_frame(gzip.compress(body), 1) + frames.encode_frame(gzip.compress(b"{}"), 3)
    assert frames.FrameDecoder(gzip=True).feed(stream) == [(0, body), (2, b"{}")]


def test_multi_member_gzip_is_inflated_whole(frames: ModuleType) -> None:
    payload = gzip.compress(b"abc") + gzip.compress(b"def")
    assert frames.FrameDecoder(gzip=True).feed(frames.encode_frame(payload, 1)) == [(0, b"abcdef")]


def test_compressed_frame_without_gzip_is_rejected(frames: ModuleType) -> None:
    decoder = frames.FrameDecoder()
    with pytest.raises(CompressionError) as info:
        decoder.feed(frames.encode_frame(gzip.compress(b"x"), 1))
    assert info.value.code == "invalid_argument"
    with pytest.raises(CompressionError):
        decoder.feed(b"")


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"not gzip at all",
        gzip.compress(b"truncated body" * 10)[:-6],
        gzip.compress(b"x") + b"trailing garbage",
    ],
    ids=["empty", "garbage", "truncated", "trailing-garbage"],
)
def test_corrupt_gzip_is_a_compression_error(frames: ModuleType, payload: bytes) -> None:
    with pytest.raises(CompressionError):
        frames.FrameDecoder(gzip=True).feed(frames.encode_frame(payload, 1))


def test_gzip_bomb_stops_at_the_cap(frames: ModuleType) -> None:
    bomb = gzip.compress(b"\x00" * (CAP + 1))
    assert len(bomb) < 64 * 1024
    decoder = frames.FrameDecoder(gzip=True)
    with pytest.raises(CompressionError) as info:
        decoder.feed(frames.encode_frame(bomb, 1))
    assert f"{CAP}-byte limit" in str(info.value)


def test_gzip_inflating_to_exactly_the_cap_passes(frames: ModuleType) -> None:
    body = b"z" * 1000
    decoder = frames.FrameDecoder(1000, gzip=True)
    assert decoder.feed(frames.encode_frame(gzip.compress(body), 1)) == [(0, body)]
    with pytest.raises(CompressionError):
        frames.FrameDecoder(999, gzip=True).feed(frames.encode_frame(gzip.compress(body), 1))


# --- twin == compiled -----------------------------------------------------------------------------


def decode_trace(module: ModuleType, chunks: list[bytes], cap: int, use_gzip: bool) -> list[object]:
    """Everything observable while feeding `chunks` then closing: frames, buffered, errors."""
    decoder = module.FrameDecoder(cap, gzip=use_gzip)
    trace: list[object] = []
    for chunk in chunks:
        result = outcome(lambda: decoder.feed(chunk))
        trace.append(result)
        if result[0] == "error":
            trace.append(outcome(lambda: decoder.feed(b"")))
            return trace
        trace.append(decoder.buffered)
    trace.append(outcome(decoder.close))
    return trace


def flat_frames(trace: list[object]) -> list[tuple[int, bytes]]:
    return [f for entry in trace if isinstance(entry, tuple) and entry[0] == "ok" and entry[1] for f in entry[1]]


frame_specs = st.lists(
    st.tuples(st.sampled_from([0, 2, 0x80]), st.binary(max_size=300)), max_size=12
)


def check_random_frames_any_chunking(data: st.DataObject) -> None:
    twin, compiled = twin_and_compiled("frames")
    specs = data.draw(frame_specs)
    stream = b"".join(twin.encode_frame(payload, flags) for flags, payload in specs)
    assert compiled.encode_frames([p for _, p in specs]) == twin.encode_frames([p for _, p in specs])
    chunks = cut(data, stream)
    expected = decode_trace(twin, chunks, CAP, False)
    assert decode_trace(compiled, chunks, CAP, False) == expected
    assert flat_frames(expected) == specs
    assert expected[-1] == ("ok", None)


def check_garbage(data: st.DataObject) -> None:
    twin, compiled = twin_and_compiled("frames")
    blob = data.draw(st.binary(max_size=400))
    if data.draw(st.booleans()):
        # A valid prefix followed by garbage, so the failure lands mid-stream.
        blob = twin.encode_frames(data.draw(st.lists(st.binary(max_size=20), max_size=4))) + blob
    cap = data.draw(st.sampled_from([0, 1, 4, 5, 16, 255, 1 << 20, CAP]))
    use_gzip = data.draw(st.booleans())
    chunks = cut(data, blob)
    assert decode_trace(compiled, chunks, cap, use_gzip) == decode_trace(twin, chunks, cap, use_gzip)


def check_announced_lengths(data: st.DataObject) -> None:
    twin, compiled = twin_and_compiled("frames")
    cap = data.draw(st.sampled_from([0, 1, 4, 5, 64, 1 << 24]))
    length = data.draw(
        st.one_of(
            st.integers(0, 0xFFFFFFFF),
            st.sampled_from([cap - 1, cap, cap + 1, 0xFFFFFFFF]).filter(lambda n: 0 <= n <= 0xFFFFFFFF),
        )
    )
    tail = data.draw(st.binary(max_size=80))
    chunks = cut(data, header(data.draw(st.integers(0, 255)), length) + tail)
    expected = decode_trace(twin, chunks, cap, True)
    assert decode_trace(compiled, chunks, cap, True) == expected
    if length > cap:
        assert any(e[0] == "error" and e[1] is FrameTooLarge for e in expected if isinstance(e, tuple))


def check_gzip_frames(data: st.DataObject) -> None:
    twin, compiled = twin_and_compiled("frames")
    bodies = data.draw(st.lists(st.binary(max_size=200), min_size=1, max_size=4))
    parts = []
    for body in bodies:
        packed = gzip.compress(body)
        mutation = data.draw(st.sampled_from(["none", "flip", "truncate", "append"]))
        if mutation == "flip" and packed:
            i = data.draw(st.integers(0, len(packed) - 1))
            packed = packed[:i] + bytes([packed[i] ^ data.draw(st.integers(1, 255))]) + packed[i + 1 :]
        elif mutation == "truncate":
            packed = packed[: data.draw(st.integers(0, len(packed)))]
        elif mutation == "append":
            packed += data.draw(st.binary(min_size=1, max_size=8))
        parts.append(twin.encode_frame(packed, data.draw(st.sampled_from([1, 3]))))
    cap = data.draw(st.sampled_from([0, 10, 100, 250, CAP]))
    use_gzip = data.draw(st.booleans())
    chunks = cut(data, b"".join(parts))
    expected = decode_trace(twin, chunks, cap, use_gzip)
    assert decode_trace(compiled, chunks, cap, use_gzip) == expected


@BOUNDED
@given(st.data())
def test_twins_agree_on_random_frames_any_chunking(data: st.DataObject) -> None:
    check_random_frames_any_chunking(data)


@BOUNDED
@given(st.data())
def test_twins_agree_on_garbage(data: st.DataObject) -> None:
    check_garbage(data)


@BOUNDED
@given(st.data())
def test_twins_agree_on_announced_lengths(data: st.DataObject) -> None:
    check_announced_lengths(data)


@BOUNDED
@given(st.data())
def test_twins_agree_on_gzip_frames(data: st.DataObject) -> None:
    check_gzip_frames(data)


@pytest.mark.soak
@pytest.mark.timeout(1800)
@SOAK
@given(st.data())
def test_soak_twins_agree_on_random_frames_any_chunking(data: st.DataObject) -> None:
    check_random_frames_any_chunking(data)


@pytest.mark.soak
@pytest.mark.timeout(1800)
@SOAK
@given(st.data())
def test_soak_twins_agree_on_garbage(data: st.DataObject) -> None:
    check_garbage(data)


@pytest.mark.soak
@pytest.mark.timeout(1800)
@SOAK
@given(st.data())
def test_soak_twins_agree_on_announced_lengths(data: st.DataObject) -> None:
    check_announced_lengths(data)


@pytest.mark.soak
@pytest.mark.timeout(1800)
@SOAK
@given(st.data())
def test_soak_twins_agree_on_gzip_frames(data: st.DataObject) -> None:
    check_gzip_frames(data)


def test_ten_thousand_small_frames_in_random_chunks(frames: ModuleType) -> None:
    rng = random.Random(7)
    payloads = [rng.randbytes(rng.randint(0, 128)) for _ in range(10_000)]
    stream = frames.encode_frames(payloads)
    decoder = frames.FrameDecoder()
    got: list[tuple[int, bytes]] = []
    i = 0
    while i < len(stream):
        step = rng.randint(1, 4096)
        got.extend(decoder.feed(stream[i : i + step]))
        i += step
    assert got == [(0, p) for p in payloads]
    decoder.close()


def test_large_frames_in_random_chunks(frames: ModuleType) -> None:
    rng = random.Random(8)
    payloads = [rng.randbytes(1 << 20) for _ in range(3)]
    stream = frames.encode_frames(payloads)
    decoder = frames.FrameDecoder()
    got: list[tuple[int, bytes]] = []
    i = 0
    while i < len(stream):
        step = rng.randint(1, 256 * 1024)
        got.extend(decoder.feed(stream[i : i + step]))
        i += step
    assert got == [(0, p) for p in payloads]


@pytest.mark.parametrize("size", [(1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 << 20])
def test_frames_around_the_preallocation_size(size: int) -> None:
    # Above 1 MiB the compiled decoder grows a frame as data arrives instead of allocating it
    # whole; both paths must match the twin for any chunking, including a truncated end.
    twin, compiled = twin_and_compiled("frames")
    payload = random.Random(size).randbytes(size)
    stream = twin.encode_frames([payload, b"between", payload])
    for largest in (4096, 64 * 1024, 1 << 20, len(stream)):
        rng = random.Random(largest)
        chunks = []
        i = 0
        while i < len(stream):
            step = rng.randint(1, largest)
            chunks.append(stream[i : i + step])
            i += step
        expected = decode_trace(twin, chunks, CAP, False)
        assert flat_frames(expected) == [(0, payload), (0, b"between"), (0, payload)]
        assert decode_trace(compiled, chunks, CAP, False) == expected
        truncated = stream[: len(stream) - 1000]
        cut_chunks = [truncated[k : k + 300_000] for k in range(0, len(truncated), 300_000)]
        assert decode_trace(compiled, cut_chunks, CAP, False) == decode_trace(twin, cut_chunks, CAP, False)


def test_allowed_large_header_commits_memory_only_as_data_arrives(frames: ModuleType) -> None:
    decoder = frames.FrameDecoder()
    gc.collect()
    tracemalloc.start()
    try:
        decoder.feed(header(0, CAP) + b"0123456789")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoder.buffered == 15
    assert peak < 256 * 1024


def test_errors_are_hot_path_errors(frames: ModuleType) -> None:
    with pytest.raises(HotPathError):
        frames.FrameDecoder(1).feed(header(0, 2))


# --- a string nested in message fields, encoded as one data frame --------------------------------


def test_encode_nested_frame_is_the_messages_encoding(frames: ModuleType) -> None:
    # AgentServerMessage.interaction_update(1).text_delta(1).text(1) = "hi"
    assert frames.encode_nested_frame((1, 1, 1), b"hi") == b"\x00\x00\x00\x00\x08\n\x06\n\x04\n\x02hi"
    # an empty string is left out (proto3), the messages around it are not
    assert frames.encode_nested_frame((1, 1, 1), b"") == b"\x00\x00\x00\x00\x04\n\x02\n\x00"
    # .thinking_delta(4) with thinking_style(2) = 1 after its text
    assert frames.encode_nested_frame((1, 4, 1), b"hi", b"\x10\x01") == b'\x00\x00\x00\x00\n\n\x08"\x06\n\x02hi\x10\x01'
    assert frames.encode_nested_frame((3,), b"x") == b"\x00\x00\x00\x00\x03\x1a\x01x"
    # keys and lengths past one byte are varints
    long = b"y" * 300
    assert frames.encode_nested_frame((16, 2), long) == b"\x00\x00\x00\x01\x33\x82\x01\xaf\x02\x12\xac\x02" + long


@pytest.mark.parametrize("fields", [(), (0,), (1, -1), (1 << 29,)])
def test_encode_nested_frame_rejects_impossible_field_numbers(frames: ModuleType, fields: tuple[int, ...]) -> None:
    with pytest.raises((ValueError, OverflowError)):
        frames.encode_nested_frame(fields, b"x")


@BOUNDED
@given(st.lists(st.integers(1, (1 << 29) - 1), min_size=1, max_size=6), st.binary(max_size=400), st.binary(max_size=20))
def test_twins_agree_on_nested_frames(fields: list[int], value: bytes, tail: bytes) -> None:
    twin, compiled = twin_and_compiled("frames")
    assert compiled.encode_nested_frame(tuple(fields), value, tail) == twin.encode_nested_frame(tuple(fields), value, tail)
