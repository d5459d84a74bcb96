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
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

import msgspec

from ... import hotpath
from ...run import ContextEstimator, KeyedMessages, Message, TextPart, ToolCallPart
from .entry import EntryKind, HistoryEntry
from .stored import EMPTY, StoredEntries

log = logging.getLogger("cursor_byok.history")

STRICT_PREFIX_ENV = "CURSOR_BYOK_STRICT_PREFIX"
DIGEST = hotpath.DIGEST_SIZE


def strict_prefix_checks() -> bool:
    """Whether a prefix violation raises (tests), as the environment says."""
    return os.environ.get(STRICT_PREFIX_ENV) == "1"


class PrefixViolation(AssertionError):
    """The new provider history does not extend the previous one (without a compaction)."""


class Appended:
    """The entries appended to a history since it was read, in order. Only ever appended to, so a
    window holds a range of it rather than a copy, and two windows over the same range hold the very
    same entries."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[HistoryEntry] = ()) -> None:
        self._entries: list[HistoryEntry] = list(entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, index: int) -> HistoryEntry:
        return self._entries[index]

    def append(self, entry: HistoryEntry) -> None:
        self._entries.append(entry)


class Window(Sequence[HistoryEntry]):
    """Entries of a history in order: a request context a compaction kept (if any), a run of stored
    entries, then a run of the entries appended since the history was read. Two windows of one
    history share their leading entries when they have the same context, the same stored run and
    the same start in the appended entries (`common`), without an object or a step per entry."""

    __slots__ = ("context", "stored", "first", "stop", "added", "added_first", "added_stop")

    def __init__(self, added: Appended | list[HistoryEntry], stored: StoredEntries = EMPTY, first: int = 0, stop: int | None = None,
                 context: HistoryEntry | None = None, added_first: int = 0, added_stop: int | None = None) -> None:
        self.context = context
        self.stored, self.first, self.stop = stored, first, stored.count if stop is None else stop
        self.added = added if isinstance(added, Appended) else Appended(added)
        self.added_first, self.added_stop = added_first, len(self.added._entries) if added_stop is None else added_stop

    def __len__(self) -> int:
        return (self.context is not None) + self.stop - self.first + self.added_stop - self.added_first

    def _locate(self, index: int) -> tuple[HistoryEntry | None, int]:
        """(the entry, if it is an object) or (None, its index in the stored entries)."""
        if index < 0:
            index += len(self)
        if self.context is not None:
            if index == 0:
                return self.context, 0
            index -= 1
        if 0 <= index < self.stop - self.first:
            return None, self.first + index
        index -= self.stop - self.first
        if not 0 <= index < self.added_stop - self.added_first:
            raise IndexError(index)
        return self.added._entries[self.added_first + index], 0  # the list itself: a call less per entry read

    @overload
    def __getitem__(self, index: int) -> HistoryEntry: ...
    @overload
    def __getitem__(self, index: slice) -> Window: ...
    def __getitem__(self, index: int | slice) -> HistoryEntry | Window:
        if isinstance(index, slice):
            return self._slice(index)
        entry, at = self._locate(index)
        return entry if entry is not None else self.stored.entry(at)

    def _slice(self, index: slice) -> Window:
        start, stop, step = index.indices(len(self))
        if step != 1:
            raise ValueError("a window is sliced in order")
        stop = max(stop, start)
        context = self.context if self.context is not None and start == 0 < stop else None
        offset = self.context is not None
        start, stop = max(start - offset, 0), max(stop - offset, 0)
        count = self.stop - self.first
        return Window(self.added, self.stored, self.first + min(start, count), self.first + min(stop, count), context,
                      self.added_first + max(start - count, 0), self.added_first + max(stop - count, 0))

    def message(self, index: int) -> Message:
        """The index-th message: an object's, or a stored one decoded afresh and not kept."""
        entry, at = self._locate(index)
        return entry.view() if entry is not None else self.stored.view(at)

    def kind(self, index: int) -> EntryKind:
        entry, at = self._locate(index)
        return entry.kind if entry is not None else self.stored.kind(at)

    def canonical(self, index: int) -> bytes | memoryview:
        entry, at = self._locate(index)
        return entry.canonical() if entry is not None else self.stored.canonical(at)

    def key(self, index: int) -> str:
        entry, at = self._locate(index)
        return entry.event_id if entry is not None else self.stored.event_id(at)

    def common(self, other: Window | None) -> int:
        """How many leading entries are the very same in both windows (of one history)."""
        if other is None or self.context is not other.context:
            return 0
        same = int(self.context is not None)
        mine, theirs = self.stop - self.first, other.stop - other.first
        if mine or theirs:
            if other.stored is not self.stored or other.first != self.first:
                return same
            if mine != theirs:
                return same + min(mine, theirs)
        same += mine
        if other.added is not self.added or other.added_first != self.added_first:
            return same
        return same + min(self.added_stop, other.added_stop) - self.added_first

    def holding(self, message: Message) -> int | None:
        """The index of the entry whose decoded message is this very object (only an object's can be)."""
        if self.context is not None and self.context.holds(message):
            return 0
        offset = (self.context is not None) + self.stop - self.first
        return next((offset + i - self.added_first for i in range(self.added_first, self.added_stop) if self.added[i].holds(message)), None)


