"""The canonical, append-only history of one conversation and its provider projection.

Every entry is one provider-neutral message with an idempotency key (event_id). Old entries are
never edited, merged, reordered or regenerated, so turn N's projection is a strict prefix of turn
N+1's until an explicit compaction, which is itself an entry: the projection restarts at it with the
latest request context and the summary. The prefix hash chain (hot path `prefix`) checks this on
every projection (once the request built from it has left); a violation is logged (and raised,
before the request, when strict checking is on, as in tests).
"""
from __future__ import annotations

import asyncio
import enum
import logging
import os
from collections.abc import Iterable, Iterator
from typing import overload

import msgspec

from ... import hotpath
from ...run import ImagePart, KeyedMessages, Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart

log = logging.getLogger("cursor_byok.history")

STRICT_PREFIX_ENV = "CURSOR_BYOK_STRICT_PREFIX"


class EntryKind(str, enum.Enum):
    USER = "user"
    REQUEST_CONTEXT = "request_context"
    ASSISTANT = "assistant"
    TOOL_RESULTS = "tool_results"
    INJECTION = "injection"
    BACKGROUND_COMPLETION = "background_completion"
    COMPACTION = "compaction"


class PrefixViolation(AssertionError):
    """The new provider history does not extend the previous one (without a compaction)."""


class HistoryEntry:
    """One entry of the log. An entry read from the store keeps its stored bytes and decodes its
    message only when something asks for it: a reloaded conversation's turn reads a few of its
    messages (the last ones), and projects the rest (`view`) one at a time, so its history is not
    decoded into small objects all at once."""

    __slots__ = ("seq", "event_id", "kind", "run_id", "_message", "_payload")

    def __init__(self, seq: int, event_id: str, kind: EntryKind, run_id: str, message: Message | None = None,
                 *, payload: bytes | None = None) -> None:
        if message is None and payload is None:
            raise ValueError("an entry needs its message or its stored bytes")
        self.seq = seq
        self.event_id = event_id
        self.kind = kind
        self.run_id = run_id
        self._message = message
        self._payload = payload

    def __repr__(self) -> str:
        return f"HistoryEntry({self.seq}, {self.event_id!r}, {self.kind.value}, {self.run_id!r})"

    @property
    def message(self) -> Message:
        """The message, decoded once and kept (for the entries a turn works with)."""
        if self._message is None:
            self._message = self.view()
        return self._message

    def view(self) -> Message:
        """The message, decoded afresh and not kept if it is not decoded already."""
        if self._message is not None:
            return self._message
        assert self._payload is not None
        return decode_entry(self._payload).message

    def holds(self, message: Message) -> bool:
        """Whether this very message object is the entry's (decoded) message."""
        return self._message is message

    def canonical(self) -> bytes:
        """The message's canonical bytes: for a stored entry, the part of its stored bytes that
        holds them (the stored encoding embeds them as they are), without decoding it."""
        payload = self._payload
        if payload is not None:
            head = _stored_head(self.kind)
            if payload.startswith(head) and payload.endswith(b"}"):
                return payload[len(head) : -1]
        return canonical(self.view())

    def stored_size(self) -> int:
        """What the entry holds: its message's text, or for an entry not decoded its stored bytes."""
        return len(self._payload) if self._message is None and self._payload is not None else text_bytes(self.message)


class StoredEntry(msgspec.Struct, frozen=True):
    """What goes into the store's payload column for one entry."""

    kind: EntryKind
    message: Message


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(StoredEntry)


def encode_entry(kind: EntryKind, message: Message) -> bytes:
    return _encoder.encode(StoredEntry(kind, message))


def decode_entry(payload: bytes) -> StoredEntry:
    return _decoder.decode(payload)


def canonical(message: Message) -> bytes:
    """The canonical bytes of a projected message (what the prefix chain hashes)."""
    return _encoder.encode(message)


_HEADS = {kind: b'{"kind":"' + kind.value.encode() + b'","message":' for kind in EntryKind}


def _stored_head(kind: EntryKind) -> bytes:
    """What a stored entry's bytes hold before its message's canonical bytes (`StoredEntry`'s
    fields in order, as msgspec writes them)."""
    return _HEADS[kind]


class Projection(KeyedMessages):
    """The messages of one projection, read from their entries as they are asked for (a stored
    entry not yet decoded is decoded for the reader and not kept). Each message's key, its entry's
    event id within the conversation (the source), names the same bytes for as long as the server runs:
    history messages are immutable, so an adapter may keep their encoding by it across a reload."""

    __slots__ = ("conversation_id", "entries")

    def __init__(self, conversation_id: str, entries: list[HistoryEntry]) -> None:
        self.conversation_id = conversation_id
        self.entries = entries

    def __len__(self) -> int:
        return len(self.entries)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Projection: ...
    def __getitem__(self, index: int | slice) -> Message | Projection:
        if isinstance(index, slice):
            return Projection(self.conversation_id, self.entries[index])
        return self.entries[index].view()

    def __iter__(self) -> Iterator[Message]:
        return (entry.view() for entry in self.entries)

    def source(self) -> str:
        return self.conversation_id

    def key(self, index: int) -> str:
        return self.entries[index].event_id


