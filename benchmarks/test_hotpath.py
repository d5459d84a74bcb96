"""Hot path: compiled vs pure-Python twin, measured in one run.

Run: .venv/bin/python -m pytest benchmarks/test_hotpath.py --benchmark-only
Groups pair the two implementations (and, for large frames, a plain slice-copy baseline), so the
ratios in benchmarks/results/hotpath.md come from one session on one machine.
"""
from __future__ import annotations

import os
import random
from types import ModuleType

import pytest

from cursor_byok import hotpath

IMPLEMENTATIONS = ("python", "compiled")
SMALL_FRAMES = 10_000
SMALL_SIZE = 64
LARGE_FRAMES = 100
LARGE_SIZE = 1 << 20
SEQNO_ITEMS = 100_000
WINDOW = 64
HISTORY_ITEMS = 10_000
HISTORY_ITEM_SIZE = 2048


def module_for(part: str, implementation: str) -> ModuleType:
    if implementation == "python":
        return hotpath.twins[part]
    module = hotpath.compiled[part]
    if module is None:
        message = f"compiled hot path module for {part!r} is not built"
        if os.environ.get("CURSOR_BYOK_REQUIRE_COMPILED") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return module


def random_chunks(blob: bytes, largest: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    chunks = []
    i = 0
    while i < len(blob):
        step = rng.randint(1, largest)
        chunks.append(blob[i : i + step])
        i += step
    return chunks


@pytest.fixture(scope="module")
def small_stream() -> list[bytes]:
    rng = random.Random(1)
    payloads = [rng.randbytes(SMALL_SIZE) for _ in range(SMALL_FRAMES)]
    return random_chunks(hotpath.twins["frames"].encode_frames(payloads), 4096, seed=2)


@pytest.fixture(scope="module")
def large_stream() -> tuple[bytes, list[bytes]]:
    payload = random.Random(3).randbytes(LARGE_SIZE)
    stream = hotpath.twins["frames"].encode_frames([payload] * LARGE_FRAMES)
    return stream, random_chunks(stream, 256 * 1024, seed=4)


def decode_all(module: ModuleType, chunks: list[bytes]) -> int:
    decoder = module.FrameDecoder()
    count = 0
    for chunk in chunks:
        count += len(decoder.feed(chunk))
    decoder.close()
    return count


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_decode_small_frames(benchmark, implementation: str, small_stream: list[bytes]) -> None:
    module = module_for("frames", implementation)
    benchmark.group = f"frames: decode {SMALL_FRAMES} x {SMALL_SIZE} B, random chunks <= 4 KiB"
    assert benchmark(decode_all, module, small_stream) == SMALL_FRAMES


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_decode_large_frames(benchmark, implementation: str, large_stream: tuple[bytes, list[bytes]]) -> None:
    module = module_for("frames", implementation)
    benchmark.group = f"frames: decode {LARGE_FRAMES} x 1 MiB, random chunks <= 256 KiB"
    assert benchmark(decode_all, module, large_stream[1]) == LARGE_FRAMES


def test_decode_large_frames_baseline_slice_copy(benchmark, large_stream: tuple[bytes, list[bytes]]) -> None:
    """One plain `bytes` slice per payload out of the whole stream: the cost of one copy."""
    stream = large_stream[0]
    step = 5 + LARGE_SIZE

    def slice_payloads() -> int:
        count = 0
        for start in range(5, len(stream), step):
            payload = stream[start : start + LARGE_SIZE]
            count += len(payload) == LARGE_SIZE
        return count

    benchmark.group = f"frames: decode {LARGE_FRAMES} x 1 MiB, random chunks <= 256 KiB"
    assert benchmark(slice_payloads) == LARGE_FRAMES


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_encode_small_frames(benchmark, implementation: str) -> None:
    module = module_for("frames", implementation)
    rng = random.Random(5)
    payloads = [rng.randbytes(SMALL_SIZE) for _ in range(SMALL_FRAMES)]
    benchmark.group = f"frames: encode_frames {SMALL_FRAMES} x {SMALL_SIZE} B"
    assert len(benchmark(module.encode_frames, payloads)) == SMALL_FRAMES * (5 + SMALL_SIZE)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_decode_hex(benchmark, implementation: str) -> None:
    module = module_for("frames", implementation)
    text = random.Random(6).randbytes(1 << 20).hex()
    benchmark.group = "hex: decode 1 MiB (2 Mi hex chars, str)"
    assert len(benchmark(module.decode_hex, text)) == 1 << 20


@pytest.fixture(scope="module")
def shuffled_seqnos() -> list[int]:
    rng = random.Random(7)
    order: list[int] = []
    for base in range(0, SEQNO_ITEMS, WINDOW):
        block = list(range(base, min(base + WINDOW, SEQNO_ITEMS)))
        rng.shuffle(block)
        order.extend(block)
    return order


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_seqno_push(benchmark, implementation: str, shuffled_seqnos: list[int]) -> None:
    module = module_for("seqno", implementation)

    def push_all() -> int:
        buffer = module.ReorderBuffer(WINDOW)
        push = buffer.push
        for s in shuffled_seqnos:
            push(s, s)
        return buffer.next_seqno

    benchmark.group = f"seqno: push {SEQNO_ITEMS} shuffled within a {WINDOW} window"
    assert benchmark(push_all) == SEQNO_ITEMS


@pytest.fixture(scope="module")
def history_items() -> list[bytes]:
    rng = random.Random(8)
    return [rng.randbytes(HISTORY_ITEM_SIZE) for _ in range(HISTORY_ITEMS)]


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_prefix_chain(benchmark, implementation: str, history_items: list[bytes]) -> None:
    module = module_for("prefix", implementation)
    benchmark.group = f"prefix: chain {HISTORY_ITEMS} x 2 KiB"
    assert len(benchmark(module.chain, history_items)) == HISTORY_ITEMS


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_prefix_is_strict_prefix(benchmark, implementation: str, history_items: list[bytes]) -> None:
    module = module_for("prefix", implementation)
    history = hotpath.twins["prefix"].chain(history_items)
    grown = hotpath.twins["prefix"].extend(history, [b"next turn"])
    benchmark.group = f"prefix: is_strict_prefix on a {HISTORY_ITEMS}-item history"
    assert benchmark(module.is_strict_prefix, history, grown) is True


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_prefix_common_prefix(benchmark, implementation: str, history_items: list[bytes]) -> None:
    module = module_for("prefix", implementation)
    twin = hotpath.twins["prefix"]
    history = twin.chain(history_items)
    forked = twin.extend(history[:7000], [b"edited"] + history_items[7001:])
    benchmark.group = f"prefix: common_prefix of two {HISTORY_ITEMS}-item histories"
    assert benchmark(module.common_prefix, history, forked) == 7000
