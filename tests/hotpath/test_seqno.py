"""append_seqno reorder buffer on both implementations, then twin == compiled on push sequences."""
from __future__ import annotations

import gc
import random
import weakref
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cursor_byok.hotpath import NegativeSeqno, SeqnoError, SeqnoOutOfWindow

from .conftest import BOUNDED, SOAK, outcome, twin_and_compiled


def test_in_order_items_are_delivered_immediately(seqno: ModuleType) -> None:
    buffer = seqno.ReorderBuffer()
    assert buffer.push(0, "a") == ["a"]
    assert buffer.push(1, "b") == ["b"]
    assert (buffer.next_seqno, buffer.held, buffer.duplicates) == (2, 0, 0)


def test_gap_is_held_until_filled(seqno: ModuleType) -> None:
    buffer = seqno.ReorderBuffer()
    assert buffer.push(2, "c") == []
    assert buffer.push(1, "b") == []
    assert buffer.held == 2
    assert buffer.push(0, "a") == ["a", "b", "c"]
    assert (buffer.next_seqno, buffer.held) == (3, 0)


def test_release_stops_at_the_next_gap(seqno: ModuleType) -> None:
    buffer = seqno.ReorderBuffer(8)
    for s in (1, 3, 4):
        assert buffer.push(s, s) == []
    assert buffer.push(0, 0) == [0, 1]
    assert buffer.held == 2
    assert buffer.push(2, 2) == [2, 3, 4]


def test_start_sets_the_first_expected_seqno(seqno: ModuleType) -> None:
    buffer = seqno.ReorderBuffer(window=4, start=10)
    assert buffer.next_seqno == 10
    assert buffer.push(9, "old") == []
    assert buffer.duplicates == 1
    assert buffer.push(11, "b") == []
    assert buffer.push(10, "a") == ["a", "b"]


def test_duplicates_of_delivered_and_held_seqnos_are_dropped(seqno: ModuleType) -> None:
    buffer = seqno.ReorderBuffer()
    buffer.push(0, "a")
    assert buffer.push(0, "again") == []
    buffer.push(2, "c")
    assert buffer.push(2, "c-again") == []
    assert buffer.duplicates == 2
    assert buffer.push(1, "b") == ["b", "c"]  # the first copy of a held seqno wins


def test_seqno_at_the_window_edge(seqno: ModuleType) -> None:
    buffer = seqno.ReorderBuffer(window=4)
    assert buffer.push(3, "last slot") == []
    with pytest.raises(SeqnoOutOfWindow) as info:
        buffer.push(4, "too far")
    assert info.value.code == "resource_exhausted"
    assert str(info.value) == "seqno 4 is outside the reorder window [0, 4)"
    assert buffer.held == 1  # a rejected push changes nothing


def test_window_moves_with_delivery(seqno: ModuleType) -> None:
    buffer = seqno.ReorderBuffer(window=2)
    for s in range(100):
        assert buffer.push(s, s) == [s]
    assert buffer.push(101, 101) == []
    with pytest.raises(SeqnoOutOfWindow):
        buffer.push(102, 102)


def test_window_of_one_accepts_only_the_next(seqno: ModuleType) -> None:
    buffer = seqno.ReorderBuffer(window=1)
    with pytest.raises(SeqnoOutOfWindow):
        buffer.push(1, "x")
    assert buffer.push(0, "a") == ["a"]


@pytest.mark.parametrize("value", [-1, -(2**70)])
def test_negative_seqno_is_rejected(seqno: ModuleType, value: int) -> None:
    with pytest.raises(NegativeSeqno) as info:
        seqno.ReorderBuffer().push(value, "x")
    assert info.value.code == "invalid_argument"
    assert isinstance(info.value, SeqnoError)
    assert str(info.value) == f"seqno {value} is negative"


def test_seqno_beyond_64_bits_is_out_of_window(seqno: ModuleType) -> None:
    with pytest.raises(SeqnoOutOfWindow):
        seqno.ReorderBuffer().push(2**70, "x")


def test_seqno_must_be_an_integer(seqno: ModuleType) -> None:
    with pytest.raises(TypeError):
        seqno.ReorderBuffer().push(1.0, "x")
    with pytest.raises(TypeError):
        seqno.ReorderBuffer().push("1", "x")


@pytest.mark.parametrize(("window", "start"), [(0, 0), (-1, 0), (4, -1)])
def test_bad_construction_is_rejected(seqno: ModuleType, window: int, start: int) -> None:
    with pytest.raises(ValueError):
        seqno.ReorderBuffer(window, start)


