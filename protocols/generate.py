#!/usr/bin/env python3
"""Compile protocols/cursor/*.proto into src/cursor_byok/protocol/pb/ with grpc_tools.protoc.

protoc names a generated module after its .proto path, so `cursor/agent_v1.proto` becomes
`cursor/agent_v1_pb2.py`, and a file importing another of ours would get `from cursor import
..._pb2`. We flatten the output into the `cursor_byok.protocol.pb` package and rewrite such import
lines to point inside it. The descriptor pool still registers the files as `cursor/<name>.proto`.

tests/protocol/test_generated_up_to_date.py runs `generate()` into a temp dir and compares the
result byte for byte with the committed modules.

Usage: python protocols/generate.py [--out DIR]   (needs grpcio-tools, in the dev extras)
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROTO_DIR = HERE / "cursor"
DEFAULT_OUT = REPO / "src" / "cursor_byok" / "protocol" / "pb"
TARGET_PACKAGE = "cursor_byok.protocol.pb"
# protoc emits `from cursor import x_pb2 as ...` for an import of cursor/x.proto.
_CROSS_IMPORT = re.compile(rb"^from cursor import (\w+_pb2) as ", re.MULTILINE)
_INIT_TEXT = '''"""Generated protobuf modules for Cursor's wire format (see protocols/generate.py)."""
'''


def proto_files() -> list[Path]:
    return sorted(PROTO_DIR.glob("*.proto"))


def _fix_imports(source: bytes) -> bytes:
    return _CROSS_IMPORT.sub(rb"from " + TARGET_PACKAGE.encode() + rb" import \1 as ", source)


def generate(out_dir: Path) -> list[Path]:
    """Write <name>_pb2.py and <name>_pb2.pyi for every proto, plus __init__.py, into out_dir."""
    from grpc_tools import protoc  # dev dependency: imported only when generating
    import grpc_tools

    well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"
    protos = proto_files()
    if not protos:
        raise FileNotFoundError(f"no .proto files in {PROTO_DIR}")
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "protoc",
            f"-I{HERE}",
            f"-I{well_known}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            *(str(p.relative_to(HERE)) for p in protos),
        ]
        status = protoc.main(args)
        if status != 0:
            raise RuntimeError(f"protoc failed with status {status}: {' '.join(args)}")
        for produced in sorted((Path(tmp) / "cursor").iterdir()):
            target = out_dir / produced.name
            target.write_bytes(_fix_imports(produced.read_bytes()))
            written.append(target)
    init = out_dir / "__init__.py"
    init.write_text(_INIT_TEXT, encoding="utf-8")
    written.append(init)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.out.exists() and args.out == DEFAULT_OUT:
        # Drop modules of protos that no longer exist.
        for stale in args.out.glob("*_pb2.py*"):
            stale.unlink()
    for path in generate(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
