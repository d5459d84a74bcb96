"""History-prefix hash chain, pure-Python twin of ext/prefix.pyx (the oracle in property tests).

Construction (version 2), over a sequence of canonical history items (bytes):

    d_0 = 32 zero bytes
    d_i = SHA-256( TAG || d_{i-1} || u64_be(len(item_i)) || item_i )

with TAG = b"cbyok-prefix-v2" zero-padded to one 64-byte SHA-256 block. `chain(items)` returns
[d_1, ..., d_n]. The tag separates these digests from any other SHA-256 use; the length field
makes the item boundaries unambiguous. Because d_i commits to d_{i-1}, equal digests at index i
mean (barring a SHA-256 collision) equal histories up to and including item i, so the longest
common prefix of two chains is found by binary search over a single digest comparison per step,
and "old history is a prefix of the new one" is one comparison. The digests are never stored.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["DIGEST_SIZE", "TAG", "chain", "common_prefix", "extend", "is_strict_prefix"]

DIGEST_SIZE = 32
TAG = b"cbyok-prefix-v2".ljust(64, b"\0")
_ZERO = bytes(DIGEST_SIZE)
# The tag's block is hashed once; copying that state is cheaper than hashing it per item.
_BASE = hashlib.sha256(TAG)


def _continue(prev: bytes, items: Iterable[bytes], out: list[bytes]) -> list[bytes]:
    base_copy = _BASE.copy
    for item in items:
        view = memoryview(item)
        h = base_copy()
        h.update(prev + view.nbytes.to_bytes(8, "big"))
        h.update(view)
        prev = h.digest()
        out.append(prev)
    return out


def _check_digest(digest: bytes) -> bytes:
    if len(digest) != DIGEST_SIZE:
        raise ValueError(f"chain digests must be {DIGEST_SIZE} bytes, got {len(digest)}")
    return bytes(digest)


def chain(items: Iterable[bytes]) -> list[bytes]:
    """One digest per item; digest i commits to items[0..i]."""
    return _continue(_ZERO, items, [])


def extend(chain: list[bytes], items: Iterable[bytes]) -> list[bytes]:
    """A new list: `chain` followed by the digests of `items` continuing from chain[-1]."""
    prev = _check_digest(chain[-1]) if chain else _ZERO
    return _continue(prev, items, list(chain))


def common_prefix(a: list[bytes], b: list[bytes]) -> int:
    """Number of leading items two chains share (binary search on digest equality)."""
    lo = 0
    hi = min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[mid - 1] == b[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def is_strict_prefix(old: list[bytes], new: list[bytes]) -> bool:
    """True if history `old` is a proper prefix of history `new` (same items, then more)."""
    n = len(old)
    return n < len(new) and (n == 0 or new[n - 1] == old[n - 1])
