"""append_seqno reorder buffer, pure-Python twin of ext/seqno.pyx (the oracle in property tests).

The IDE numbers the client messages of a conversation (BidiAppend `append_seqno`) and may
deliver them over several HTTP requests, so they can arrive out of order or twice. The buffer
hands items on strictly in seqno order: a gap is held until filled, a repeat of a delivered or
held seqno is dropped (and counted), and nothing more than `window` seqnos ahead is accepted,
so a peer cannot make us hold unbounded state.
"""
from __future__ import annotations

import operator

from .errors import NegativeSeqno, SeqnoOutOfWindow

__all__ = ["ReorderBuffer"]


class ReorderBuffer:
    """Deliver pushed items in seqno order, starting at `start`, holding at most `window` ahead."""

    __slots__ = ("_duplicates", "_held", "_next", "_window")

    def __init__(self, window: int = 64, start: int = 0) -> None:
        window = operator.index(window)
        start = operator.index(start)
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if start < 0:
            raise ValueError(f"start must be >= 0, got {start}")
        self._window = window
        self._next = start
        self._held: dict[int, object] = {}
        self._duplicates = 0

    @property
    def window(self) -> int:
        return self._window

    @property
    def next_seqno(self) -> int:
        """The seqno whose arrival releases the next item."""
        return self._next

    @property
    def held(self) -> int:
        """Items received ahead of a gap, waiting for it to fill."""
        return len(self._held)

    @property
    def duplicates(self) -> int:
        """Pushes dropped because their seqno was already delivered or held."""
        return self._duplicates

    def push(self, seqno: int, item: object) -> list[object]:
        """Accept one item; return the items (possibly none) now deliverable in order."""
        seqno = operator.index(seqno)
        if seqno < 0:
            raise NegativeSeqno(f"seqno {seqno} is negative")
        expected = self._next
        if seqno < expected:
            self._duplicates += 1
            return []
        if seqno - expected >= self._window:
            raise SeqnoOutOfWindow(
                f"seqno {seqno} is outside the reorder window [{expected}, {expected + self._window})"
            )
        held = self._held
        if seqno != expected:
            if seqno in held:
                self._duplicates += 1
            else:
                held[seqno] = item
            return []
        ready = [item]
        expected += 1
        while held:
            try:
                ready.append(held.pop(expected))
            except KeyError:
                break
            expected += 1
        self._next = expected
        return ready
