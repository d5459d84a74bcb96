"""Which ids of one kind (request ids bound, conversations) the embedded store may hold, known
without a read: the hashes of those stored when it looked (a sorted array, 8 bytes each) and of
those this process has queued since. An id in neither is certainly not stored, so a new turn's
fresh request id and new conversation cost no read on the loop; any other answer is "maybe", and
the caller reads the table as before (a hash shared by two ids only sends one more to the table).

Exact because only this process writes its database (it holds the data dir's lease): every row
that was not there when the table was read has been queued here since. A PostgreSQL store (other
servers write it) and a read-only one never hold a snapshot. Ids of rows since deleted stay in it:
they cost a read, nothing else.

A snapshot is read on a thread and connection of its own (`read_snapshot`): the store's opening
does not wait for it (a hundred thousand ids take ~0.2 s), nor do the loop's reads, as they would
behind the reader thread; until the first is in, every id is "maybe". The ids queued since are a
set that grows by one per turn: past `SINCE_LIMIT` the table is read again (after a flush, so that
everything queued before the read began is in it) and the set starts over; until that read is in,
both sets are asked.

A store holding more than `SNAPSHOT_CAP` ids of a kind keeps no snapshot of them (every id is
"maybe" from then on, as on PostgreSQL): what a start holds and reads for it stops growing there
(at 8 bytes an id, ~0.4 MiB), as every start-up cost must with the history's length.
"""
from __future__ import annotations

from array import array
from bisect import bisect_left
from pathlib import Path

from .connection import connect
from .records import Synchronous

# Ids queued since the snapshot beyond which it is taken again (~40 bytes each in the set).
SINCE_LIMIT = 20_000
# Ids of a kind beyond which none is kept (a snapshot's read stops one past it).
SNAPSHOT_CAP = 50_000


class StoredIds:
    __slots__ = ("_before", "_kept", "_retiring", "_since", "ready")

    def __init__(self, *, kept: bool = True) -> None:
        """`kept` False: a store that never takes snapshots (every id is "maybe") keeps nothing."""
        self._kept = kept
        self._before = array("q")  # sorted hashes of the ids stored at the snapshot
        self._since: set[int] = set()  # hashes of the ids queued since the snapshot began
        self._retiring: set[int] = set()  # the previous `_since`, while a new snapshot is read
        self.ready = False  # a snapshot is in: `absent` may answer True

    def queued(self, stored_id: str) -> bool:
        """Note an id queued for storing; True: take a new snapshot (the ids queued since the last
        are too many: they are kept, and asked, until `loaded` gives the new one)."""
        if not self._kept:
            return False
        since = self._since
        since.add(hash(stored_id))
        if len(since) <= SINCE_LIMIT or self._retiring:
            return False
        self._retiring, self._since = since, set()
        return True

    def absent(self, stored_id: str) -> bool:
        """True: certainly not stored (nor queued). False: maybe (read the table)."""
        if not self.ready:
            return False
        key = hash(stored_id)
        if key in self._since or key in self._retiring:
            return False
        before = self._before
        i = bisect_left(before, key)
        return i == len(before) or before[i] != key

    def loaded(self, hashes: array[int] | None) -> None:
        """The snapshot (`read_snapshot`), read after every id queued before `queued` asked for it had
        committed; None: the ids are past the cap, and nothing is kept from now on."""
        self._retiring = set()
        if hashes is None:
            self._kept, self._before, self._since, self.ready = False, array("q"), set(), False
            return
        self._before = hashes
        self.ready = True


def read_snapshot(path: Path, sql: str) -> array[int] | None:
    """The sorted hashes of the ids `sql` selects, as `StoredIds.loaded` takes them (on a thread);
    None past `SNAPSHOT_CAP`."""
    conn = connect(path, synchronous=Synchronous.NORMAL, busy_timeout_ms=5_000, read_only=True)
    try:
        hashes = array("q", sorted(hash(row[0]) for row in conn.execute(f"{sql} LIMIT {SNAPSHOT_CAP + 1}")))
    finally:
        conn.close()
    return hashes if len(hashes) <= SNAPSHOT_CAP else None
