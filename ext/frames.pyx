# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, binding=False, auto_pickle=False
"""Connect envelope framing, compiled (twin: cursor_byok.hotpath.frames_py).

A Connect streaming body is a sequence of envelopes: one flags byte, a 4-byte big-endian payload
length, then the payload. Flag 0x01 marks a compressed payload, 0x02 the end-of-stream message.

The decoder parses frames straight out of each fed chunk. Only a frame that straddles chunks is
held, and then in its final `bytes` object, filled in place, so a frame costs one copy however it
is chunked. A header announcing more than the cap raises before any allocation; an allowed frame
of up to 1 MiB gets its final object as soon as its header is in, and a larger one grows
geometrically with the bytes that actually arrive, so a bare header never commits more than
1 MiB.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from cpython.object cimport PyObject
from cpython.ref cimport Py_XDECREF
from cpython.unicode cimport PyUnicode_Check
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy
import operator

from cursor_byok.hotpath._gunzip import gunzip_capped
from cursor_byok.hotpath.errors import CompressionError, FrameTooLarge, HexDecodeError, TruncatedFrame

cdef extern from "Python.h":
    PyObject* _new_bytes "PyBytes_FromStringAndSize" (const char*, Py_ssize_t) except NULL
    int _PyBytes_Resize(PyObject**, Py_ssize_t) except -1
    char* _bytes_data "PyBytes_AS_STRING" (PyObject*) noexcept
    bint PyUnicode_IS_ASCII(object)
    void* PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)

__all__ = [
    "DEFAULT_MAX_FRAME",
    "FLAG_COMPRESSED",
    "FLAG_DATA",
    "FLAG_END_STREAM",
    "FrameDecoder",
    "decode_hex",
    "encode_end_stream",
    "encode_frame",
    "encode_frames",
]

FLAG_DATA = 0
FLAG_COMPRESSED = 1
FLAG_END_STREAM = 2
DEFAULT_MAX_FRAME = 16 * 1024 * 1024
HEADER_SIZE = 5

cdef enum:
    _HEADER = 5
    # Frames up to this size are allocated whole when their header arrives.
    _PREALLOC_LIMIT = 1 << 20
    # A larger frame starts at this size (or what its first chunk holds) and doubles.
    _GROW_FROM = 64 * 1024
cdef uint64_t _MAX_WIRE_LENGTH = 0xFFFFFFFF


cdef inline uint32_t _read_length(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline void _write_header(uint8_t* p, uint8_t flags, uint32_t length) noexcept nogil:
    p[0] = flags
    p[1] = <uint8_t>(length >> 24)
    p[2] = <uint8_t>(length >> 16)
    p[3] = <uint8_t>(length >> 8)
    p[4] = <uint8_t>length


cdef class FrameDecoder:
    """Incremental Connect envelope decoder: feed() chunks, get complete (flags, payload) frames."""

    cdef object _max_obj
    cdef uint64_t _max
    cdef bint _gzip
    cdef uint8_t _hdr[_HEADER]
    cdef Py_ssize_t _hdr_have
    # The frame being filled across chunks: an owned bytes object (NULL when none) that becomes
    # the payload; its size (_pending_cap) reaches _pending_len by resizing as data arrives.
    cdef PyObject* _pending
    cdef Py_ssize_t _pending_len
    cdef Py_ssize_t _pending_cap
    cdef Py_ssize_t _pending_have
    cdef uint8_t _pending_flags
    cdef object _error

    def __init__(self, max_frame_size=DEFAULT_MAX_FRAME, gzip=False):
        max_frame_size = operator.index(max_frame_size)
        if max_frame_size < 0:
            raise ValueError(f"max_frame_size must be >= 0, got {max_frame_size}")
        self._max_obj = max_frame_size
        # Wire lengths are u32, so any larger cap is simply "no cap".
        self._max = <uint64_t>min(max_frame_size, _MAX_WIRE_LENGTH)
        self._gzip = bool(gzip)
        self._hdr_have = 0
        Py_XDECREF(self._pending)
        self._pending = NULL
        self._pending_len = 0
        self._pending_cap = 0
        self._pending_have = 0
        self._pending_flags = 0
        self._error = None

    def __dealloc__(self):
        Py_XDECREF(self._pending)
        self._pending = NULL

    @property
    def max_frame_size(self):
        return self._max_obj

    @property
    def buffered(self):
        """Bytes received but not yet returned as part of a complete frame."""
        if self._pending != NULL:
            return _HEADER + self._pending_have
        return self._hdr_have

    def feed(self, data):
        cdef Py_buffer view
        cdef list frames
        if self._error is not None:
            raise type(self._error)(*self._error.args)
        if PyBytes_CheckExact(data):
            return self._run(<const uint8_t*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            frames = self._run(<const uint8_t*>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)
        return frames

    def close(self):
        """Declare end of input; raises TruncatedFrame if a partial frame is buffered."""
        if self._error is not None:
            raise type(self._error)(*self._error.args)
        if self._pending != NULL:
            self._fail(TruncatedFrame(
                f"stream ended inside a frame ({self._pending_have} of {self._pending_len} payload bytes)"
            ))
        if self._hdr_have:
            self._fail(TruncatedFrame(
                f"stream ended inside a frame header ({self._hdr_have} of {_HEADER} bytes)"
            ))

    cdef int _fail(self, exc) except -1:
        self._error = exc
        raise exc

    cdef list _run(self, const uint8_t* p, Py_ssize_t n):
        cdef list frames = []
        cdef Py_ssize_t i = 0
        cdef Py_ssize_t take
        cdef uint32_t length
        cdef uint8_t flags
        cdef object payload
        while True:
            if self._pending != NULL:
                take = self._pending_len - self._pending_have
                if take > n - i:
                    take = n - i
                if self._pending_have + take > self._pending_cap:
                    self._grow_pending(self._pending_have + take)
                memcpy(_bytes_data(self._pending) + self._pending_have, p + i, take)
                self._pending_have += take
                i += take
                if self._pending_have < self._pending_len:
                    return frames
                payload = <object>self._pending  # takes a reference; then drop ours
                Py_XDECREF(self._pending)
                self._pending = NULL
                self._pending_have = 0
                self._emit(frames, self._pending_flags, payload)
                continue
            # Header: straight from the chunk when it holds all 5 bytes, else accumulated.
            if self._hdr_have == 0 and n - i >= _HEADER:
                flags = p[i]
                length = _read_length(p + i + 1)
                i += _HEADER
            else:
                take = _HEADER - self._hdr_have
                if take > n - i:
                    take = n - i
                memcpy(self._hdr + self._hdr_have, p + i, take)
                self._hdr_have += take
                i += take
                if self._hdr_have < _HEADER:
                    return frames
                self._hdr_have = 0
                flags = self._hdr[0]
                length = _read_length(self._hdr + 1)
            if length > self._max:
                self._fail(FrameTooLarge(f"frame of {length} bytes exceeds the {self._max_obj}-byte limit"))
            if <Py_ssize_t>length <= n - i:
                payload = PyBytes_FromStringAndSize(<const char*>(p + i), length)
                i += length
                self._emit(frames, flags, payload)
                continue
            # The frame straddles chunks; the loop top copies what this chunk holds and returns.
            if length <= _PREALLOC_LIMIT:
                self._pending_cap = length
            else:
                self._pending_cap = max(n - i, _GROW_FROM)
            self._pending = _new_bytes(NULL, self._pending_cap)
            self._pending_len = length
            self._pending_have = 0
            self._pending_flags = flags

    cdef int _grow_pending(self, Py_ssize_t needed) except -1:
        # Doubling keeps the total copying linear; realloc of a large block is usually in place.
        cdef Py_ssize_t cap = self._pending_cap * 2
        if cap < needed:
            cap = needed
        if cap > self._pending_len:
            cap = self._pending_len
        _PyBytes_Resize(&self._pending, cap)
        self._pending_cap = cap
        return 0

    cdef int _emit(self, list frames, uint8_t flags, object payload) except -1:
        if flags & 0x01:
            if not self._gzip:
                self._fail(CompressionError("compressed frame but no gzip encoding was negotiated"))
            try:
                payload = gunzip_capped(payload, self._max_obj)
            except CompressionError as exc:
                self._fail(exc)
            flags &= ~0x01
        PyList_Append(frames, (flags, payload))
        return 0


cdef Py_ssize_t _payload_size(object payload) except -1:
    cdef Py_buffer view
    cdef Py_ssize_t size
    if PyBytes_CheckExact(payload):
        size = PyBytes_GET_SIZE(payload)
    else:
        PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
        size = view.len
        PyBuffer_Release(&view)
    if <uint64_t>size > _MAX_WIRE_LENGTH:
        raise ValueError(f"payload of {size} bytes does not fit a 4-byte frame length")
    return size


cdef Py_ssize_t _write_frame(uint8_t* out, uint8_t flags, object payload) except -1:
    """Write header + payload at `out`; return bytes written."""
    cdef Py_buffer view
    cdef Py_ssize_t size
    if PyBytes_CheckExact(payload):
        size = PyBytes_GET_SIZE(payload)
        _write_header(out, flags, <uint32_t>size)
        memcpy(out + _HEADER, PyBytes_AS_STRING(payload), size)
        return _HEADER + size
    PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
    try:
        size = view.len
        _write_header(out, flags, <uint32_t>size)
        memcpy(out + _HEADER, view.buf, size)
    finally:
        PyBuffer_Release(&view)
    return _HEADER + size


def encode_frame(payload, int flags=0):
    """One envelope: flags byte, u32 big-endian length, payload."""
    if not 0 <= flags <= 0xFF:
        raise ValueError(f"frame flags must fit in one byte, got {flags}")
    cdef Py_ssize_t size = _payload_size(payload)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, _HEADER + size)
    _write_frame(<uint8_t*>PyBytes_AS_STRING(out), <uint8_t>flags, payload)
    return out


def encode_frames(payloads):
    """Data envelopes for each payload, concatenated (coalesces several frames into one send)."""
    cdef list items = payloads if type(payloads) is list else list(payloads)
    cdef Py_ssize_t total = 0
    cdef Py_ssize_t offset = 0
    cdef object payload
    for payload in items:
        total += _HEADER + _payload_size(payload)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* dst = <uint8_t*>PyBytes_AS_STRING(out)
    for payload in items:
        # A payload mutated between the passes (a bytearray grown elsewhere) must not overrun.
        if _HEADER + _payload_size(payload) > total - offset:
            raise ValueError("payload changed size while encoding")
        offset += _write_frame(dst + offset, 0, payload)
    if offset != total:
        raise ValueError("payload changed size while encoding")
    return out


def encode_end_stream(json_payload):
    """The end-of-stream envelope (flag 0x02) carrying the JSON trailer object."""
    return encode_frame(json_payload, 2)


cdef enum:
    _MAX_NESTING = 16  # message fields around the value (a server message's delta: 2)


cdef inline Py_ssize_t _varint_size(uint64_t value) noexcept nogil:
    cdef Py_ssize_t n = 1
    while value >= 0x80:
        value >>= 7
        n += 1
    return n


cdef inline Py_ssize_t _put_varint(uint8_t* p, uint64_t value) noexcept nogil:
    cdef Py_ssize_t n = 0
    while value >= 0x80:
        p[n] = <uint8_t>((value & 0x7F) | 0x80)
        value >>= 7
        n += 1
    p[n] = <uint8_t>value
    return n + 1


def encode_nested_frame(tuple fields not None, bytes value not None, bytes tail not None=b""):
    """The data envelope of a protobuf message whose only content is `value`, a length-delimited
    field nested in message fields: `fields` are their numbers from the outermost message to the
    value's own, and `tail` the innermost message's later fields, already encoded. Byte for byte
    what serializing such a message gives (proto3: an empty value is left out, the messages around
    it are not)."""
    cdef Py_ssize_t depth = len(fields)
    cdef Py_ssize_t i
    cdef uint64_t keys[_MAX_NESTING]
    cdef uint64_t sizes[_MAX_NESTING]  # sizes[i]: the content of the message that field i opens
    cdef uint64_t number
    if depth == 0:
        raise ValueError("a nested field needs at least the value's own field number")
    if depth > _MAX_NESTING:
        raise ValueError(f"more than {_MAX_NESTING} nested fields")
    for i in range(depth):
        if not 1 <= fields[i] < (1 << 29):
            raise ValueError(f"protobuf field number {fields[i]} is out of range")
        number = fields[i]
        keys[i] = (number << 3) | 2
    cdef Py_ssize_t value_size = PyBytes_GET_SIZE(value)
    cdef Py_ssize_t tail_size = PyBytes_GET_SIZE(tail)
    cdef uint64_t content = tail_size
    if value_size:
        content += _varint_size(keys[depth - 1]) + _varint_size(value_size) + value_size
    for i in range(depth - 2, -1, -1):
        sizes[i] = content
        content += _varint_size(keys[i]) + _varint_size(content)
    if content > _MAX_WIRE_LENGTH:
        raise ValueError(f"payload of {content} bytes does not fit a 4-byte frame length")
    cdef bytes out = PyBytes_FromStringAndSize(NULL, _HEADER + <Py_ssize_t>content)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    _write_header(p, 0, <uint32_t>content)
    p += _HEADER
    for i in range(depth - 1):
        p += _put_varint(p, keys[i])
        p += _put_varint(p, sizes[i])
    if value_size:
        p += _put_varint(p, keys[depth - 1])
        p += _put_varint(p, <uint64_t>value_size)
        memcpy(p, PyBytes_AS_STRING(value), value_size)
        p += value_size
    memcpy(p, PyBytes_AS_STRING(tail), tail_size)
    return out


# Hex digit values; 0xFF marks a byte that is not [0-9a-fA-F].
cdef uint8_t _HEX_VALUE[256]


cdef void _init_hex_table() noexcept:
    cdef int c
    for c in range(256):
        _HEX_VALUE[c] = 0xFF
    for c in range(10):
        _HEX_VALUE[ord("0") + c] = c
    for c in range(6):
        _HEX_VALUE[ord("a") + c] = 10 + c
        _HEX_VALUE[ord("A") + c] = 10 + c


_init_hex_table()


cdef Py_ssize_t _first_bad_hex(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if _HEX_VALUE[p[i]] == 0xFF:
            return i
    return -1


cdef bytes _unhex(const uint8_t* p, Py_ssize_t n):
    cdef Py_ssize_t bad = -1
    cdef Py_ssize_t k
    cdef uint8_t hi, lo, acc = 0
    cdef bytes out
    cdef uint8_t* dst
    if n % 2:
        bad = _first_bad_hex(p, n)
        if bad >= 0:
            raise HexDecodeError(f"non-hex character {p[bad]:#04x} at offset {bad}")
        raise HexDecodeError(f"hex string has odd length {n}")
    out = PyBytes_FromStringAndSize(NULL, n // 2)
    dst = <uint8_t*>PyBytes_AS_STRING(out)
    with nogil:
        for k in range(n // 2):
            hi = _HEX_VALUE[p[2 * k]]
            lo = _HEX_VALUE[p[2 * k + 1]]
            acc |= hi | lo  # bit 7 is set iff some byte was invalid; checked once at the end
            dst[k] = <uint8_t>((hi << 4) | lo)
        if acc & 0x80:
            bad = _first_bad_hex(p, n)
    if bad >= 0:
        raise HexDecodeError(f"non-hex character {p[bad]:#04x} at offset {bad}")
    return out


cdef Py_ssize_t _first_non_hex_char(str s):
    cdef Py_ssize_t index
    cdef Py_UCS4 char
    for index, char in enumerate(s):
        if char > 0x7F or _HEX_VALUE[<uint8_t>char] == 0xFF:
            return index
    return -1


def decode_hex(s):
    """Strict hex decoding: [0-9a-fA-F] only, even length; anything else is HexDecodeError.

    A bad character is reported (by offset) before an odd length is.
    """
    cdef Py_buffer view
    cdef Py_ssize_t index
    if PyUnicode_Check(s):
        if not PyUnicode_IS_ASCII(s):
            index = _first_non_hex_char(s)
            raise HexDecodeError(f"non-hex character {ord(s[index]):#04x} at offset {index}")
        return _unhex(<const uint8_t*>PyUnicode_DATA(s), PyUnicode_GET_LENGTH(s))
    if PyBytes_CheckExact(s):
        return _unhex(<const uint8_t*>PyBytes_AS_STRING(s), PyBytes_GET_SIZE(s))
    PyObject_GetBuffer(s, &view, PyBUF_SIMPLE)
    try:
        return _unhex(<const uint8_t*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
