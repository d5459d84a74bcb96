# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, binding=False, auto_pickle=False
"""History-prefix hash chain, compiled (twin: cursor_byok.hotpath.prefix_py).

Construction (version 1), over a sequence of canonical history items (bytes):

    d_0 = 32 zero bytes
    d_i = BLAKE2b(digest_size=32, key=none, salt=zero, person=b"cbyok-prefix-v1")(
              d_{i-1} || u64_be(len(item_i)) || item_i )

BLAKE2b is implemented here from RFC 7693 so a chain costs no Python call per item; the
property tests check every digest against hashlib.blake2b via the twin.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from cpython.object cimport Py_EQ, PyObject_RichCompareBool
from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>

    /* BLAKE2b (RFC 7693), sequential mode, no key, for messages shorter than 2**64 bytes. */
    typedef struct {
        uint64_t h[8];
        uint64_t t;          /* bytes compressed so far (the high counter word stays 0) */
        uint8_t buf[128];
        size_t buflen;
    } cbyok_b2b;

    static const uint64_t cbyok_b2b_iv[8] = {
        0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
        0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
    };

    static const uint8_t cbyok_b2b_sigma[12][16] = {
        { 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15},
        {14, 10,  4,  8,  9, 15, 13,  6,  1, 12,  0,  2, 11,  7,  5,  3},
        {11,  8, 12,  0,  5,  2, 15, 13, 10, 14,  3,  6,  7,  1,  9,  4},
        { 7,  9,  3,  1, 13, 12, 11, 14,  2,  6,  5, 10,  4,  0, 15,  8},
        { 9,  0,  5,  7,  2,  4, 10, 15, 14,  1, 11, 12,  6,  8,  3, 13},
        { 2, 12,  6, 10,  0, 11,  8,  3,  4, 13,  7,  5, 15, 14,  1,  9},
        {12,  5,  1, 15, 14, 13,  4, 10,  0,  7,  6,  3,  9,  2,  8, 11},
        {13, 11,  7, 14, 12,  1,  3,  9,  5,  0, 15,  4,  8,  6,  2, 10},
        { 6, 15, 14,  9, 11,  3,  0,  8, 12,  2, 13,  7,  1,  4, 10,  5},
        {10,  2,  8,  4,  7,  6,  1,  5, 15, 11,  9, 14,  3, 12, 13,  0},
        { 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15},
        {14, 10,  4,  8,  9, 15, 13,  6,  1, 12,  0,  2, 11,  7,  5,  3},
    };

    static inline uint64_t cbyok_load64le(const uint8_t *p) {
        return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 24)
             | ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) | ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
    }

    #define CBYOK_ROTR64(x, n) (((x) >> (n)) | ((x) << (64 - (n))))
    #define CBYOK_B2B_G(a, b, c, d, x, y) do {            \\
        a = a + b + (x); d = CBYOK_ROTR64(d ^ a, 32);     \\
        c = c + d;       b = CBYOK_ROTR64(b ^ c, 24);     \\
        a = a + b + (y); d = CBYOK_ROTR64(d ^ a, 16);     \\
        c = c + d;       b = CBYOK_ROTR64(b ^ c, 63);     \\
    } while (0)

    #define CBYOK_B2B_ROUND(r) do {                                                             \
        CBYOK_B2B_G(v[0], v[4], v[ 8], v[12], m[cbyok_b2b_sigma[r][ 0]], m[cbyok_b2b_sigma[r][ 1]]); \
        CBYOK_B2B_G(v[1], v[5], v[ 9], v[13], m[cbyok_b2b_sigma[r][ 2]], m[cbyok_b2b_sigma[r][ 3]]); \
        CBYOK_B2B_G(v[2], v[6], v[10], v[14], m[cbyok_b2b_sigma[r][ 4]], m[cbyok_b2b_sigma[r][ 5]]); \
        CBYOK_B2B_G(v[3], v[7], v[11], v[15], m[cbyok_b2b_sigma[r][ 6]], m[cbyok_b2b_sigma[r][ 7]]); \
        CBYOK_B2B_G(v[0], v[5], v[10], v[15], m[cbyok_b2b_sigma[r][ 8]], m[cbyok_b2b_sigma[r][ 9]]); \
        CBYOK_B2B_G(v[1], v[6], v[11], v[12], m[cbyok_b2b_sigma[r][10]], m[cbyok_b2b_sigma[r][11]]); \
        CBYOK_B2B_G(v[2], v[7], v[ 8], v[13], m[cbyok_b2b_sigma[r][12]], m[cbyok_b2b_sigma[r][13]]); \
        CBYOK_B2B_G(v[3], v[4], v[ 9], v[14], m[cbyok_b2b_sigma[r][14]], m[cbyok_b2b_sigma[r][15]]); \
    } while (0)

    static void cbyok_b2b_compress(cbyok_b2b *S, const uint8_t *block, int last) {
        uint64_t m[16], v[16];
        int i;
        for (i = 0; i < 16; i++) m[i] = cbyok_load64le(block + 8 * i);
        for (i = 0; i < 8; i++) { v[i] = S->h[i]; v[i + 8] = cbyok_b2b_iv[i]; }
        v[12] ^= S->t;
        if (last) v[14] = ~v[14];
        /* Rounds written out with literal round numbers so every message index folds to a
           constant and the state stays in registers. */
        CBYOK_B2B_ROUND(0); CBYOK_B2B_ROUND(1); CBYOK_B2B_ROUND(2);  CBYOK_B2B_ROUND(3);
        CBYOK_B2B_ROUND(4); CBYOK_B2B_ROUND(5); CBYOK_B2B_ROUND(6);  CBYOK_B2B_ROUND(7);
        CBYOK_B2B_ROUND(8); CBYOK_B2B_ROUND(9); CBYOK_B2B_ROUND(10); CBYOK_B2B_ROUND(11);
        for (i = 0; i < 8; i++) S->h[i] ^= v[i] ^ v[i + 8];
    }

    /* Parameter block: digest length, no key, fanout 1, depth 1, zero salt, 16-byte person. */
    static void cbyok_b2b_init(cbyok_b2b *S, size_t outlen, const uint8_t person[16]) {
        int i;
        for (i = 0; i < 8; i++) S->h[i] = cbyok_b2b_iv[i];
        S->h[0] ^= 0x01010000ULL ^ (uint64_t)outlen;
        S->h[6] ^= cbyok_load64le(person);
        S->h[7] ^= cbyok_load64le(person + 8);
        S->t = 0;
        S->buflen = 0;
    }

    /* The last block is compressed by _final (with the last-block flag), so a full buffer is
       only flushed once more input arrives. */
    static void cbyok_b2b_update(cbyok_b2b *S, const uint8_t *in, size_t n) {
        while (n > 0) {
            size_t take;
            if (S->buflen == 128) {
                S->t += 128;
                cbyok_b2b_compress(S, S->buf, 0);
                S->buflen = 0;
            }
            if (S->buflen == 0) {
                while (n > 128) {
                    S->t += 128;
                    cbyok_b2b_compress(S, in, 0);
                    in += 128;
                    n -= 128;
                }
            }
            take = 128 - S->buflen;
            if (take > n) take = n;
            memcpy(S->buf + S->buflen, in, take);
            S->buflen += take;
            in += take;
            n -= take;
        }
    }

    static void cbyok_b2b_final(cbyok_b2b *S, uint8_t *out, size_t outlen) {
        size_t i;
        S->t += S->buflen;
        memset(S->buf + S->buflen, 0, 128 - S->buflen);
        cbyok_b2b_compress(S, S->buf, 1);
        for (i = 0; i < outlen; i++) out[i] = (uint8_t)(S->h[i >> 3] >> (8 * (i & 7)));
    }
    """
    ctypedef struct cbyok_b2b:
        uint64_t h[8]
        uint64_t t
        uint8_t buf[128]
        size_t buflen
    void cbyok_b2b_init(cbyok_b2b* S, size_t outlen, const uint8_t* person) noexcept nogil
    void cbyok_b2b_update(cbyok_b2b* S, const uint8_t* data, size_t n) noexcept nogil
    void cbyok_b2b_final(cbyok_b2b* S, uint8_t* out, size_t outlen) noexcept nogil

