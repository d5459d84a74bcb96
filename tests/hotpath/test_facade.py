"""The façade: which implementation is exported, fallback with a warning, the REQUIRE switch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from cursor_byok import hotpath
from cursor_byok.hotpath import errors


def test_exports_the_documented_api() -> None:
    for name in [
        "FrameDecoder", "encode_frame", "encode_frames", "encode_end_stream", "encode_nested_frame", "decode_hex",
        "ReorderBuffer", "chain", "extend", "common_prefix", "is_strict_prefix", "DIGEST_SIZE",
        "HotPathError", "FrameTooLarge", "TruncatedFrame", "CompressionError", "HexDecodeError",
        "SeqnoError", "NegativeSeqno", "SeqnoOutOfWindow", "FLAG_DATA", "FLAG_COMPRESSED",
        "FLAG_END_STREAM", "DEFAULT_MAX_FRAME", "implementation", "twins", "compiled", "holds_unknown",
        "WIRE_VARINT", "WIRE_I64", "WIRE_LEN", "WIRE_I32", "PACKABLE",
    ]:
        assert hasattr(hotpath, name), name
        assert name in hotpath.__all__, name
    assert (hotpath.FLAG_DATA, hotpath.FLAG_COMPRESSED, hotpath.FLAG_END_STREAM) == (0, 1, 2)
    assert hotpath.DEFAULT_MAX_FRAME == 16 * 1024 * 1024


def test_error_codes() -> None:
    assert issubclass(errors.FrameTooLarge, errors.HotPathError)
    assert errors.FrameTooLarge.code == "resource_exhausted"
    assert errors.TruncatedFrame.code == "invalid_argument"
    assert errors.CompressionError.code == "invalid_argument"
    assert errors.HexDecodeError.code == "invalid_argument"
    assert errors.SeqnoError.code == "invalid_argument"
    assert errors.NegativeSeqno.code == "invalid_argument"
    assert errors.SeqnoOutOfWindow.code == "resource_exhausted"
    assert issubclass(errors.NegativeSeqno, errors.SeqnoError)
    assert issubclass(errors.SeqnoOutOfWindow, errors.SeqnoError)


def test_implementation_reports_the_exported_modules() -> None:
    report = hotpath.implementation()
    assert set(report) == {"frames", "seqno", "prefix", "wire"}
    exported = {"frames": hotpath.FrameDecoder, "seqno": hotpath.ReorderBuffer, "prefix": hotpath.chain, "wire": hotpath.holds_unknown}
    for part, kind in report.items():
        source = hotpath.twins[part] if kind == "python" else hotpath.compiled[part]
        assert kind == ("compiled" if hotpath.compiled[part] is not None else "python")
        assert getattr(source, exported[part].__name__) is exported[part]


def test_compiled_modules_are_active_when_required() -> None:
    if os.environ.get("CURSOR_BYOK_REQUIRE_COMPILED") != "1":
        pytest.skip("only meaningful under CURSOR_BYOK_REQUIRE_COMPILED=1")
    assert hotpath.implementation() == {"frames": "compiled", "seqno": "compiled", "prefix": "compiled", "wire": "compiled"}


BLOCK_AND_IMPORT = textwrap.dedent(
    """
    import importlib.abc, json, logging, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "cursor_byok.hotpath._frames":
                raise ImportError("blocked for the test")
            return None

    sys.meta_path.insert(0, Block())
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("cursor_byok.hotpath").addHandler(handler)
    try:
        from cursor_byok import hotpath
    except ImportError as exc:
        print(json.dumps({"import_error": str(exc)}))
    else:
        print(json.dumps({
            "implementation": hotpath.implementation(),
            "decoder_module": hotpath.FrameDecoder.__module__,
            "compiled_frames": hotpath.compiled["frames"] is None,
            "warnings": [r.getMessage() for r in records if r.levelname == "WARNING"],
            "decoded": [list(f) for f in hotpath.FrameDecoder().feed(b"\\x00\\x00\\x00\\x00\\x01a")],
        }, default=repr))
    """
)


def run_blocked(require: str | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "CURSOR_BYOK_REQUIRE_COMPILED"}
    if require is not None:
        env["CURSOR_BYOK_REQUIRE_COMPILED"] = require
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_AND_IMPORT], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_missing_compiled_module_falls_back_to_the_twin_with_a_warning() -> None:
    result = run_blocked(None)
    assert result["implementation"]["frames"] == "python"
    assert result["decoder_module"] == "cursor_byok.hotpath.frames_py"
    assert result["compiled_frames"] is True
    assert any("frames" in message and "pure-Python" in message for message in result["warnings"])
    assert result["decoded"] == [[0, "b'a'"]]


def test_missing_compiled_module_is_an_import_error_when_required() -> None:
    result = run_blocked("1")
    assert "cursor_byok.hotpath._frames" in result["import_error"]
    assert "CURSOR_BYOK_REQUIRE_COMPILED=1" in result["import_error"]


def test_required_flag_other_than_one_still_falls_back() -> None:
    assert run_blocked("0")["implementation"]["frames"] == "python"
