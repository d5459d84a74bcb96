# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, binding=False, auto_pickle=False
"""History-prefix hash chain, compiled (twin: cursor_byok.hotpath.prefix_py).

Construction (version 2), over a sequence of canonical history items (bytes):

    d_0 = 32 zero bytes
    d_i = SHA-256( TAG || d_{i-1} || u64_be(len(item_i)) || item_i )

with TAG = b"cbyok-prefix-v2" zero-padded to one 64-byte SHA-256 block. SHA-256 is hashlib's
(OpenSSL: the CPU's SHA extensions where it has them), not a hand-written hash: 7.9 µs on a
12 KB turn where version 1's portable BLAKE2b took 16.1 (warm caches; a start's cold ones narrow
the gap). TAG's block is hashed once and the state copied per item. The digests live only in
memory (a history's chain is rebuilt from its entries when read), so no older version is read.
"""
import hashlib

from cpython.buffer cimport PyBUF_READ, PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from cpython.object cimport Py_EQ, PyObject_RichCompareBool
from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

cdef extern from "Python.h":
    object PyMemoryView_FromMemory(char* mem, Py_ssize_t size, int flags)

__all__ = ["DIGEST_SIZE", "TAG", "chain", "common_prefix", "extend", "is_strict_prefix"]

DIGEST_SIZE = 32
TAG = b"cbyok-prefix-v2".ljust(64, b"\0")

cdef enum:
    _DIGEST = 32
    _HEADER = 40  # d_{i-1} and the length
    # hashlib gives up the GIL for an update of 2 KiB or more; the loop thread hashes in smaller
    # pieces so it never waits a switch interval to take it back from the store's threads.
    _PIECE = 2047

cdef object _base_copy = hashlib.sha256(TAG).copy


cdef bytes _digest_item(const uint8_t* prev, const uint8_t* item, Py_ssize_t n):
    # The header and the item's first bytes go in one update: a short item is one call.
    cdef Py_ssize_t at = min(n, <Py_ssize_t>(_PIECE - _HEADER))
    cdef bytes first = PyBytes_FromStringAndSize(NULL, _HEADER + at)
    cdef uint8_t* dst = <uint8_t*>PyBytes_AS_STRING(first)
    cdef uint64_t length = <uint64_t>n
    cdef int k
    cdef Py_ssize_t size
    memcpy(dst, prev, _DIGEST)
    for k in range(8):
        dst[_DIGEST + k] = <uint8_t>(length >> (56 - 8 * k))
    memcpy(dst + _HEADER, item, at)
    h = _base_copy()
    h.update(first)
    while at < n:
        size = min(n - at, <Py_ssize_t>_PIECE)
        h.update(PyMemoryView_FromMemory(<char*>item + at, size, PyBUF_READ))
        at += size
    return h.digest()


cdef list _continue(const uint8_t* start, object items, list out):
    cdef uint8_t prev[_DIGEST]
    cdef Py_buffer view
    cdef bytes digest
    memcpy(prev, start, _DIGEST)
    for item in items:
        if PyBytes_CheckExact(item):
            digest = _digest_item(prev, <const uint8_t*>PyBytes_AS_STRING(item), PyBytes_GET_SIZE(item))
        else:
            PyObject_GetBuffer(item, &view, PyBUF_SIMPLE)
            try:
                digest = _digest_item(prev, <const uint8_t*>view.buf, view.len)
            finally:
                PyBuffer_Release(&view)
        memcpy(prev, PyBytes_AS_STRING(digest), _DIGEST)
        PyList_Append(out, digest)
    return out


def chain(items):
    """One digest per item; digest i commits to items[0..i]."""
    cdef uint8_t zero[_DIGEST]
    memset(zero, 0, _DIGEST)
    return _continue(zero, items, [])


def extend(chain, items):
    """A new list: `chain` followed by the digests of `items` continuing from chain[-1]."""
    cdef uint8_t prev[_DIGEST]
    cdef Py_buffer view
    memset(prev, 0, _DIGEST)
    if len(chain):
        last = chain[len(chain) - 1]
        PyObject_GetBuffer(last, &view, PyBUF_SIMPLE)
        try:
            if view.len != _DIGEST:
                raise ValueError(f"chain digests must be {_DIGEST} bytes, got {view.len}")
            memcpy(prev, view.buf, _DIGEST)
        finally:
            PyBuffer_Release(&view)
    return _continue(prev, items, list(chain))


cdef inline bint _same(object x, object y) except -1:
    if PyBytes_CheckExact(x) and PyBytes_CheckExact(y):
        return (PyBytes_GET_SIZE(x) == PyBytes_GET_SIZE(y)
                and memcmp(PyBytes_AS_STRING(x), PyBytes_AS_STRING(y), PyBytes_GET_SIZE(x)) == 0)
    return PyObject_RichCompareBool(x, y, Py_EQ)


def common_prefix(a, b):
    """Number of leading items two chains share (binary search on digest equality)."""
    cdef Py_ssize_t lo = 0
    cdef Py_ssize_t hi = min(len(a), len(b))
    cdef Py_ssize_t mid
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _same(a[mid - 1], b[mid - 1]):
            lo = mid
        else:
            hi = mid - 1
    return lo


def is_strict_prefix(old, new):
    """True if history `old` is a proper prefix of history `new` (same items, then more)."""
    cdef Py_ssize_t n = len(old)
    return n < len(new) and (n == 0 or _same(new[n - 1], old[n - 1]))
