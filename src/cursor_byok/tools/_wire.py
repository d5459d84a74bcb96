"""Small protobuf helpers shared by the tool executions (wire shapes only, no state)."""
from __future__ import annotations

import json
import math
from typing import Any

from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from cursor_byok.protocol import agent_pb2 as pb, unknown_fields, which

__all__ = [
    "pb",
    "exec_server_message",
    "interaction_query",
    "json_to_value",
    "value_to_json",
    "struct_to_json",
    "unknown_fields",
    "which",
]


def exec_server_message(
    call_id: str,
    field: str,
    args: Message,
    *,
    accept_hook_additional_contexts: bool | None = True,
) -> pb.ExecServerMessage:
    """An ExecServerMessage with `field` (an args oneof member) set; `.id` is left for the runtime.

    exec_id is the model's call id, as is every args.tool_call_id (PROTOCOL 2.2.1).
    """
    message = pb.ExecServerMessage(exec_id=call_id)
    getattr(message, field).CopyFrom(args)
    if accept_hook_additional_contexts is not None:
        message.accept_hook_additional_contexts = accept_hook_additional_contexts
    return message


def interaction_query(field: str, query: Message) -> pb.InteractionQuery:
    """An InteractionQuery with `field` set; `.id` is left for the runtime."""
    message = pb.InteractionQuery()
    getattr(message, field).CopyFrom(query)
    return message


def json_to_value(value: Any) -> struct_pb2.Value:
    """A JSON value as google.protobuf.Value (numbers become doubles, as the type requires)."""
    out = struct_pb2.Value()
    if value is None:
        out.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, (int, float)):
        number = float(value)
        if math.isfinite(number):
            out.number_value = number
        else:  # JSON has no NaN/inf; keep the text so nothing is silently lost
            out.string_value = str(value)
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, dict):
        out.struct_value.SetInParent()
        for key, item in value.items():
            out.struct_value.fields[str(key)].CopyFrom(json_to_value(item))
    elif isinstance(value, (list, tuple)):
        out.list_value.SetInParent()
        for item in value:
            out.list_value.values.add().CopyFrom(json_to_value(item))
    else:
        out.string_value = json.dumps(value, default=str)
    return out


def _tidy(value: Any) -> Any:
    # google.protobuf.Value stores every number as a double; show 2 rather than 2.0.
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: _tidy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_tidy(item) for item in value]
    return value


def value_to_json(value: struct_pb2.Value) -> Any:
    return _tidy(json_format.MessageToDict(value))


def struct_to_json(value: struct_pb2.Struct) -> dict[str, Any]:
    return _tidy(json_format.MessageToDict(value))