def test_none_and_repeated_objects_are_valid_items(seqno: ModuleType) -> None:
    buffer = seqno.ReorderBuffer()
    shared = object()
    assert buffer.push(1, None) == []
    assert buffer.push(2, shared) == []
    assert buffer.push(0, shared) == [shared, None, shared]


def test_held_items_are_released_with_the_buffer(seqno: ModuleType) -> None:
    class Item:
        pass

    buffer = seqno.ReorderBuffer()
    item = Item()
    ref = weakref.ref(item)
    buffer.push(5, item)
    del item
    assert ref() is not None
    del buffer
    gc.collect()
    assert ref() is None


def test_cycle_through_a_held_item_is_collected(seqno: ModuleType) -> None:
    class Item:
        owner: object = None

    buffer = seqno.ReorderBuffer()
    item = Item()
    item.owner = buffer
    ref = weakref.ref(item)
    buffer.push(3, item)
    del item, buffer
    gc.collect()
    assert ref() is None


def test_delivered_items_are_not_retained(seqno: ModuleType) -> None:
    class Item:
        pass

    buffer = seqno.ReorderBuffer()
    item = Item()
    ref = weakref.ref(item)
    buffer.push(1, item)
    buffer.push(0, "head")
    del item
    gc.collect()
    assert ref() is None


def test_block_shuffled_stream_comes_out_in_order(seqno: ModuleType) -> None:
    rng = random.Random(3)
    order: list[int] = []
    for base in range(0, 10_000, 64):
        block = list(range(base, min(base + 64, 10_000)))
        rng.shuffle(block)
        order.extend(block)
    buffer = seqno.ReorderBuffer(64)
    delivered: list[object] = []
    for s in order:
        delivered.extend(buffer.push(s, s))
    assert delivered == list(range(10_000))
    assert buffer.held == 0


# --- twin == compiled ---------------------------------------------------------------------------


def push_plan(data: st.DataObject) -> tuple[int, int, list[int]]:
    window = data.draw(st.sampled_from([1, 2, 3, 8, 64]))
    start = data.draw(st.sampled_from([0, 1, 1000]))
    count = data.draw(st.integers(0, 100))
    order = list(range(start, start + count))
    # Shuffle within blocks of the window so most pushes are legal.
    shuffled: list[int] = []
    for base in range(0, count, window):
        block = order[base : base + window]
        shuffled.extend(data.draw(st.permutations(block)))
    plan: list[int] = []
    for s in shuffled:
        plan.append(s)
        noise = data.draw(
            st.sampled_from(["none"] * 6 + ["dup", "old", "far", "negative", "huge", "edge"])
        )
        if noise == "dup":
            plan.append(s)
        elif noise == "old":
            plan.append(data.draw(st.integers(0, max(start, s))))
        elif noise == "far":
            plan.append(s + data.draw(st.integers(window, 3 * window)))
        elif noise == "negative":
            plan.append(data.draw(st.integers(-(2**70), -1)))
        elif noise == "huge":
            plan.append(data.draw(st.integers(2**62, 2**80)))
        elif noise == "edge":
            plan.append(s + window - 1)
    return window, start, plan


def push_trace(module: ModuleType, window: int, start: int, plan: list[int]) -> list[object]:
    buffer = module.ReorderBuffer(window, start)
    trace: list[object] = []
    for s in plan:
        trace.append(outcome(lambda: buffer.push(s, ("item", s))))
        trace.append((buffer.next_seqno, buffer.held, buffer.duplicates))
    return trace


def check_push_sequences(data: st.DataObject) -> None:
    twin, compiled = twin_and_compiled("seqno")
    window, start, plan = push_plan(data)
    expected = push_trace(twin, window, start, plan)
    assert push_trace(compiled, window, start, plan) == expected
    delivered = [item for entry in expected[::2] if entry[0] == "ok" for item in entry[1]]
    seqnos = [s for _, s in delivered]
    assert seqnos == list(range(start, start + len(seqnos)))


@BOUNDED
@given(st.data())
def test_twins_agree_on_push_sequences(data: st.DataObject) -> None:
    check_push_sequences(data)


@pytest.mark.soak
@pytest.mark.timeout(1800)
@SOAK
@given(st.data())
def test_soak_twins_agree_on_push_sequences(data: st.DataObject) -> None:
    check_push_sequences(data)
