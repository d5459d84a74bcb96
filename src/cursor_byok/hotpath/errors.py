"""Errors raised by the hot path (frames, seqno, prefix), shared by the compiled and pure twins.

Each error carries the Connect error code the gateway should answer with, so callers map a
failure to the wire without knowing which check tripped.
"""
from __future__ import annotations

__all__ = [
    "CompressionError",
    "FrameTooLarge",
    "HexDecodeError",
    "HotPathError",
    "NegativeSeqno",
    "SeqnoError",
    "SeqnoOutOfWindow",
    "TruncatedFrame",
]


class HotPathError(Exception):
    """Base class; `code` is the Connect error code for this failure."""

    code: str = "internal"


class FrameTooLarge(HotPathError):
    """A frame header announced more than the size cap (raised before anything is buffered)."""

    code = "resource_exhausted"


class TruncatedFrame(HotPathError):
    """The stream ended with a partial frame header or payload buffered."""

    code = "invalid_argument"


class CompressionError(HotPathError):
    """Compressed flag without gzip negotiated, corrupt gzip, or inflated size over the cap."""

    code = "invalid_argument"


class HexDecodeError(HotPathError):
    """A hex string had odd length or a byte outside [0-9a-fA-F]."""

    code = "invalid_argument"


class SeqnoError(HotPathError):
    """A sequence number the reorder buffer cannot accept."""

    code = "invalid_argument"


class NegativeSeqno(SeqnoError):
    """Sequence numbers start at zero."""

    code = "invalid_argument"


class SeqnoOutOfWindow(SeqnoError):
    """A sequence number too far ahead of the next expected one to hold."""

    code = "resource_exhausted"
