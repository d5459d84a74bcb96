"""Protobuf wire bytes against a schema: does a message, or any message in it, hold a field the
schema does not know? Pure-Python twin of ext/wire.pyx (the oracle of its property tests).

The schema is plain data (no protobuf types here): `schema.tables[i]` maps each field number of
message type i to its entry, `(sub << 4) | (packable << 3) | wire type`, where `sub` is the index
+ 1 of the field's message type (0: not a message) and `packable` marks a repeated scalar, which
may also come packed (length-delimited). A table not built yet is None: `schema.build(i)` builds
and returns it. The answer errs one way only: True for anything it is not sure of (a field number
or wire type the schema does not give, a group, bytes that do not parse, nesting past MAX_DEPTH),
so False means the bytes hold no field the schema does not know.
"""
from __future__ import annotations

from typing import Any

__all__ = ["MAX_DEPTH", "WIRE_VARINT", "WIRE_I64", "WIRE_LEN", "WIRE_I32", "PACKABLE", "holds_unknown"]

WIRE_VARINT, WIRE_I64, WIRE_LEN, WIRE_I32 = 0, 1, 2, 5
PACKABLE = 8
MAX_DEPTH = 100  # protobuf's own recursion limit


class _Unsure(Exception):
    pass


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end and shift < 64:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
    raise _Unsure


def _scan(data: bytes, pos: int, end: int, schema: Any, index: int, depth: int) -> bool:
    if depth > MAX_DEPTH:
        return True
    table = schema.tables[index]
    if table is None:
        table = schema.build(index)
    while pos < end:
        tag, pos = _varint(data, pos, end)
        wire = tag & 7
        entry = table.get(tag >> 3)
        if entry is None:
            return True
        if wire == WIRE_LEN:
            length, pos = _varint(data, pos, end)
            if length > end - pos:
                return True
            if entry & 7 == WIRE_LEN:
                if entry >> 4 and _scan(data, pos, pos + length, schema, (entry >> 4) - 1, depth + 1):
                    return True
            elif not entry & PACKABLE:
                return True
            pos += length
        elif wire != entry & 7:
            return True
        elif wire == WIRE_VARINT:
            _, pos = _varint(data, pos, end)
        elif wire == WIRE_I64:
            if end - pos < 8:
                return True
            pos += 8
        elif wire == WIRE_I32:
            if end - pos < 4:
                return True
            pos += 4
        else:
            return True
    return False


def holds_unknown(data: bytes, schema: Any, root: int = 0) -> bool:
    """Whether `data`, a serialized message of type `root`, may hold a field `schema` does not
    know (False: it certainly holds none)."""
    try:
        return _scan(data, 0, len(data), schema, root, 1)
    except _Unsure:
        return True
