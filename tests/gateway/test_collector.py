"""The server's garbage collector after start-up: collections rare enough that a run start does not
pay for them (a turn's objects are freed by reference counting, not by the collector)."""
from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from cursor_byok.gateway.memory import YOUNG_COLLECTION_ALLOCATIONS, freeze_startup_objects


@pytest.fixture
def collector() -> Iterator[None]:
    thresholds, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    if not enabled:
        gc.disable()


def allocate(count: int) -> tuple[list[list[object]], list[int]]:
    """`count` container objects kept alive, and the generation of every collection that started
    meanwhile."""
    collections: list[int] = []

    def started(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(started)
    try:
        kept: list[list[object]] = [[] for _ in range(count)]
    finally:
        gc.callbacks.remove(started)
    return kept, collections


def test_after_start_up_a_young_collection_waits_for_many_allocations(collector: None) -> None:
    freeze_startup_objects()
    gc.collect()  # count from an empty young generation
    kept, collections = allocate(YOUNG_COLLECTION_ALLOCATIONS - 1_000)  # a few dozen run starts' worth
    assert len(kept) > 5_000 and collections == []


def test_collections_still_run(collector: None) -> None:
    freeze_startup_objects()
    kept, collections = allocate(3 * YOUNG_COLLECTION_ALLOCATIONS)
    assert len(kept) and collections


def test_a_middle_collection_waits_for_many_young_ones(collector: None) -> None:
    """Runs that are live through a young collection are walked again by the next middle one: it
    waits long enough that most of them have ended by then (and their objects are gone)."""
    freeze_startup_objects()
    gc.collect()
    kept, collections = allocate(15 * YOUNG_COLLECTION_ALLOCATIONS)  # objects that outlive young passes
    assert len(kept) and collections.count(0) >= 10 and set(collections) == {0}
