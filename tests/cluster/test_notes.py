"""The bus's notes: a message of any size goes out in payloads PostgreSQL takes and comes back whole."""
from __future__ import annotations

import os

import pytest

from cursor_byok.cluster.notes import PIECE_BYTES, Assembler, Kind, Message, notes

NOTIFY_LIMIT = 8000  # bytes of a NOTIFY payload


@pytest.mark.parametrize("size", [0, 1, PIECE_BYTES - 1, PIECE_BYTES, PIECE_BYTES + 1, 5 * PIECE_BYTES + 17])
def test_a_message_comes_back_whole_in_payloads_under_the_limit(size: int) -> None:
    message = Message(Kind.OUT, "inst-a", "reader-1", os.urandom(size))
    payloads = notes(message, serial=7)
    assert all(len(p.encode()) < NOTIFY_LIMIT for p in payloads)
    assembler = Assembler()
    got = [assembler.feed(p) for p in payloads]
    assert got[:-1] == [None] * (len(payloads) - 1) and got[-1] == message


def test_notes_of_two_messages_to_one_reader_interleaved_are_kept_apart() -> None:
    first, second = (Message(Kind.OUT, "inst-a", "reader-1", bytes([n]) * (2 * PIECE_BYTES)) for n in (1, 2))
    a, b = notes(first, 1), notes(second, 2)
    assembler = Assembler()
    done = [m for m in (assembler.feed(p) for p in (a[0], b[0], a[1], b[1])) if m is not None]
    assert done == [first, second]


@pytest.mark.parametrize("payload", ["hello", "out|a|c|1|2|2|AAAA", "nope|a|c|1|0|1|", "out|a|c|1|0|1|not base64!"])
def test_a_note_that_is_not_ours_is_refused(payload: str) -> None:
    with pytest.raises(ValueError):
        Assembler().feed(payload)
