"""Messages between instances as PostgreSQL notifications (pure: no connection, no clock).

A NOTIFY payload is text of at most 8000 bytes, so a message travels as one or more notes:
`kind|sender|corr|serial|index|count|base64 of a piece of its body`. `corr` ties an answer to its
question and an output piece to its reader; `serial` (the sender's count of messages) keeps the
notes of two messages with the same `corr` apart. Notes of one sender arrive in the order they were
committed, so a reader's pieces arrive in order; `Assembler` joins the notes of one message.
"""
from __future__ import annotations

import base64
import enum
from dataclasses import dataclass, field

# Raw bytes per note: base64 makes 4/3 of it, and the header stays well under the rest of 8000.
PIECE_BYTES = 5600


class Kind(str, enum.Enum):
    APPEND = "append"  # a BidiAppend for the conversation's owner: answered with ANSWER
    ANSWER = "answer"  # to a question with the same corr
    READ = "read"  # read a request id's output stream from its start: OUT... END come back
    OUT = "out"  # output frames for the reader `corr`, more to come
    END = "end"  # the last output frames (its terminal) for the reader `corr`
    LEAVE = "leave"  # the reader `corr` went away
    YIELD = "yield"  # let the conversation go if it is idle: ANSWER "yielded" or "busy"
    BOUND = "bound"  # (to every instance) a request id was just bound: its owner is the sender


@dataclass(frozen=True, slots=True)
class Message:
    kind: Kind
    sender: str
    corr: str
    body: bytes = b""


def notes(message: Message, serial: int) -> list[str]:
    """The payloads that carry `message` (at least one, even for an empty body)."""
    body = message.body
    pieces = [body[i : i + PIECE_BYTES] for i in range(0, len(body), PIECE_BYTES)] or [b""]
    head = f"{message.kind.value}|{message.sender}|{message.corr}|{serial}"
    return [f"{head}|{i}|{len(pieces)}|{base64.b64encode(p).decode('ascii')}" for i, p in enumerate(pieces)]


@dataclass(slots=True)
class Assembler:
    """Joins notes into messages; a note that is not one of ours is dropped (ValueError)."""

    _partial: dict[tuple[str, str], list[bytes | None]] = field(default_factory=dict)

    def feed(self, payload: str) -> Message | None:
        """The message `payload` completes, if it does; raises ValueError for a malformed note."""
        kind, sender, corr, serial, index, count, data = payload.split("|", 6)
        piece, at, total = base64.b64decode(data, validate=True), int(index), int(count)
        if not 0 <= at < total:
            raise ValueError(f"note {at} of {total}")
        if total == 1:
            return Message(Kind(kind), sender, corr, piece)
        key = (sender, serial)
        pieces = self._partial.setdefault(key, [None] * total)
        pieces[at] = piece
        if any(p is None for p in pieces):
            return None
        del self._partial[key]
        return Message(Kind(kind), sender, corr, b"".join(pieces))  # type: ignore[arg-type]
