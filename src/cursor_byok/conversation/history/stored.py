"""A conversation's entries as read from the store: a few buffers, not objects per entry.

A conversation whose runtime was let go reads its whole history again at its next turn. Read into
one object per entry (the entry, its event id, its stored bytes, its seq), a long history was
thousands of small objects living as long as the runtime, interleaved in the allocator's arenas with
whatever long-lived objects came meanwhile, so the room a reload took stayed. Here the stored
payloads are one bytes object with their offsets, the event ids one more, the run ids one more,
kinds, seqs and runs an array each; an entry is materialised only when a caller asks for it (most
turns ask for the last few). Whether an event id is stored (the idempotency check, a few times a
turn) is looked up in an open-addressed table of entry indexes by the ids' hashes (4 bytes a slot,
twice as many slots as entries), built with the buffers on the store's reader thread without an
object per entry: a lookup reads a slot or two and compares an id or two, not every id.
"""
from __future__ import annotations

from array import array
from collections.abc import Iterable

from ...run import Message
from .entry import EntryKind, HistoryEntry, decode_entry, stored_canonical

KINDS = list(EntryKind)
_KIND_CODES = {kind.value: code for code, kind in enumerate(KINDS)}

Row = tuple[int, str, str, "str | None", bytes]  # (seq, event_id, kind, run_id, payload) as the store reads it


class StoredEntries:
    """Immutable: the stored part of a history never changes (new entries are appended beside it)."""

    __slots__ = ("count", "_payloads", "_payload_starts", "_keys", "_key_starts", "_kinds", "_seqs", "_runs", "_run_starts", "_run_of", "_lookup")

    def __init__(self, rows: Iterable[Row] = ()) -> None:
        payloads, keys, kinds, runs = bytearray(), bytearray(), bytearray(), bytearray()  # no object per row held meanwhile
        payload_starts, key_starts, run_starts = array("q", [0]), array("q", [0]), array("q", [0])
        seqs, run_of, hashes = array("q"), array("l"), array("q")
        last_run = None
        for seq, event_id, kind, run_id, payload in rows:
            payloads += payload
            payload_starts.append(len(payloads))
            hashes.append(hash(event_id))
            keys += event_id.encode()
            key_starts.append(len(keys))
            kinds.append(_KIND_CODES[kind])
            seqs.append(seq)
            if run_id != last_run:  # a run's entries come together
                runs += (run_id or "").encode()
                run_starts.append(len(runs))
                last_run = run_id
            run_of.append(len(run_starts) - 2)
        self._payloads, self._keys, self._kinds, self._runs = bytes(payloads), bytes(keys), bytes(kinds), bytes(runs)
        self._payload_starts, self._key_starts, self._run_starts = payload_starts, key_starts, run_starts
        self._seqs, self._run_of = seqs, run_of
        self._lookup = _table(hashes)
        self.count = len(kinds)  # read as an attribute by the history: no call per length asked

    def __len__(self) -> int:
        return self.count

    def kind(self, index: int) -> EntryKind:
        return KINDS[self._kinds[index]]

    def seq(self, index: int) -> int:
        return self._seqs[index]

    def payload(self, index: int) -> bytes:
        return self._payloads[self._payload_starts[index] : self._payload_starts[index + 1]]

    def event_id(self, index: int) -> str:
        return self._keys[self._key_starts[index] : self._key_starts[index + 1]].decode()

    @property
    def payload_bytes(self) -> int:
        return len(self._payloads)

    def entry(self, index: int) -> HistoryEntry:
        """The index-th entry, made afresh (not decoded: see HistoryEntry)."""
        run = self._run_of[index]
        run_id = self._runs[self._run_starts[run] : self._run_starts[run + 1]].decode()
        return HistoryEntry(self.seq(index), self.event_id(index), self.kind(index), run_id, payload=self.payload(index))

    def view(self, index: int) -> Message:
        """The index-th entry's message, decoded afresh and not kept."""
        return decode_entry(self.payload(index)).message

    def canonical(self, index: int) -> bytes | memoryview:
        return stored_canonical(self.kind(index), self.payload(index))

    def find(self, event_id: str) -> int | None:
        """The index of the entry stored under `event_id`, if any."""
        if not self.count:  # nothing stored (a conversation begun in this process): no id to encode and hash
            return None
        table, starts, needle = self._lookup, self._key_starts, event_id.encode()
        mask = len(table) - 1
        at = hash(event_id) & mask
        while slot := table[at]:  # 0: an empty slot, the end of the probe
            if self._keys[starts[slot - 1] : starts[slot]] == needle:
                return slot - 1
            at = (at + 1) & mask
        return None

    def last_of(self, kind: EntryKind, stop: int | None = None) -> int | None:
        """The index of the last entry of `kind` before `stop` (default: all), if any."""
        at = self._kinds.rfind(bytes((KINDS.index(kind),)), 0, self.count if stop is None else stop)
        return None if at < 0 else at


def _table(hashes: array[int]) -> array[int]:
    """Entry index + 1 by the id's hash (this process's: the table lives here), probing linearly
    past taken slots; a power of two at least twice the entries, so a probe ends within a slot or two."""
    size = 1
    while size < 2 * len(hashes) or size < 2:
        size *= 2
    table, mask = array("I", bytes(4 * size)), size - 1
    for index, value in enumerate(hashes):
        at = value & mask
        while table[at]:
            at = (at + 1) & mask
        table[at] = index + 1
    return table


EMPTY = StoredEntries()
