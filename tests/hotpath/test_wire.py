"""The wire scan for fields newer than the schema, on both implementations: it never calls a
message clean that holds such a field (protobuf's own parse is the oracle), and it calls clean
every message our schema serializes, of every type a client message reaches."""
from __future__ import annotations

from types import ModuleType

import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from hypothesis import given
from hypothesis import strategies as st

from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.protocol.compat import CLIENT_MESSAGE_SCHEMA, WireSchema
from tests.harness.ide import run_request
from tests.harness.newer import _varint, add_newer_field

from .conftest import BOUNDED, twin_and_compiled

_SCALARS = {
    FieldDescriptor.TYPE_DOUBLE: 1.5, FieldDescriptor.TYPE_FLOAT: 2.5, FieldDescriptor.TYPE_INT64: -3, FieldDescriptor.TYPE_UINT64: 1 << 40,
    FieldDescriptor.TYPE_INT32: -5, FieldDescriptor.TYPE_FIXED64: 6, FieldDescriptor.TYPE_FIXED32: 7, FieldDescriptor.TYPE_BOOL: True,
    FieldDescriptor.TYPE_STRING: "text", FieldDescriptor.TYPE_BYTES: b"\x00\xff", FieldDescriptor.TYPE_UINT32: 300,
    FieldDescriptor.TYPE_ENUM: 1, FieldDescriptor.TYPE_SFIXED32: -9, FieldDescriptor.TYPE_SFIXED64: -10, FieldDescriptor.TYPE_SINT32: -11,
    FieldDescriptor.TYPE_SINT64: -12,
}


def reachable(root: Descriptor) -> list[Descriptor]:
    seen: dict[str, Descriptor] = {}
    todo = [root]
    while todo:
        d = todo.pop()
        if d.full_name not in seen:
            seen[d.full_name] = d
            todo.extend(f.message_type for f in d.fields if f.message_type is not None)
    return list(seen.values())


def filled(message: Message, depth: int = 2) -> Message:
    """Every field of `message` set (repeated scalars twice, so packed; map entries once;
    messages `depth` levels down), one member per oneof: the last one set wins."""
    for f in message.DESCRIPTOR.fields:
        if f.message_type is not None:
            if f.message_type.GetOptions().map_entry:
                key, value = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
                target = getattr(message, f.name)
                if value.message_type is not None:
                    if depth:
                        filled(target[_SCALARS[key.type]], depth - 1)
                else:
                    target[_SCALARS[key.type]] = _SCALARS[value.type]
            elif depth:
                filled(getattr(message, f.name).add() if f.is_repeated else getattr(message, f.name), depth - 1)
        elif f.is_repeated:
            getattr(message, f.name).extend([_SCALARS[f.type]] * 2)
        else:
            setattr(message, f.name, _SCALARS[f.type])
    return message


def has_unknown(message: Message) -> bool:
    """The oracle: protobuf's parse kept fields our schema lacks (a copy without them is shorter)."""
    copy = type(message)()
    copy.CopyFrom(message)
    size = copy.ByteSize()
    copy.DiscardUnknownFields()
    return copy.ByteSize() != size


TYPES = reachable(pb.AgentClientMessage.DESCRIPTOR)


def test_a_client_message_reaches_every_wire_type() -> None:
    used = {f.type for d in TYPES for f in d.fields}
    assert {FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_ENUM, FieldDescriptor.TYPE_INT32} <= used
    assert any(f.is_repeated and f.message_type is None for d in TYPES for f in d.fields)  # packed scalars


def test_every_message_our_schema_writes_is_clean_and_one_newer_field_is_not(wire: ModuleType) -> None:
    for descriptor in TYPES:
        schema = WireSchema(descriptor)
        message = filled(message_factory.GetMessageClass(descriptor)())
        data = message.SerializeToString()
        assert not wire.holds_unknown(data, schema), descriptor.full_name
        newer = max((f.number for f in descriptor.fields), default=0) + 1
        assert wire.holds_unknown(data + _varint(newer << 3) + b"\x01", schema), descriptor.full_name


def test_a_newer_field_deep_in_a_run_request_is_seen(wire: ModuleType) -> None:
    msg = run_request("hello " * 2000, model="m", conversation_id="c")
    assert not wire.holds_unknown(msg.SerializeToString(), CLIENT_MESSAGE_SCHEMA)
    add_newer_field(msg.run_request.action.user_message_action.user_message)
    assert wire.holds_unknown(msg.SerializeToString(), CLIENT_MESSAGE_SCHEMA)


@pytest.mark.parametrize("data", [
    b"\x12\x05\x0a\x03ab",  # run_request (2) cut short
    b"\x10\x01",  # run_request (2) as a varint: a known number with a wire type it never has
    b"\x13\x14",  # a group
    b"\x00\x01",  # field number 0
    b"\x12" + b"\xff" * 11,  # a varint past 64 bits
])
def test_bytes_it_cannot_be_sure_of_count_as_holding_one(wire: ModuleType, data: bytes) -> None:
    assert wire.holds_unknown(data, CLIENT_MESSAGE_SCHEMA)


def test_nesting_past_the_depth_limit_counts_as_holding_one(wire: ModuleType) -> None:
    schema = WireSchema(pb.AgentClientMessage.DESCRIPTOR)
    schema.tables[0] = {1: (0 + 1) << 4 | 2}  # a type that holds itself
    deep = b""
    for _ in range(wire.MAX_DEPTH + 2):
        deep = b"\x0a" + _varint(len(deep)) + deep
    assert wire.holds_unknown(deep, schema)
    shallow = b""
    for _ in range(wire.MAX_DEPTH - 1):
        shallow = b"\x0a" + _varint(len(shallow)) + shallow
    assert not wire.holds_unknown(shallow, schema)


SEED = run_request("seed " * 50, model="m", conversation_id="c").SerializeToString()


@BOUNDED
@given(at=st.integers(0, len(SEED)), cut=st.integers(0, 8), noise=st.binary(max_size=12))
def test_clean_means_protobuf_kept_nothing_newer_and_both_agree(at: int, cut: int, noise: bytes) -> None:
    """Spliced client messages: whenever protobuf parses one, a clean verdict means no unknown field."""
    data = SEED[:at] + noise + SEED[at + cut:]
    twin, compiled = twin_and_compiled("wire")
    verdict = twin.holds_unknown(data, CLIENT_MESSAGE_SCHEMA)
    assert compiled.holds_unknown(data, CLIENT_MESSAGE_SCHEMA) == verdict
    try:
        parsed = pb.AgentClientMessage.FromString(data)
    except DecodeError:
        return
    if not verdict:
        assert not has_unknown(parsed)
