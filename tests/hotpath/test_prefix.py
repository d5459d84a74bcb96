"""History-prefix hash chain on both implementations, then twin == compiled."""
from __future__ import annotations

import hashlib
import os
import struct
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cursor_byok import hotpath

from .conftest import BOUNDED, SOAK, twin_and_compiled


def reference_chain(items: list[bytes]) -> list[bytes]:
    """The documented construction (version 2), spelled out with hashlib in one call per item."""
    tag = b"cbyok-prefix-v2".ljust(64, b"\0")
    prev = bytes(32)
    out = []
    for item in items:
        prev = hashlib.sha256(tag + prev + struct.pack(">Q", len(item)) + item).digest()
        out.append(prev)
    return out


def test_digest_size(prefix: ModuleType) -> None:
    assert prefix.DIGEST_SIZE == hotpath.DIGEST_SIZE == 32


@pytest.mark.parametrize(
    "sizes", [[], [0], [1, 2, 3], [23, 24, 25, 55, 56, 57, 63, 64, 65, 127, 128, 129], [2047, 2048, 2049, 4095, 4096, 4097], [100_000]]
)
def test_chain_matches_the_documented_construction(prefix: ModuleType, sizes: list[int]) -> None:
    items = [os.urandom(n) for n in sizes]
    digests = prefix.chain(items)
    assert digests == reference_chain(items)
    assert all(type(d) is bytes and len(d) == 32 for d in digests)


def test_known_answer(prefix: ModuleType) -> None:
    # Pins the construction itself: a change of format must be a deliberate version bump.
    assert prefix.chain([b"a", b"bc"])[1].hex() == (
        "bcad4774bca0f93880a87746af7997c2bc73b6f693dd80ce07e67336d1e6dce0"
    )


def test_chain_accepts_any_bytes_like_and_iterables(prefix: ModuleType) -> None:
    expected = prefix.chain([b"ab", b"cd"])
    assert prefix.chain([bytearray(b"ab"), memoryview(b"cd")]) == expected
    assert prefix.chain(x for x in [b"ab", b"cd"]) == expected


def test_chain_rejects_text(prefix: ModuleType) -> None:
    with pytest.raises(TypeError):
        prefix.chain(["text"])


def test_item_boundaries_matter(prefix: ModuleType) -> None:
    assert prefix.chain([b"ab", b"c"])[-1] != prefix.chain([b"a", b"bc"])[-1]
    assert prefix.chain([b"", b"x"])[-1] != prefix.chain([b"x"])[-1]


def test_extend_continues_the_chain_in_a_new_list(prefix: ModuleType) -> None:
    items = [b"one", b"two", b"three", b"four"]
    head = prefix.chain(items[:2])
    extended = prefix.extend(head, items[2:])
    assert extended == prefix.chain(items)
    assert len(head) == 2  # the input list is not modified
    assert prefix.extend([], items) == prefix.chain(items)
    assert prefix.extend(head, []) == head and prefix.extend(head, []) is not head


def test_extend_rejects_a_malformed_digest(prefix: ModuleType) -> None:
    with pytest.raises(ValueError):
        prefix.extend([b"short"], [b"x"])


def test_common_prefix_counts_shared_leading_items(prefix: ModuleType) -> None:
    a = prefix.chain([b"1", b"2", b"3", b"4"])
    b = prefix.chain([b"1", b"2", b"X", b"4"])
    assert prefix.common_prefix(a, b) == 2
    assert prefix.common_prefix(a, a) == 4
    assert prefix.common_prefix(a, a[:1]) == 1
    assert prefix.common_prefix([], a) == 0
    assert prefix.common_prefix(a, prefix.chain([b"0"])) == 0


def test_is_strict_prefix(prefix: ModuleType) -> None:
    history = prefix.chain([b"u", b"a", b"u2"])
    assert prefix.is_strict_prefix([], history)
    assert prefix.is_strict_prefix(history[:2], history)
    assert not prefix.is_strict_prefix(history, history)
    assert not prefix.is_strict_prefix(history, history[:2])
    assert not prefix.is_strict_prefix([], [])
    edited = prefix.chain([b"u", b"edited", b"u2", b"a2"])
    assert not prefix.is_strict_prefix(history[:2], edited)


def test_long_history_prefix_checks(prefix: ModuleType) -> None:
    items = [i.to_bytes(4, "big") * 8 for i in range(10_000)]
    history = prefix.chain(items)
    grown = prefix.extend(history, [b"next"])
    assert prefix.is_strict_prefix(history, grown)
    assert prefix.common_prefix(history, grown) == 10_000
    forked = prefix.extend(history[:6000], [b"fork"] + items[6001:])
    assert prefix.common_prefix(history, forked) == 6000
    assert not prefix.is_strict_prefix(history, forked + [b"\0" * 32])


# --- twin == compiled ---------------------------------------------------------------------------

items_strategy = st.lists(st.binary(max_size=300), max_size=20)


def check_chains(data: st.DataObject) -> None:
    twin, compiled = twin_and_compiled("prefix")
    items = data.draw(items_strategy)
    expected = twin.chain(items)
    assert compiled.chain(items) == expected == reference_chain(items)
    split = data.draw(st.integers(0, len(items)))
    assert compiled.extend(expected[:split], items[split:]) == expected
    other_items = items[: data.draw(st.integers(0, len(items)))] + data.draw(items_strategy)
    other = twin.chain(other_items)
    assert compiled.common_prefix(expected, other) == twin.common_prefix(expected, other)
    assert compiled.is_strict_prefix(expected, other) == twin.is_strict_prefix(expected, other)
    assert compiled.is_strict_prefix(other, expected) == twin.is_strict_prefix(other, expected)
    shared = 0
    while shared < min(len(items), len(other_items)) and items[shared] == other_items[shared]:
        shared += 1
    assert twin.common_prefix(expected, other) == shared


def check_arbitrary_digest_lists(data: st.DataObject) -> None:
    # Not real chains: the binary search must still be the same search in both.
    twin, compiled = twin_and_compiled("prefix")
    pool = data.draw(st.lists(st.binary(min_size=32, max_size=32), min_size=1, max_size=4))
    a = data.draw(st.lists(st.sampled_from(pool), max_size=30))
    b = data.draw(st.lists(st.sampled_from(pool), max_size=30))
    assert compiled.common_prefix(a, b) == twin.common_prefix(a, b)
    assert compiled.is_strict_prefix(a, b) == twin.is_strict_prefix(a, b)


@BOUNDED
@given(st.data())
def test_twins_agree_on_chains(data: st.DataObject) -> None:
    check_chains(data)


@BOUNDED
@given(st.data())
def test_twins_agree_on_arbitrary_digest_lists(data: st.DataObject) -> None:
    check_arbitrary_digest_lists(data)


@pytest.mark.soak
@pytest.mark.timeout(1800)
@SOAK
@given(st.data())
def test_soak_twins_agree_on_chains(data: st.DataObject) -> None:
    check_chains(data)


@pytest.mark.soak
@pytest.mark.timeout(1800)
@SOAK
@given(st.data())
def test_soak_twins_agree_on_arbitrary_digest_lists(data: st.DataObject) -> None:
    check_arbitrary_digest_lists(data)
