"""The embedded store's snapshot of the ids it holds (`cursor_byok.store.stored_ids`) is read on a
thread of its own after the store opens; until it is in, every id is "maybe" (read the table), and
once it is, a fresh id is known absent without a read. A test whose assertions depend on which of
the two it meets (a read made or not, a statement traced, memory held) picks one, not the race."""
from __future__ import annotations

import asyncio

import pytest

from cursor_byok.store import Store
from cursor_byok.store.stored_ids import StoredIds


async def snapshots_taken(store: Store) -> None:
    """Once the store has read which ids it holds (on a thread of its own, after opening)."""
    await asyncio.gather(*store._snapshots)


def snapshots_cannot_tell(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every store's snapshot held at "cannot tell", as before it is taken: every id is read."""
    monkeypatch.setattr(StoredIds, "absent", lambda self, stored_id: False)
