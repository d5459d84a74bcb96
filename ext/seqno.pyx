# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, binding=False, auto_pickle=False
"""append_seqno reorder buffer, compiled (twin: cursor_byok.hotpath.seqno_py).

Items are delivered strictly in seqno order; a gap is held until filled, a repeat of a delivered
or held seqno is dropped and counted, and nothing `window` or more seqnos ahead is accepted.

Held items live in a window-sized ring: seqno s sits in slot (s mod window), so every seqno in
[next, next + window) has its own slot and "already held?" is one identity test. The ring is a
preallocated Python list (rather than a bare PyObject* array) so the cyclic GC can see the
items it holds.
"""
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_CheckExact
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.limits cimport LLONG_MAX
import operator

from cursor_byok.hotpath.errors import NegativeSeqno, SeqnoOutOfWindow

cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object, int*) except? -1
    ctypedef struct PyListObject:
        PyObject** ob_item
    # PyList_SET_ITEM taking a raw pointer: moves an owned reference (steals it) into a new list.
    void _list_move_in "PyList_SET_ITEM" (object, Py_ssize_t, PyObject*) noexcept

cdef extern from *:
    """
    /* Read an exact int of at most one digit without a call; 0 means "not small, go slow". */
    #if PY_VERSION_HEX >= 0x030C0000
    static inline int cbyok_small_int(PyObject *o, long long *out) {
        if (!PyUnstable_Long_IsCompact((PyLongObject *)o)) return 0;
        *out = (long long)PyUnstable_Long_CompactValue((PyLongObject *)o);
        return 1;
    }
    #else
    /* 3.11 layout: the sign lives in ob_size, |ob_size| 30-bit digits follow. */
    static inline int cbyok_small_int(PyObject *o, long long *out) {
        Py_ssize_t size = Py_SIZE(o);
        if (size < -1 || size > 1) return 0;
        *out = size == 0 ? 0 : (long long)size * (long long)((PyLongObject *)o)->ob_digit[0];
        return 1;
    }
    #endif
    """
    bint _small_int "cbyok_small_int" (object, long long*) noexcept

__all__ = ["ReorderBuffer"]

# Marks an empty ring slot; never handed out, so it cannot collide with an item. The ring's
# slots are edited in place (ob_item), keeping the list's ownership of each slot's object.
cdef object _EMPTY = object()


cdef inline PyObject** _items(list ring) noexcept:
    return (<PyListObject*>ring).ob_item


cdef long long _as_window_seqno(object seqno) except? -2:
    """A seqno as a C long long; beyond 64 bits, -1 (negative) or LLONG_MAX (past any window)."""
    cdef int overflow = 0
    cdef long long s = PyLong_AsLongLongAndOverflow(seqno, &overflow)
    if overflow:
        return -1 if overflow < 0 else LLONG_MAX
    return s


cdef class ReorderBuffer:
    """Deliver pushed items in seqno order, starting at `start`, holding at most `window` ahead."""

    cdef list _ring
    cdef Py_ssize_t _window
    cdef Py_ssize_t _head  # ring slot of _next
    cdef long long _next
    cdef Py_ssize_t _held
    cdef Py_ssize_t _duplicates

    def __init__(self, window=64, start=0):
        window = operator.index(window)
        start = operator.index(start)
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if start < 0:
            raise ValueError(f"start must be >= 0, got {start}")
        if start > LLONG_MAX - window:
            raise OverflowError(f"start {start} is too large")
        self._window = window
        self._next = start
        self._head = start % window
        self._ring = [_EMPTY] * window
        self._held = 0
        self._duplicates = 0

    @property
    def window(self):
        return self._window

    @property
    def next_seqno(self):
        """The seqno whose arrival releases the next item."""
        return self._next

    @property
    def held(self):
        """Items received ahead of a gap, waiting for it to fill."""
        return self._held

    @property
    def duplicates(self):
        """Pushes dropped because their seqno was already delivered or held."""
        return self._duplicates

    def push(self, seqno, item):
        """Accept one item; return the items (possibly none) now deliverable in order."""
        cdef long long s
        cdef Py_ssize_t slot, count, k
        cdef PyObject** ring
        cdef list ready
        if not (PyLong_CheckExact(seqno) and _small_int(seqno, &s)):
            seqno = operator.index(seqno)
            s = _as_window_seqno(seqno)
        if s < 0:
            raise NegativeSeqno(f"seqno {seqno} is negative")
        if s < self._next:
            self._duplicates += 1
            return []
        if s - self._next >= self._window:
            raise SeqnoOutOfWindow(
                f"seqno {seqno} is outside the reorder window [{self._next}, {self._next + self._window})"
            )
        ring = _items(self._ring)
        slot = self._head + <Py_ssize_t>(s - self._next)
        if slot >= self._window:
            slot -= self._window
        if s != self._next:
            if ring[slot] == <PyObject*>_EMPTY:
                Py_INCREF(item)
                Py_DECREF(_EMPTY)
                ring[slot] = <PyObject*>item
                self._held += 1
            else:
                self._duplicates += 1
            return []
        # seqno == next: deliver it and the run of held items behind it, in one exact-size list.
        count = 1
        if self._held:
            slot = self._head + 1
            while count <= self._held:
                if slot == self._window:
                    slot = 0
                if ring[slot] == <PyObject*>_EMPTY:
                    break
                count += 1
                slot += 1
        ready = PyList_New(count)
        Py_INCREF(item)
        PyList_SET_ITEM(ready, 0, item)
        self._advance()
        for k in range(1, count):
            slot = self._head
            # Move the ring's reference into the result list; the slot goes back to _EMPTY.
            _list_move_in(ready, k, ring[slot])
            Py_INCREF(_EMPTY)
            ring[slot] = <PyObject*>_EMPTY
            self._advance()
        self._held -= count - 1
        return ready

    cdef inline void _advance(self) noexcept:
        self._next += 1
        self._head += 1
        if self._head == self._window:
            self._head = 0