class Projection(KeyedMessages):
    """The messages of one projection, read from their entries as they are asked for (a stored
    entry is decoded for the reader and not kept). Each message's key, its entry's event id within
    the conversation (the source), names the same bytes for as long as the server runs: history
    messages are immutable, so an adapter may keep their encoding by it across a reload."""

    __slots__ = ("conversation_id", "entries", "_count")

    def __init__(self, conversation_id: str, entries: Window | list[HistoryEntry]) -> None:
        self.conversation_id = conversation_id
        self.entries = entries if isinstance(entries, Window) else Window(entries)
        self._count = len(self.entries)  # its window does not change: asked several times per request built

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Projection: ...
    def __getitem__(self, index: int | slice) -> Message | Projection:
        if isinstance(index, slice):
            return Projection(self.conversation_id, self.entries[index])
        return self.entries.message(index)

    def __iter__(self) -> Iterator[Message]:
        entries = self.entries
        return (entries.message(index) for index in range(len(entries)))

    def source(self) -> str:
        return self.conversation_id

    def key(self, index: int) -> str:
        entry, at = self.entries._locate(index)  # the window's `key`, a call less per message keyed
        return entry.event_id if entry is not None else self.entries.stored.event_id(at)

    def with_text(self, index: int) -> tuple[Message, msgspec.Raw | None]:
        entry, at = self.entries._locate(index)
        if entry is None:  # a stored entry's bytes: maybe another version's escaping
            return self.entries.stored.view(at), None
        return entry.view(), entry.text_json()


