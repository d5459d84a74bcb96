"""A newer Cursor: wire enum values, oneof members and fields this build does not know.

Cursor ships every week and the server mirrors a schema it does not control. protobuf keeps what a
newer client sends: an open enum holds the int, an unknown oneof member or field stays an unknown
field of its message (serialized again when we copy or forward it). The code that reads them must
never fail on them, so a wire enum's name and a oneof's member are read only through these:

- `enum_name(EnumType, value)`: the value's name, or `unknown(N)`.
- `which(message, oneof)`: the member set, or None when no member this build knows is set (empty,
  or newer). The convention for a switch on it: its last branch takes None and ignores the input
  (a stream or control message) or fails only the one item it answers (a tool result), never the
  run.

`unknown_fields` reports fields of a client message this build does not know. Given the client
message's wire bytes it first asks the compiled wire scan (`hotpath.holds_unknown`, ~1 µs: it
skips the text a message carries) and walks the message only when they may hold such a field.
Each kind of unknown (an enum value, a oneof, a field) is logged once at INFO, so an operator
learns that the IDE is newer than the server without a line per message.
"""
from __future__ import annotations

import logging

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from .. import hotpath
from .pb import agent_v1_pb2

__all__ = ["enum_name", "which", "unknown_fields"]

log = logging.getLogger("cursor_byok.protocol.compat")

_MAX_NOTICED = 1024  # a client spraying new values costs at most this many remembered kinds
_noticed: set[str] = set()


def _notice(kind: str, text: str) -> None:
    if kind in _noticed or len(_noticed) >= _MAX_NOTICED:
        return
    _noticed.add(kind)
    log.info("a newer Cursor: %s", text, extra={"unknown": kind})


def enum_name(enum: EnumTypeWrapper, value: int) -> str:
    """The name of `value` in a wire enum, or `unknown(N)` for a value newer than our schema."""
    known = enum.DESCRIPTOR.values_by_number.get(value)
    if known is not None:
        return known.name
    kind = f"{enum.DESCRIPTOR.full_name}={value}"
    _notice(kind, f"{enum.DESCRIPTOR.full_name} value {value} is newer than this build; handled as unknown({value})")
    return f"unknown({value})"


def which(message: Message, oneof: str) -> str | None:
    """The member of `oneof` set in `message`, or None when none this build knows is set."""
    member = message.WhichOneof(oneof)
    if member is None:
        numbers = _unknown_numbers(message)
        if numbers:
            kind = f"{message.DESCRIPTOR.full_name}.{oneof}"
            _notice(kind, f"{kind} holds no member this build knows (newer fields {numbers}); handled as none")
    return member


def unknown_fields(message: Message, depth: int = 3, *, wire: bytes | None = None) -> list[str]:
    """Fields newer than our schema in `message` and the messages set in it, `depth` levels down
    (repeated ones by their first element): `<message type>#<field number>` each. `wire`: the
    serialized AgentClientMessage that `message` is or is in, when the caller holds it."""
    found: list[str] = []
    if wire is not None and _WIRE_SCAN_COMPILED and not hotpath.holds_unknown(wire, CLIENT_MESSAGE_SCHEMA):
        return found
    if _holds_unknown(message):
        _collect(message, depth, found)
    for kind in found:
        _notice(kind, f"field {kind} is newer than this build; ignored here, kept where the message is passed on")
    return found


def _holds_unknown(message: Message) -> bool:
    """Whether `message` or any message in it holds a field this build does not know, in one pass
    of the protobuf runtime (a copy without its unknown fields serializes shorter). Most messages
    hold none, and `_collect`'s walk over the fields in Python is what a run start paid for that
    (a run request: ~14 µs hot, 46-58 µs in the server, against ~4 µs here)."""
    copy = type(message)()
    copy.CopyFrom(message)
    size = copy.ByteSize()
    copy.DiscardUnknownFields()
    return copy.ByteSize() != size


