"""What a newer Cursor sends: fields, oneof members and enum values our schema lacks, built as raw
protobuf bytes the way a newer client would encode them."""
from __future__ import annotations

from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

NEWER_ENUM_VALUE = 99  # past every wire enum's last value; proto3 enums are open and keep it


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def add_newer_field(message: Message) -> int:
    """Add a field past the schema's last number (a small message, as most new fields are); its number."""
    number = max(f.number for f in message.DESCRIPTOR.fields) + 1
    message.MergeFromString(_varint(number << 3 | 2) + b"\x02\x08\x01")
    return number


def add_newer_member(holder: Message, oneof: str) -> int:
    """Set `oneof` to a member the schema lacks: cleared, plus a field past the last number."""
    holder.ClearField(oneof)
    return add_newer_field(holder)


def unknown_numbers(message: Message) -> set[int]:
    return {f.field_number for f in UnknownFieldSet(message)}
