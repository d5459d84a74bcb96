"""Our generated descriptors agree with shared/cursor-wire/schema.json, message by message.

Compared through the runtime descriptors of the pb2 modules (what actually decodes traffic),
not the .proto text: every message, field (name, number, type, label, oneof, map key/value)
and enum value, in both directions.
"""
from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

from cursor_byok.protocol import agent_pb2, aiserver_pb2

_SCALAR_TYPES: dict[str, int] = {
    "double": FieldDescriptor.TYPE_DOUBLE,
    "float": FieldDescriptor.TYPE_FLOAT,
    "int32": FieldDescriptor.TYPE_INT32,
    "int64": FieldDescriptor.TYPE_INT64,
    "uint32": FieldDescriptor.TYPE_UINT32,
    "uint64": FieldDescriptor.TYPE_UINT64,
    "sint32": FieldDescriptor.TYPE_SINT32,
    "sint64": FieldDescriptor.TYPE_SINT64,
    "fixed32": FieldDescriptor.TYPE_FIXED32,
    "fixed64": FieldDescriptor.TYPE_FIXED64,
    "sfixed32": FieldDescriptor.TYPE_SFIXED32,
    "sfixed64": FieldDescriptor.TYPE_SFIXED64,
    "bool": FieldDescriptor.TYPE_BOOL,
    "string": FieldDescriptor.TYPE_STRING,
    "bytes": FieldDescriptor.TYPE_BYTES,
}
_POOL = descriptor_pool.Default()
_OUR_FILES = (agent_pb2.DESCRIPTOR, aiserver_pb2.DESCRIPTOR)

# The variant containers the server reads or writes, with their oneof name.
VARIANT_CONTAINERS = {
    "agent.v1.AgentClientMessage": "message",
    "agent.v1.AgentServerMessage": "message",
    "agent.v1.ExecServerMessage": "message",
    "agent.v1.ExecClientMessage": "message",
    "agent.v1.InteractionUpdate": "message",
    "agent.v1.InteractionQuery": "query",
    "agent.v1.InteractionResponse": "result",
    "agent.v1.ConversationAction": "action",
}

# Every variant PROTOCOL.md section 2 names (and the server sends or reads), as (name, number).
REQUIRED_VARIANTS: dict[str, list[tuple[str, int]]] = {
    "agent.v1.AgentClientMessage": [
        ("run_request", 1), ("exec_client_message", 2), ("kv_client_message", 3),
        ("conversation_action", 4), ("exec_client_control_message", 5),
        ("interaction_response", 6), ("client_heartbeat", 7), ("prewarm_request", 8),
    ],
    "agent.v1.AgentServerMessage": [
        ("interaction_update", 1), ("exec_server_message", 2),
        ("conversation_checkpoint_update", 3), ("kv_server_message", 4),
        ("exec_server_control_message", 5), ("interaction_query", 7),
    ],
    "agent.v1.ConversationAction": [
        ("user_message_action", 1), ("resume_action", 2), ("cancel_action", 3),
        ("summarize_action", 4), ("shell_command_action", 5), ("start_plan_action", 6),
        ("execute_plan_action", 7), ("async_ask_question_completion_action", 8),
        ("cancel_subagent_action", 10), ("background_task_completion_action", 12),
        ("background_shell_action", 13), ("background_subagent_action", 14),
        ("subscription_notification_action", 16), ("goal_continuation_action", 18),
        ("inject_context_action", 19),
    ],
    "agent.v1.InteractionUpdate": [
        ("text_delta", 1), ("tool_call_started", 2), ("tool_call_completed", 3),
        ("thinking_delta", 4), ("thinking_completed", 5), ("user_message_appended", 6),
        ("partial_tool_call", 7), ("token_delta", 8), ("summary", 9), ("summary_started", 10),
        ("summary_completed", 11), ("shell_output_delta", 12), ("heartbeat", 13),
        ("turn_ended", 14), ("tool_call_delta", 15), ("step_started", 16),
        ("step_completed", 17), ("prompt_suggestion", 18), ("post_request_prompt", 19),
        ("active_branch_change", 20), ("feedback_request", 21), ("response_comparison", 22),
        ("context_injection_state", 23),
    ],
    "agent.v1.ExecServerMessage": [
        ("shell_args", 2), ("write_args", 3), ("delete_args", 4), ("grep_args", 5),
        ("read_args", 7), ("ls_args", 8), ("diagnostics_args", 9), ("request_context_args", 10),
        ("mcp_args", 11), ("shell_stream_args", 14), ("background_shell_spawn_args", 16),
        ("list_mcp_resources_exec_args", 17), ("read_mcp_resource_exec_args", 18),
        ("fetch_args", 20), ("record_screen_args", 21), ("computer_use_args", 22),
        ("write_shell_stdin_args", 23), ("execute_hook_args", 27), ("subagent_args", 28),
        ("redacted_read_args", 29), ("force_background_shell_args", 30),
        ("force_background_subagent_args", 31), ("mcp_state_exec_args", 36),
        ("subagent_await_args", 37), ("smart_mode_classifier_args", 38),
        ("canvas_diagnostics_args", 40), ("shell_allowlist_precheck_args", 41),
        ("mcp_allowlist_precheck_args", 42), ("web_fetch_allowlist_precheck_args", 43),
        ("git_diff_request", 44), ("pi_read_args", 45), ("pi_bash_args", 46),
        ("pi_edit_args", 47), ("pi_write_args", 48), ("pi_grep_args", 49),
        ("pi_find_args", 50), ("pi_ls_args", 51), ("mini_swe_agent_bash_args", 52),
        ("conversation_search_args", 53), ("agent_store_conflict_args", 54),
    ],
    "agent.v1.ExecClientMessage": [
        ("shell_result", 2), ("write_result", 3), ("delete_result", 4), ("grep_result", 5),
        ("read_result", 7), ("ls_result", 8), ("diagnostics_result", 9),
        ("request_context_result", 10), ("mcp_result", 11), ("shell_stream", 14),
        ("fetch_result", 20), ("write_shell_stdin_result", 23), ("subagent_result", 28),
        ("redacted_read_result", 29), ("git_diff_response", 44), ("pi_read_result", 46),
        ("pi_ls_result", 52), ("conversation_search_result", 53),
        ("agent_store_conflict_result", 54), ("mini_swe_agent_bash_result", 55),
    ],
    "agent.v1.InteractionQuery": [
        ("web_search_request_query", 2), ("ask_question_interaction_query", 3),
        ("switch_mode_request_query", 4), ("create_plan_request_query", 7),
        ("setup_vm_environment_args", 8), ("web_fetch_request_query", 9),
        ("pr_management_request_query", 10), ("mcp_auth_request_query", 11),
        ("generate_image_request_query", 12), ("replace_env_args", 13),
        ("connect_scm_request_query", 14),
    ],
    "agent.v1.InteractionResponse": [
        ("web_search_request_response", 2), ("ask_question_interaction_response", 3),
        ("switch_mode_request_response", 4), ("create_plan_request_response", 7),
        ("web_fetch_request_response", 9), ("mcp_auth_request_response", 11),
    ],
    "agent.v1.ExecClientControlMessage": [("stream_close", 1), ("throw", 2), ("heartbeat", 3)],
    "agent.v1.ExecServerControlMessage": [("abort", 1)],
    "agent.v1.KvServerMessage": [("get_blob_args", 2), ("set_blob_args", 3)],
    "agent.v1.KvClientMessage": [("get_blob_result", 2), ("set_blob_result", 3)],
    "agent.v1.ContextInjectionState": [
        ("queued", 1), ("delivered", 2), ("queued_for_next_turn", 3), ("cancelled", 4), ("rejected", 5),
    ],
}


