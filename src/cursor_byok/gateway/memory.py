"""Give memory back after a burst (glibc only; a no-op elsewhere), and keep start-up's objects out
of the garbage collector's way.

Request bodies and ids of a few MiB are freed as soon as they are refused, but glibc's malloc
keeps freed heap pages and, after the first large free, serves later large blocks from the heap
instead of mmap. RSS then stays at its peak long after junk stopped. A fixed mmap threshold keeps
large blocks out of the heap (each is returned on free), and a trim after the periodic sweep
returns the heap's free pages. The trim walks the heap (a few ms), so it runs only when resident
memory grew since the last one.
"""
from __future__ import annotations

import ctypes
import gc
import logging
import os

log = logging.getLogger("cursor_byok.gateway.memory")

_M_MMAP_THRESHOLD = -3  # mallopt parameter (malloc.h)
MMAP_THRESHOLD = 256 * 1024
# Allocations of container objects between two young collections (CPython's default: 700). A run
# start allocates a few hundred: at the default every third start paid a young collection, every
# 30th a middle one (~5 ms) and every few hundred a full walk of every live conversation's objects
# (150-320 ms with 300 of them live). A turn's objects are freed by reference counting (nothing
# of a turn waits for the collector), so collections find little: fewer of them cost less in all.
YOUNG_COLLECTION_ALLOCATIONS = 10_000
# Young collections between two middle ones (CPython's default: 10). A middle pass walks what
# survived the young ones since the last and is still alive: a run's few hundred objects outlive a
# young pass while the run is live (20-30 ms of middle pass held the loop per 200 runs held at
# once). Nothing of a turn is left to the collector (a turn's objects go by reference counting),
# so waiting longer finds fewer of them alive and no more garbage; full passes, counted in middle
# ones, become as much rarer.
MIDDLE_COLLECTION_YOUNG_ONES = 40


def _libc() -> ctypes.CDLL | None:
    # The C library the interpreter itself is linked with (dlopen of the process): no library
    # search, which on Linux (`ctypes.util.find_library`) runs ldconfig in a child before listening.
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt  # noqa: B018 - glibc only
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError, TypeError):  # TypeError: Windows has no handle of the process
        return None
    return libc


_LIBC = _libc()


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"
    )]


def _mallinfo2() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    if _LIBC is None:
        return None
    try:
        info = _LIBC.mallinfo2  # glibc >= 2.33
    except AttributeError:
        return None
    info.restype = _MallInfo2
    return info


_MALLINFO2 = _mallinfo2()


def _free_heap_bytes() -> int:
    """Bytes in free chunks of malloc's heaps (0 where glibc cannot say)."""
    return int(_MALLINFO2().fordblks) if _MALLINFO2 is not None else 0


def freeze_startup_objects() -> None:
    """Keep what start-up made (modules, classes, config: all of it lives as long as the process)
    out of every later collection, and collect from here on (start-up may have switched the
    collector off): a full collection would otherwise walk them all each time and hold the event
    loop for tens of ms. (Not collected first: start-up leaves next to no garbage, and a collection
    now would delay the first answer by as much as it saves later.)"""
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_ALLOCATIONS, MIDDLE_COLLECTION_YOUNG_ONES, gc.get_threshold()[2])
    gc.enable()


def keep_large_blocks_out_of_the_heap() -> None:
    if _LIBC is not None and not _LIBC.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD):
        log.debug("mallopt(M_MMAP_THRESHOLD) refused")


def _resident_bytes() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Trimmer:
    """`maybe_trim()` after each sweep: trims when RSS grew by more than `slack` since the last time,
    or when more than `freed_slack` bytes were freed into the heap since then. (RSS alone misses a
    burst whose memory is freed after a trim that ran in its middle: nothing grows any more, and
    what it freed would stay resident. And a server taking turns frees a few hundred KiB of holes
    into its heap per stretch of turns, which add up to MiBs without any one burst: a small
    `freed_slack` gives them back while the server is idle, for a trim of ~1 ms.)"""

    def __init__(self, slack: int = 8 * 1024 * 1024, freed_slack: int = 1024 * 1024) -> None:
        self.slack = slack
        self.freed_slack = freed_slack
        self.enabled = _LIBC is not None and os.path.exists("/proc/self/statm")
        self._settled = _resident_bytes() if self.enabled else 0
        self._free = _free_heap_bytes() if self.enabled else 0  # free heap bytes since the last trim, at their lowest
        self.trims = 0

    def maybe_trim(self) -> None:
        if not self.enabled:
            return
        rss, free = _resident_bytes(), _free_heap_bytes()
        if rss - self._settled > self.slack or free - self._free > self.freed_slack:
            assert _LIBC is not None
            _LIBC.malloc_trim(0)
            self.trims += 1
            self._settled = _resident_bytes()
            self._free = _free_heap_bytes()  # trimmed pages stay free chunks: count only what is freed after
            return
        self._settled = min(self._settled, rss)
        self._free = min(self._free, free)