class ConversationHistory:
    def __init__(self, conversation_id: str, *, strict_prefix: bool | None = None) -> None:
        self.conversation_id = conversation_id
        self._stored = EMPTY  # the entries read from the store, in one buffer (see stored.py)
        self._added = Appended()  # the entries appended since
        self._positions: dict[str, int] = {}  # event_id → index, of the appended entries
        self._base = 0  # index of the latest compaction entry (the projection starts there)
        self._latest_context: HistoryEntry | None = None
        self._base_context: HistoryEntry | None = None  # the request context a compaction kept
        self._chain = b""  # prefix chain of the last projection: its digests end to end
        self._projected: Window | None = None  # the last projection's entries
        self._unchecked: Window | None = None  # a projection whose check waits for the loop's next pass
        self.text_bytes = 0  # what its messages' text holds: most of what a history keeps in memory
        self.context_size = ContextEstimator()  # its projection's size, summed as it grows (see the run engine)
        self.strict_prefix = strict_prefix_checks() if strict_prefix is None else strict_prefix

    def __len__(self) -> int:
        return self._stored.count + len(self._added._entries)  # the lists' lengths: no call of theirs

    @property
    def stored_count(self) -> int:
        """How many entries were read from the store (the rest were appended since)."""
        return self._stored.count

    @property
    def entries(self) -> Window:
        """Every entry in order (a stored one is made when asked for)."""
        return Window(self._added, self._stored)

    def last(self) -> HistoryEntry | None:
        """The newest entry (a stored one is made when asked for)."""
        if self._added._entries:
            return self._added._entries[-1]
        count = self._stored.count
        return self._stored.entry(count - 1) if count else None

    def _index(self, event_id: str) -> int | None:
        position = self._positions.get(event_id)
        return position if position is not None else self._stored.find(event_id)

    def has(self, event_id: str) -> bool:
        # Asked a few times per turn: nothing stored (a conversation begun here) asks no more than the dict.
        return event_id in self._positions or (self._stored.count > 0 and self._stored.find(event_id) is not None)

    def answered(self, event_id: str) -> bool:
        """An input (user message, injection, background completion) is answered once a final
        assistant message (one that calls no tools) follows it. A turn that failed, was cancelled
        or was cut by a crash after the input was stored is not answered: a retry runs it."""
        position = self._index(event_id)
        if position is None:
            return False
        entries = self.entries
        return any(
            entries.kind(i) is EntryKind.ASSISTANT and not any(isinstance(p, ToolCallPart) for p in entries.message(i).parts)
            for i in range(position + 1, len(entries))
        )

    @property
    def next_seq(self) -> int:
        added, count = self._added._entries, self._stored.count
        if added:
            return added[-1].seq + 1
        return self._stored.seq(count - 1) + 1 if count else 1

    def append(self, kind: EntryKind, event_id: str, message: Message, run_id: str) -> HistoryEntry | None:
        """Append one entry; None when event_id is already in the log (idempotent retry)."""
        if self.has(event_id):
            return None
        entry = HistoryEntry(self.next_seq, event_id, kind, run_id, message)
        self._add(entry)
        return entry

    def restore(self, stored: StoredEntries) -> None:
        """Load the persisted entries (startup / eviction reload), before anything is appended."""
        if len(self):
            raise ValueError("a history is read from the store before anything is appended to it")
        self._stored = stored
        self.text_bytes = stored.payload_bytes
        context = stored.last_of(EntryKind.REQUEST_CONTEXT)
        self._latest_context = None if context is None else stored.entry(context)
        compaction = stored.last_of(EntryKind.COMPACTION)
        if compaction is not None:
            self._base = compaction
            kept = stored.last_of(EntryKind.REQUEST_CONTEXT, compaction)
            self._base_context = None if kept is None else stored.entry(kept)

    def _add(self, entry: HistoryEntry) -> None:
        self._positions[entry.event_id] = len(self)
        self._added.append(entry)
        self.text_bytes += entry.stored_size()
        if entry.kind is EntryKind.REQUEST_CONTEXT:
            self._latest_context = entry
        elif entry.kind is EntryKind.COMPACTION:
            self._check_pending()  # the projections before the reset, against each other
            self._base = len(self) - 1
            self._base_context = self._latest_context  # kept across the reset
            self._chain, self._projected = b"", None  # an explicit prefix reset
            self.context_size.reset()

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
        stored, base = self._stored.count, self._base
        window = Window(self._added, self._stored, min(base, stored), added_first=max(base - stored, 0))
        if self._base_context is not None and window and window.kind(0) is EntryKind.COMPACTION:
            window.context = self._base_context
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

    def _check_prefix(self, entries: Window) -> None:
        """Extend the prefix chain over this projection and check it extends the previous one.

        Entries are immutable, so the leading run that is the very same entries as last time keeps
        its digests; only the rest is hashed (O(new messages), not O(history)), one at a time, from
        the canonical bytes a stored entry holds (not decoded for it). The digests are kept end to
        end in one bytes object: the chain extends the previous one when it starts with it."""
        previous = self._chain
        growing = bytearray(previous[: entries.common(self._projected) * DIGEST])  # extended in place: linear
        for start in range(len(growing) // DIGEST, len(entries), _CHAIN_STEP):  # a reloaded history: a step at a time, not a digest object per entry at once
            seed = [bytes(growing[-DIGEST:])] if growing else []
            digests = hotpath.extend(seed, (entries.canonical(i) for i in range(start, min(start + _CHAIN_STEP, len(entries)))))
            growing += b"".join(digests[1:] if seed else digests)
        chain = bytes(growing)
        if not chain.startswith(previous):
            at = hotpath.common_prefix(_digests(previous), _digests(chain))
            log.error(
                "provider history is not an extension of the previous one",
                extra={"conversation_id": self.conversation_id, "diverges_at": at},
            )
            if self.strict_prefix:
                raise PrefixViolation(f"conversation {self.conversation_id}: history diverges at message {at}")
        self._chain, self._projected = chain, entries


_CHAIN_STEP = 32


def _digests(chain: bytes) -> list[bytes]:
    return [chain[i : i + DIGEST] for i in range(0, len(chain), DIGEST)]


def _text_of(message: Message) -> str:
    return "".join(p.text for p in message.parts if isinstance(p, TextPart))