class ConversationHistory:
    def __init__(self, conversation_id: str, *, strict_prefix: bool | None = None) -> None:
        self.conversation_id = conversation_id
        self.entries: list[HistoryEntry] = []
        self._positions: dict[str, int] = {}  # event_id → index in entries
        self._base = 0  # index of the latest compaction entry (the projection starts there)
        self._latest_context: HistoryEntry | None = None
        self._base_context: HistoryEntry | None = None  # the request context a compaction kept
        self._chain: list[bytes] = []  # prefix chain of the last projection
        self._projected: list[HistoryEntry] = []  # the entries of the last projection (immutable)
        self._unchecked: list[HistoryEntry] | None = None  # a projection whose check waits for the loop's next pass
        self.text_bytes = 0  # what its messages' text holds: most of what a history keeps in memory
        self.strict_prefix = os.environ.get(STRICT_PREFIX_ENV) == "1" if strict_prefix is None else strict_prefix

    def __len__(self) -> int:
        return len(self.entries)

    def has(self, event_id: str) -> bool:
        return event_id in self._positions

    def answered(self, event_id: str) -> bool:
        """An input (user message, injection, background completion) is answered once a final
        assistant message (one that calls no tools) follows it. A turn that failed, was cancelled
        or was cut by a crash after the input was stored is not answered: a retry runs it."""
        position = self._positions.get(event_id)
        if position is None:
            return False
        return any(
            e.kind is EntryKind.ASSISTANT and not any(isinstance(p, ToolCallPart) for p in e.view().parts)
            for e in self.entries[position + 1 :]
        )

    @property
    def next_seq(self) -> int:
        return self.entries[-1].seq + 1 if self.entries else 1

    def append(self, kind: EntryKind, event_id: str, message: Message, run_id: str) -> HistoryEntry | None:
        """Append one entry; None when event_id is already in the log (idempotent retry)."""
        if event_id in self._positions:
            return None
        entry = HistoryEntry(self.next_seq, event_id, kind, run_id, message)
        self._add(entry)
        return entry

    def restore(self, entries: Iterable[HistoryEntry]) -> None:
        """Load persisted entries (startup / eviction reload), in seq order."""
        for entry in entries:
            if entry.event_id not in self._positions:
                self._add(entry)

    def _add(self, entry: HistoryEntry) -> None:
        self._positions[entry.event_id] = len(self.entries)
        self.entries.append(entry)
        self.text_bytes += entry.stored_size()
        if entry.kind is EntryKind.REQUEST_CONTEXT:
            self._latest_context = entry
        elif entry.kind is EntryKind.COMPACTION:
            self._check_pending()  # the projections before the reset, against each other
            self._base = len(self.entries) - 1
            self._base_context = self._latest_context  # kept across the reset
            self._chain, self._projected = [], []  # an explicit prefix reset

    # -- request context: append-only, compared by content ----------------------------------------
    def latest_context_text(self) -> str | None:
        if self._latest_context is None:
            return None
        return _text_of(self._latest_context.message)

    def add_request_context(self, text: str, event_id: str, run_id: str) -> HistoryEntry | None:
        """Append the rendered request context if it differs from the latest one (A→B→A = 3 entries)."""
        if not text or text == self.latest_context_text():
            return None
        return self.append(EntryKind.REQUEST_CONTEXT, event_id, Message(role="user", parts=[TextPart(text=text)]), run_id)

    def compact(self, summary: str, event_id: str, run_id: str) -> HistoryEntry | None:
        text = f"Summary of the conversation so far:\n\n{summary}"
        return self.append(EntryKind.COMPACTION, event_id, Message(role="user", parts=[TextPart(text=text)]), run_id)

    # -- projection ---------------------------------------------------------------------------------
    def project(self) -> Projection:
        """Provider-neutral messages: everything since the latest compaction (which brings along the
        latest request context that preceded it)."""
        window = self.entries[self._base :]
        if window and window[0].kind is EntryKind.COMPACTION and self._base_context is not None:
            window.insert(0, self._base_context)
        self._check_pending()
        if self.strict_prefix:
            self._check_prefix(window)
            return Projection(self.conversation_id, window)
        # The check only logs: it runs after the request built from this projection is on its way
        # (the loop's next pass), not in front of it; still in order with every other projection.
        self._unchecked = window
        try:
            asyncio.get_running_loop().call_soon(self._check_pending)
        except RuntimeError:  # no loop (tools, tests): now
            self._check_pending()
        return Projection(self.conversation_id, window)

    def _check_pending(self) -> None:
        entries, self._unchecked = self._unchecked, None
        if entries is not None:
            self._check_prefix(entries)

    def _check_prefix(self, entries: list[HistoryEntry]) -> None:
        """Extend the prefix chain over this projection and check it extends the previous one.

        Entries are immutable, so the leading run that is the very same entries as last time keeps
        its digests; only the rest is hashed (O(new messages), not O(history)), one at a time, from
        the canonical bytes a stored entry holds (not decoded for it)."""
        previous, prev_entries = self._chain, self._projected
        same = 0
        limit = min(len(entries), len(prev_entries))
        while same < limit and entries[same] is prev_entries[same]:
            same += 1
        chain = hotpath.extend(previous[:same], (e.canonical() for e in entries[same:]))
        if previous and not (chain == previous or hotpath.is_strict_prefix(previous, chain)):
            at = hotpath.common_prefix(previous, chain)
            log.error(
                "provider history is not an extension of the previous one",
                extra={"conversation_id": self.conversation_id, "diverges_at": at},
            )
            if self.strict_prefix:
                raise PrefixViolation(f"conversation {self.conversation_id}: history diverges at message {at}")
        self._chain, self._projected = chain, entries


def text_bytes(message: Message) -> int:
    """The length of the text a message holds, images included (as their base64)."""
    size = 0
    for part in message.parts:
        if isinstance(part, (TextPart, ThinkingPart)):
            size += len(part.text)
        elif isinstance(part, ToolCallPart):
            size += len(part.arguments)
        elif isinstance(part, ToolResultPart):
            size += len(part.content) + sum(len(image.data_base64) for image in part.images)
        elif isinstance(part, ImagePart):
            size += len(part.data_base64)
    return size


def _text_of(message: Message) -> str:
    return "".join(p.text for p in message.parts if isinstance(p, TextPart))
