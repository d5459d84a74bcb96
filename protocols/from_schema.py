#!/usr/bin/env python3
"""Author protocols/cursor/*.proto from the shared wire schema (shared/cursor-wire/schema.json).

The schema lists every message and enum of Cursor's agent wire format with field names, numbers,
types, labels, oneofs and maps. This script turns it into one proto3 file per package
(agent.v1, aiserver.v1) so that every variant the IDE may send decodes into a typed message.
google.protobuf.* entries in the schema are the well-known types and come from the standard
`google/protobuf/struct.proto` import instead of being re-declared.

Output is deterministic: types are emitted sorted by name, fields in schema order, each oneof as
one block at the position of its first member. tests/protocol/test_generated_up_to_date.py
re-runs `render()` and compares with the committed files.

Usage: python protocols/from_schema.py [--schema PATH] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# Package → file name under protocols/ (also the name the descriptor pool registers).
PACKAGE_FILES: dict[str, str] = {
    "agent.v1": "cursor/agent_v1.proto",
    "aiserver.v1": "cursor/aiserver_v1.proto",
}
# Well-known types come from their standard import, never re-declared.
WELL_KNOWN_FILES: dict[str, str] = {
    "google.protobuf.Struct": "google/protobuf/struct.proto",
    "google.protobuf.Value": "google/protobuf/struct.proto",
    "google.protobuf.ListValue": "google/protobuf/struct.proto",
    "google.protobuf.NullValue": "google/protobuf/struct.proto",
}
SCALARS = frozenset(
    {
        "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
        "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes",
    }
)
INDENT = "  "


def default_schema_path() -> Path:
    """schema.json in the shared folder: $CURSOR_BYOK_SHARED, else ../shared beside the repo."""
    shared = os.environ.get("CURSOR_BYOK_SHARED")
    base = Path(shared) if shared else REPO.parent / "shared"
    return base / "cursor-wire" / "schema.json"


@dataclass
class _Node:
    """One message or enum with the types nested inside it."""

    full_name: str
    kind: str  # "message" | "enum"
    body: Mapping[str, Any]
    children: dict[str, _Node] = field(default_factory=dict)


def _package_of(full_name: str) -> str:
    parts = full_name.split(".")
    return ".".join(parts[:2])


def _build_tree(schema: Mapping[str, Any], package: str) -> dict[str, _Node]:
    nodes: dict[str, _Node] = {}
    for kind, table in (("message", schema["messages"]), ("enum", schema["enums"])):
        for name, body in table.items():
            if _package_of(name) == package:
                nodes[name] = _Node(name, kind, body)
    roots: dict[str, _Node] = {}
    for name in sorted(nodes):
        parent = name.rsplit(".", 1)[0]
        if parent == package:
            roots[name] = nodes[name]
        elif parent in nodes and nodes[parent].kind == "message":
            nodes[parent].children[name] = nodes[name]
        else:
            raise ValueError(f"{name}: enclosing message {parent} is not in the schema")
    return roots


def _type_ref(type_name: str) -> str:
    if type_name in SCALARS:
        return type_name
    return "." + type_name  # fully qualified: never ambiguous, whatever the nesting


def _referenced_types(body: Mapping[str, Any]) -> Iterable[str]:
    for f in body.get("fields", ()):
        if "map" in f:
            yield f["map"]["value"]
        else:
            yield f["type"]


def _imports(schema: Mapping[str, Any], package: str) -> list[str]:
    files: set[str] = set()
    for name, body in schema["messages"].items():
        if _package_of(name) != package:
            continue
        for ref in _referenced_types(body):
            if ref in SCALARS or _package_of(ref) == package:
                continue
            if ref in WELL_KNOWN_FILES:
                files.add(WELL_KNOWN_FILES[ref])
            elif _package_of(ref) in PACKAGE_FILES:
                files.add(PACKAGE_FILES[_package_of(ref)])
            else:
                raise ValueError(f"{name}: type {ref} belongs to no known file")
    return sorted(files)


def _field_line(f: Mapping[str, Any], in_oneof: bool) -> str:
    if "map" in f:
        key, value = f["map"]["key"], f["map"]["value"]
        decl = f"map<{_type_ref(key)}, {_type_ref(value)}>"
    else:
        decl = _type_ref(f["type"])
        label = f.get("label")
        if label in ("optional", "repeated") and not in_oneof:
            decl = f"{label} {decl}"
        elif label is not None:
            raise ValueError(f"field {f['name']}: label {label!r} inside oneof {f.get('oneof')}")
    return f"{decl} {f['name']} = {f['number']};"


def _render_message(node: _Node, depth: int, out: list[str]) -> None:
    pad = INDENT * depth
    out.append(f"{pad}message {node.full_name.rsplit('.', 1)[1]} {{")
    for child in node.children.values():
        _render_node(child, depth + 1, out)
    fields = node.body.get("fields", [])
    emitted_oneofs: set[str] = set()
    for f in fields:
        oneof = f.get("oneof")
        if oneof is None:
            out.append(f"{pad}{INDENT}{_field_line(f, in_oneof=False)}")
            continue
        if oneof in emitted_oneofs:
            continue
        emitted_oneofs.add(oneof)
        out.append(f"{pad}{INDENT}oneof {oneof} {{")
        for member in fields:
            if member.get("oneof") == oneof:
                out.append(f"{pad}{INDENT * 2}{_field_line(member, in_oneof=True)}")
        out.append(f"{pad}{INDENT}}}")
    declared = set(node.body.get("oneofs", []))
    if declared != emitted_oneofs:
        raise ValueError(f"{node.full_name}: oneofs {sorted(declared)} vs used {sorted(emitted_oneofs)}")
    out.append(f"{pad}}}")


def _render_enum(node: _Node, depth: int, out: list[str]) -> None:
    pad = INDENT * depth
    values = node.body["values"]
    out.append(f"{pad}enum {node.full_name.rsplit('.', 1)[1]} {{")
    numbers = [v["number"] for v in values]
    if len(set(numbers)) != len(numbers):
        out.append(f"{pad}{INDENT}option allow_alias = true;")
    for v in values:
        out.append(f"{pad}{INDENT}{v['name']} = {v['number']};")
    out.append(f"{pad}}}")


def _render_node(node: _Node, depth: int, out: list[str]) -> None:
    if node.kind == "message":
        _render_message(node, depth, out)
    else:
        _render_enum(node, depth, out)


def render_package(schema: Mapping[str, Any], package: str) -> str:
    out = [
        "// GENERATED by protocols/from_schema.py from shared/cursor-wire/schema.json.",
        "// Do not edit by hand: change the schema or the generator, then run",
        "//   python protocols/from_schema.py && python protocols/generate.py",
        "// Field names and numbers are Cursor's wire format; the file layout is ours.",
        'syntax = "proto3";',
        "",
        f"package {package};",
        "",
    ]
    imports = _imports(schema, package)
    for path in imports:
        out.append(f'import "{path}";')
    if imports:
        out.append("")
    for node in _build_tree(schema, package).values():
        _render_node(node, 0, out)
        out.append("")
    return "\n".join(out)


def render(schema: Mapping[str, Any]) -> dict[str, str]:
    """File name (relative to protocols/) → .proto text, for every package in the schema."""
    return {path: render_package(schema, package) for package, path in PACKAGE_FILES.items()}


def load_schema(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        schema: dict[str, Any] = json.load(fh)
    unknown = {
        _package_of(name)
        for table in (schema["messages"], schema["enums"])
        for name in table
        if _package_of(name) not in PACKAGE_FILES and name not in WELL_KNOWN_FILES
    }
    if unknown:
        raise ValueError(f"schema has packages with no target file: {sorted(unknown)}")
    return schema


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schema", type=Path, default=default_schema_path())
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args(argv)
    for rel, text in render(load_schema(args.schema)).items():
        target = args.out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
