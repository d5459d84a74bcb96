# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, binding=False, auto_pickle=False
"""Protobuf wire bytes against a schema: does a message, or any message in it, hold a field the
schema does not know? Compiled (twin and documentation: cursor_byok.hotpath.wire_py).

Skips over strings and bytes without reading them: its cost grows with the number of fields, not
with the size of the text a message carries.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport uint8_t, uint64_t

WIRE_VARINT = 0
WIRE_I64 = 1
WIRE_LEN = 2
WIRE_I32 = 5
PACKABLE = 8
MAX_DEPTH = 100

cdef int _MAX_DEPTH = 100


cdef inline bint _varint(const uint8_t* p, Py_ssize_t end, Py_ssize_t* pos, uint64_t* out) noexcept:
    """Read one varint at pos[0] (advanced past it); False when the bytes end first or it runs
    past 64 bits."""
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef uint8_t byte
    while pos[0] < end and shift < 64:
        byte = p[pos[0]]
        pos[0] += 1
        value |= (<uint64_t>(byte & 0x7F)) << shift
        if byte < 0x80:
            out[0] = value
            return True
        shift += 7
    return False


cdef int _scan(const uint8_t* p, Py_ssize_t pos, Py_ssize_t end, object schema, Py_ssize_t index, int depth) except -1:
    """1: may hold a field the schema does not know; 0: holds none."""
    cdef uint64_t tag, length
    cdef long entry
    cdef int wire
    if depth > _MAX_DEPTH:
        return 1
    table = schema.tables[index]
    if table is None:
        table = schema.build(index)
    while pos < end:
        if not _varint(p, end, &pos, &tag):
            return 1
        wire = <int>(tag & 7)
        found = (<dict?>table).get(tag >> 3)
        if found is None:
            return 1
        entry = found
        if wire == 2:
            if not _varint(p, end, &pos, &length) or length > <uint64_t>(end - pos):
                return 1
            if (entry & 7) == 2:
                if (entry >> 4) and _scan(p, pos, pos + <Py_ssize_t>length, schema, (entry >> 4) - 1, depth + 1):
                    return 1
            elif not (entry & 8):
                return 1
            pos += <Py_ssize_t>length
        elif wire != (entry & 7):
            return 1
        elif wire == 0:
            if not _varint(p, end, &pos, &length):
                return 1
        elif wire == 1:
            if end - pos < 8:
                return 1
            pos += 8
        elif wire == 5:
            if end - pos < 4:
                return 1
            pos += 4
        else:
            return 1
    return 0


def holds_unknown(data, schema, Py_ssize_t root=0):
    """Whether `data`, a serialized message of type `root`, may hold a field `schema` does not
    know (False: it certainly holds none)."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return _scan(<const uint8_t*>view.buf, 0, view.len, schema, root, 1) == 1
    finally:
        PyBuffer_Release(&view)