def _collect(message: Message, depth: int, found: list[str]) -> None:
    name = message.DESCRIPTOR.full_name
    found.extend(f"{name}#{number}" for number in _unknown_numbers(message))
    if depth <= 1:
        return
    for field, members, repeated in _message_fields(message.DESCRIPTOR):
        if repeated:
            values = getattr(message, field)
            if values:
                _collect(values[0], depth - 1, found)
        elif members is None:
            if message.HasField(field):
                _collect(getattr(message, field), depth - 1, found)
        else:
            member = message.WhichOneof(field)
            if member in members:
                _collect(getattr(message, member), depth - 1, found)


# (name, None, repeated) of a field holding messages, or (oneof name, its members holding messages,
# False) for a oneof: one entry per message type
_message_fields_of: dict[Descriptor, tuple[tuple[str, frozenset[str] | None, bool], ...]] = {}


def _message_fields(descriptor: Descriptor) -> tuple[tuple[str, frozenset[str] | None, bool], ...]:
    """What `_collect` looks into, by field number (maps aside): the fields holding messages, a
    oneof's as one entry where its first such member is (asked which member is set: one call, not
    one per member; a run request's action has dozens). Not `ListFields`, which would also build
    every string set in the message (a run request's is the user's whole turn) only to skip it:
    ~100 µs per run start."""
    fields = _message_fields_of.get(descriptor)
    if fields is None:
        plan: list[tuple[str, frozenset[str] | None, bool]] = []
        oneofs: set[str] = set()
        for f in sorted(descriptor.fields, key=lambda f: f.number):
            if f.message_type is None or f.message_type.GetOptions().map_entry:
                continue
            oneof = None if f.is_repeated else f.containing_oneof
            if oneof is None:
                plan.append((f.name, None, f.is_repeated))
            elif oneof.name not in oneofs:
                oneofs.add(oneof.name)
                plan.append((oneof.name, frozenset(m.name for m in oneof.fields if m.message_type is not None), False))
        fields = _message_fields_of[descriptor] = tuple(plan)
    return fields


class WireSchema:
    """The field numbers and wire types of a message type and of every type it holds, as the
    plain tables `hotpath.holds_unknown` reads (see `hotpath.wire_py`). A type's table is built
    when a scan first enters one of its messages: the client message reaches some 750 types, a
    run start a few dozen."""

    def __init__(self, root: Descriptor) -> None:
        self._descriptors: list[Descriptor] = [root]
        self._index: dict[str, int] = {root.full_name: 0}
        self.tables: list[dict[int, int] | None] = [None]

    def build(self, index: int) -> dict[int, int]:
        table = {f.number: self._entry(f) for f in self._descriptors[index].fields}
        self.tables[index] = table
        return table

    def _entry(self, field: FieldDescriptor) -> int:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            return (self._index_of(field.message_type) + 1) << 4 | hotpath.WIRE_LEN
        wire = _WIRE_OF_TYPE.get(field.type, _NEVER)  # a group: never matched, so always "unsure"
        packable = field.is_repeated and wire != hotpath.WIRE_LEN
        return wire | (hotpath.PACKABLE if packable else 0)

    def _index_of(self, descriptor: Descriptor) -> int:
        index = self._index.get(descriptor.full_name)
        if index is None:
            index = self._index[descriptor.full_name] = len(self._descriptors)
            self._descriptors.append(descriptor)
            self.tables.append(None)
        return index


_NEVER = 7  # no wire type: a field of a kind the scan does not follow
_WIRE_OF_TYPE = {
    **dict.fromkeys((FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64,
                     FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_ENUM),
                    hotpath.WIRE_VARINT),
    **dict.fromkeys((FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64, FieldDescriptor.TYPE_DOUBLE), hotpath.WIRE_I64),
    **dict.fromkeys((FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_SFIXED32, FieldDescriptor.TYPE_FLOAT), hotpath.WIRE_I32),
    **dict.fromkeys((FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES), hotpath.WIRE_LEN),
}
CLIENT_MESSAGE_SCHEMA = WireSchema(agent_v1_pb2.AgentClientMessage.DESCRIPTOR)
# The pure twin walks the wire in Python: slower than `_holds_unknown`'s copy, so only the compiled scan is asked.
_WIRE_SCAN_COMPILED = hotpath.compiled["wire"] is not None


def _unknown_numbers(message: Message) -> list[int]:
    return sorted({field.field_number for field in UnknownFieldSet(message)})
