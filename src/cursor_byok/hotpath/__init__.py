"""The hot path: Connect framing, append_seqno reordering, history-prefix hashing, the protobuf
wire scan for fields newer than our schema.

Each part exists twice with one API: a compiled module built from ext/<name>.pyx
(`cursor_byok.hotpath._<name>`) and a pure-Python twin (`<name>_py`) that serves as the oracle in
property tests. This façade exports the compiled one when it imports and otherwise falls back to
the twin with a warning on the "cursor_byok.hotpath" logger; with CURSOR_BYOK_REQUIRE_COMPILED=1
in the environment a missing compiled module is an ImportError instead (CI, `make test`).
`implementation()` says which one is active (`cursor-byok doctor` reports it).
"""
from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType

from . import frames_py, prefix_py, seqno_py, wire_py
from .errors import (
    CompressionError,
    FrameTooLarge,
    HexDecodeError,
    HotPathError,
    NegativeSeqno,
    SeqnoError,
    SeqnoOutOfWindow,
    TruncatedFrame,
)

__all__ = [
    "DEFAULT_MAX_FRAME",
    "DIGEST_SIZE",
    "FLAG_COMPRESSED",
    "FLAG_DATA",
    "FLAG_END_STREAM",
    "CompressionError",
    "FrameDecoder",
    "FrameTooLarge",
    "HexDecodeError",
    "HotPathError",
    "NegativeSeqno",
    "PACKABLE",
    "ReorderBuffer",
    "SeqnoError",
    "SeqnoOutOfWindow",
    "TruncatedFrame",
    "WIRE_I32",
    "WIRE_I64",
    "WIRE_LEN",
    "WIRE_VARINT",
    "chain",
    "common_prefix",
    "compiled",
    "decode_hex",
    "encode_end_stream",
    "encode_frame",
    "encode_frames",
    "encode_nested_frame",
    "extend",
    "holds_unknown",
    "implementation",
    "is_strict_prefix",
    "twins",
]

REQUIRE_COMPILED_ENV = "CURSOR_BYOK_REQUIRE_COMPILED"

_log = logging.getLogger("cursor_byok.hotpath")

# The names each module must define; a stale or partial build missing any is not used.
_API: dict[str, tuple[str, ...]] = {
    "frames": (
        "FrameDecoder",
        "encode_frame",
        "encode_frames",
        "encode_end_stream",
        "encode_nested_frame",
        "decode_hex",
        "FLAG_DATA",
        "FLAG_COMPRESSED",
        "FLAG_END_STREAM",
        "DEFAULT_MAX_FRAME",
    ),
    "seqno": ("ReorderBuffer",),
    "prefix": ("chain", "extend", "common_prefix", "is_strict_prefix", "DIGEST_SIZE"),
    "wire": ("holds_unknown",),
}

twins: dict[str, ModuleType] = {"frames": frames_py, "seqno": seqno_py, "prefix": prefix_py, "wire": wire_py}


def _load_compiled(name: str, unavailable: dict[str, ImportError]) -> ModuleType | None:
    require = os.environ.get(REQUIRE_COMPILED_ENV) == "1"
    try:
        module = importlib.import_module(f"{__name__}._{name}")
        missing = [attr for attr in _API[name] if not hasattr(module, attr)]
        if missing:
            raise ImportError(f"{module.__name__} lacks {', '.join(missing)} (stale build?)")
    except ImportError as exc:
        if require:
            raise ImportError(
                f"compiled hot path module {__name__}._{name} is unavailable and "
                f"{REQUIRE_COMPILED_ENV}=1: {exc}"
            ) from exc
        unavailable[name] = exc
        return None
    return module


def _load_all() -> dict[str, ModuleType | None]:
    unavailable: dict[str, ImportError] = {}
    modules = {name: _load_compiled(name, unavailable) for name in _API}
    if unavailable:  # one line, not one per module: a source install without a compiler has none
        reasons = "; ".join(dict.fromkeys(str(exc) for exc in unavailable.values()))
        _log.warning(
            "compiled hot path unavailable for %s (%s); using the pure-Python twin%s (slower)",
            ", ".join(unavailable), reasons, "s" if len(unavailable) > 1 else "",
        )
    return modules


compiled: dict[str, ModuleType | None] = _load_all()
_active: dict[str, ModuleType] = {name: compiled[name] or twins[name] for name in _API}


def implementation() -> dict[str, str]:
    """Which implementation backs each part: "compiled" or "python"."""
    return {name: "python" if compiled[name] is None else "compiled" for name in _API}


FLAG_DATA: int = frames_py.FLAG_DATA
FLAG_COMPRESSED: int = frames_py.FLAG_COMPRESSED
FLAG_END_STREAM: int = frames_py.FLAG_END_STREAM
DEFAULT_MAX_FRAME: int = frames_py.DEFAULT_MAX_FRAME
DIGEST_SIZE: int = prefix_py.DIGEST_SIZE
WIRE_VARINT: int = wire_py.WIRE_VARINT
WIRE_I64: int = wire_py.WIRE_I64
WIRE_LEN: int = wire_py.WIRE_LEN
WIRE_I32: int = wire_py.WIRE_I32
PACKABLE: int = wire_py.PACKABLE

FrameDecoder = _active["frames"].FrameDecoder
encode_frame = _active["frames"].encode_frame
encode_frames = _active["frames"].encode_frames
encode_end_stream = _active["frames"].encode_end_stream
encode_nested_frame = _active["frames"].encode_nested_frame
decode_hex = _active["frames"].decode_hex
ReorderBuffer = _active["seqno"].ReorderBuffer
chain = _active["prefix"].chain
extend = _active["prefix"].extend
common_prefix = _active["prefix"].common_prefix
is_strict_prefix = _active["prefix"].is_strict_prefix
holds_unknown = _active["wire"].holds_unknown