def _type_name(field: FieldDescriptor) -> str:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return field.message_type.full_name
    if field.type == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.full_name
    for name, code in _SCALAR_TYPES.items():
        if code == field.type:
            return name
    return f"<type {field.type}>"


def _is_map(field: FieldDescriptor) -> bool:
    return (
        field.is_repeated
        and field.type == FieldDescriptor.TYPE_MESSAGE
        and field.message_type.GetOptions().map_entry
    )


def _proto3_optional(desc: Descriptor) -> set[str]:
    proto = descriptor_pb2.DescriptorProto()
    desc.CopyToProto(proto)
    return {f.name for f in proto.field if f.proto3_optional}


def _describe_field(field: FieldDescriptor, optional_names: set[str]) -> dict[str, Any]:
    """Our descriptor's field in the schema's vocabulary."""
    out: dict[str, Any] = {"name": field.name, "number": field.number}
    if _is_map(field):
        entry = field.message_type
        key, value = _type_name(entry.fields_by_name["key"]), _type_name(entry.fields_by_name["value"])
        out["type"] = f"map<{key},{value}>"
        out["map"] = {"key": key, "value": value}
        return out
    out["type"] = _type_name(field)
    if field.is_repeated:
        out["label"] = "repeated"
    elif field.name in optional_names:
        out["label"] = "optional"
    elif field.containing_oneof is not None:
        out["oneof"] = field.containing_oneof.name
    return out


def _normalize_schema_field(f: dict[str, Any]) -> dict[str, Any]:
    out = {k: f[k] for k in ("name", "number", "type")}
    for key in ("label", "oneof", "map"):
        if key in f:
            out[key] = f[key]
    return out


def _message_differences(name: str, spec: dict[str, Any]) -> list[str]:
    try:
        desc = _POOL.FindMessageTypeByName(name)
    except KeyError:
        return [f"{name}: message missing from our descriptors"]
    diffs: list[str] = []
    optional_names = _proto3_optional(desc)
    ours = {f.name: _describe_field(f, optional_names) for f in desc.fields}
    theirs = {f["name"]: _normalize_schema_field(f) for f in spec["fields"]}
    for field_name in sorted(set(ours) | set(theirs)):
        a, b = ours.get(field_name), theirs.get(field_name)
        if a != b:
            diffs.append(f"{name}.{field_name}: ours={a} schema={b}")
    real_oneofs = sorted(
        o.name for o in desc.oneofs if not all(f.name in optional_names for f in o.fields)
    )
    if real_oneofs != sorted(spec["oneofs"]):
        diffs.append(f"{name}: oneofs ours={real_oneofs} schema={sorted(spec['oneofs'])}")
    return diffs


