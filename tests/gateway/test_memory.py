"""An idle server gives back the heap pages it freed: the trimmer trims once more than its slack of
heap bytes were freed since the last trim, even when resident memory hardly grew (a server's heap
fills up with holes turn after turn, a few hundred KiB at a time, without one large burst)."""
from __future__ import annotations

import ctypes
import ctypes.util

from cursor_byok.gateway import Trimmer

BLOCK = 4096  # below glibc's mmap threshold: the blocks come from the heap
RUN = 64  # one block kept per run of freed ones: the heap's top cannot shrink, its middle can be trimmed


def _resident_bytes() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * 4096


def _malloc_touched(total: int) -> tuple[ctypes.CDLL, list[int]]:
    """`total` bytes malloc'd in blocks and touched (resident)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(BLOCK) for _ in range(total // BLOCK)]
    for block in blocks:
        ctypes.memset(block, 1, BLOCK)
    return libc, blocks


def _free_leaving_holes(libc: ctypes.CDLL, blocks: list[int]) -> list[int]:
    """All but one block in every RUN freed; the kept ones."""
    for i, block in enumerate(blocks):
        if i % RUN != RUN - 1:
            libc.free(block)
    return blocks[RUN - 1 :: RUN]


def test_a_few_mib_freed_in_the_heap_are_given_back() -> None:
    # The blocks may come from free chunks earlier work left in this process's heap: the trimmer
    # starts counting once they are in use, as after a trim.
    libc, blocks = _malloc_touched(4 * 1024 * 1024)
    trimmer = Trimmer()
    assert trimmer.enabled  # glibc on Linux
    kept = _free_leaving_holes(libc, blocks)
    try:
        before = _resident_bytes()
        trimmer.maybe_trim()
        assert trimmer.trims == 1
        assert before - _resident_bytes() > 2 * 1024 * 1024
    finally:
        for block in kept:
            libc.free(block)


def test_nothing_freed_nothing_trimmed() -> None:
    trimmer = Trimmer()
    trimmer.maybe_trim()
    trimmer.maybe_trim()
    assert trimmer.trims == 0
