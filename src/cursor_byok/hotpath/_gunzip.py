"""Capped gzip inflation shared by both frame decoders.

Compressed frames are rare (Cursor negotiates identity for the agent stream), so this runs at
Python speed in both twins; what matters is that inflation stops one byte past the cap instead
of materialising a decompression bomb.
"""
from __future__ import annotations

import sys
import zlib

from .errors import CompressionError

_GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip container only, no raw/zlib auto-detection


def gunzip_capped(payload: bytes, cap: int) -> bytes:
    """Inflate a (possibly multi-member) gzip payload, refusing output longer than `cap` bytes."""
    cap = min(cap, sys.maxsize - 1)  # zlib's max_length is a Py_ssize_t
    parts: list[bytes] = []
    produced = 0
    data = payload
    while True:
        inflater = zlib.decompressobj(_GZIP_WBITS)
        try:
            # max_length 0 would mean "unlimited", so always ask for at least one byte.
            chunk = inflater.decompress(data, cap - produced + 1)
        except zlib.error as exc:
            raise CompressionError(f"corrupt gzip payload: {exc}") from None
        produced += len(chunk)
        if produced > cap:
            raise CompressionError(f"gzip payload inflates past the {cap}-byte limit")
        if not inflater.eof:
            raise CompressionError("truncated gzip payload")
        parts.append(chunk)
        data = inflater.unused_data
        if not data:
            return b"".join(parts)