__all__ = ["DIGEST_SIZE", "PERSON", "chain", "common_prefix", "extend", "is_strict_prefix"]

DIGEST_SIZE = 32
PERSON = b"cbyok-prefix-v1"

cdef enum:
    _DIGEST = 32

cdef uint8_t _PERSON16[16]
cdef cbyok_b2b _BASE  # the configured initial state, copied per item


cdef void _init_base() noexcept:
    cdef bytes person = PERSON
    memset(_PERSON16, 0, 16)
    memcpy(_PERSON16, PyBytes_AS_STRING(person), PyBytes_GET_SIZE(person))
    cbyok_b2b_init(&_BASE, _DIGEST, _PERSON16)


_init_base()


cdef inline void _digest_item(const uint8_t* prev, const uint8_t* item, Py_ssize_t n, uint8_t* out) noexcept nogil:
    cdef cbyok_b2b state = _BASE
    cdef uint8_t length_be[8]
    cdef int k
    cdef uint64_t length = <uint64_t>n
    for k in range(8):
        length_be[k] = <uint8_t>(length >> (56 - 8 * k))
    cbyok_b2b_update(&state, prev, _DIGEST)
    cbyok_b2b_update(&state, length_be, 8)
    cbyok_b2b_update(&state, item, <size_t>n)
    cbyok_b2b_final(&state, out, _DIGEST)


cdef list _continue(const uint8_t* start, object items, list out):
    cdef uint8_t prev[_DIGEST]
    cdef Py_buffer view
    cdef bytes digest
    cdef uint8_t* dst
    memcpy(prev, start, _DIGEST)
    for item in items:
        digest = PyBytes_FromStringAndSize(NULL, _DIGEST)
        dst = <uint8_t*>PyBytes_AS_STRING(digest)
        if PyBytes_CheckExact(item):
            _digest_item(prev, <const uint8_t*>PyBytes_AS_STRING(item), PyBytes_GET_SIZE(item), dst)
        else:
            PyObject_GetBuffer(item, &view, PyBUF_SIMPLE)
            _digest_item(prev, <const uint8_t*>view.buf, view.len, dst)
            PyBuffer_Release(&view)
        memcpy(prev, dst, _DIGEST)
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