def _enum_differences(name: str, spec: dict[str, Any]) -> list[str]:
    try:
        desc: EnumDescriptor = _POOL.FindEnumTypeByName(name)
    except KeyError:
        return [f"{name}: enum missing from our descriptors"]
    ours = sorted((v.name, v.number) for v in desc.values)
    theirs = sorted((v["name"], v["number"]) for v in spec["values"])
    if ours != theirs:
        return [f"{name}: values only ours={sorted(set(ours) - set(theirs))} only schema={sorted(set(theirs) - set(ours))}"]
    return []


def _all_our_types() -> tuple[set[str], set[str]]:
    messages: set[str] = set()
    enums: set[str] = set()

    def walk(desc: Descriptor) -> None:
        if desc.GetOptions().map_entry:
            return  # synthesized by protoc for map<,> fields, not a schema type
        messages.add(desc.full_name)
        for enum in desc.enum_types:
            enums.add(enum.full_name)
        for nested in desc.nested_types:
            walk(nested)

    for file in _OUR_FILES:
        for desc in file.message_types_by_name.values():
            walk(desc)
        enums.update(e.full_name for e in file.enum_types_by_name.values())
    return messages, enums


def test_schema_counts(schema: dict[str, Any]) -> None:
    assert len(schema["messages"]) == 873
    assert len(schema["enums"]) == 46


def test_every_message_field_and_enum_matches_schema(schema: dict[str, Any]) -> None:
    diffs: list[str] = []
    for name, spec in sorted(schema["messages"].items()):
        diffs.extend(_message_differences(name, spec))
    for name, spec in sorted(schema["enums"].items()):
        diffs.extend(_enum_differences(name, spec))
    assert not diffs, f"{len(diffs)} differences from schema.json:\n" + "\n".join(diffs)


def test_no_types_beyond_the_schema(schema: dict[str, Any]) -> None:
    messages, enums = _all_our_types()
    assert sorted(messages - set(schema["messages"])) == []
    assert sorted(enums - set(schema["enums"])) == []
    # And every agent.v1 / aiserver.v1 type of the schema lives in our two files.
    ours = {n for n in schema["messages"] if not n.startswith("google.")}
    assert sorted(ours - messages) == []


def unmodeled_variants(schema: dict[str, Any]) -> dict[str, list[str]]:
    """Per container: schema oneof variants that our descriptor does not have."""
    missing: dict[str, list[str]] = {}
    for container, oneof in VARIANT_CONTAINERS.items():
        desc = _POOL.FindMessageTypeByName(container)
        ours = {f.name for f in desc.oneofs_by_name[oneof].fields}
        wanted = [f["name"] for f in schema["messages"][container]["fields"] if f.get("oneof") == oneof]
        gaps = sorted(set(wanted) - ours)
        if gaps:
            missing[container] = gaps
    return missing


def test_no_unmodeled_variants(schema: dict[str, Any]) -> None:
    assert unmodeled_variants(schema) == {}


@pytest.mark.parametrize("container", sorted(REQUIRED_VARIANTS))
def test_variants_named_in_protocol_are_modeled(container: str) -> None:
    desc = _POOL.FindMessageTypeByName(container)
    missing = []
    for name, number in REQUIRED_VARIANTS[container]:
        field = desc.fields_by_name.get(name)
        if field is None or field.number != number or field.containing_oneof is None:
            missing.append(f"{name}={number}")
    assert not missing, f"{container} lacks {missing}"


def test_ttft_breakdown_sits_outside_the_server_oneof() -> None:
    field = agent_pb2.AgentServerMessage.DESCRIPTOR.fields_by_name["ttft_breakdown"]
    assert field.number == 8 and field.containing_oneof is None


def test_unknown_fields_survive_a_round_trip() -> None:
    msg = agent_pb2.AgentClientMessage()
    msg.client_heartbeat.SetInParent()
    known = msg.SerializeToString()
    # field 999, length-delimited, "hi"; then field 1000 varint 7.
    extra = bytes.fromhex("ba3e026869") + bytes.fromhex("c03e07")
    wire = known + extra
    parsed = agent_pb2.AgentClientMessage.FromString(wire)
    assert parsed.WhichOneof("message") == "client_heartbeat"
    assert parsed.SerializeToString() == wire


def test_unknown_fields_survive_inside_nested_messages() -> None:
    # An InteractionUpdate carrying a variant number we do not know (99) inside a known server msg.
    inner = bytes.fromhex("9a0603616263")  # field 99, length 3, "abc"
    wire = bytes([0x0A, len(inner)]) + inner
    parsed = agent_pb2.AgentServerMessage.FromString(wire)
    assert parsed.WhichOneof("message") == "interaction_update"
    assert parsed.interaction_update.WhichOneof("message") is None
    assert parsed.SerializeToString() == wire
