from __future__ import annotations

import base64

from google.protobuf import json_format, struct_pb2

from cursor_byok.prompting import FIXED_TOOLS, mcp_tool_names
from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.tools import (
    McpDescriptor,
    ToolContext,
    advertised_tools,
    mcp_descriptors_from_run_request,
    start_tool,
)

from .support import done, reply, request, sent


def test_descriptors_from_run_request():
    run = pb.AgentRunRequest()
    definition = run.mcp_tools.mcp_tools.add(
        name="github-create_issue", provider_identifier="github", tool_name="create_issue", description="Open an issue"
    )
    json_format.ParseDict({"type": "object", "properties": {"title": {"type": "string"}}}, definition.input_schema)
    run.mcp_tools.mcp_tools.add(
        name="my.server-x", provider_identifier="my.server", tool_name="x", input_schema_json='{"type": "object", "required": ["a"]}'
    )
    descriptors = mcp_descriptors_from_run_request(run)
    ctx = ToolContext(mcp_tools=descriptors)
    assert list(ctx.mcp_model_names()) == ["mcp_github_create_issue", "mcp_my_server_x"]
    first = descriptors[0]
    assert (first.server, first.name, first.provider_identifier, first.definition_name) == (
        "github",
        "create_issue",
        "github",
        "github-create_issue",
    )
    assert first.input_schema["properties"]["title"] == {"type": "string"}
    assert descriptors[1].input_schema["required"] == ["a"]
    names = advertised_tools(ctx)
    assert names == sorted(names) and "CallMcpTool" in names
    assert not any(name.startswith("mcp_") for name in names)  # the prompt compiler names those
    assert "CallMcpTool" not in advertised_tools(ToolContext())
    assert "GenerateImage" not in names and "WebSearch" not in names
    assert set(names) <= set(FIXED_TOOLS)


def test_repeated_descriptor_keeps_the_last_definition():
    run = pb.AgentRunRequest()
    run.mcp_tools.mcp_tools.add(name="a", provider_identifier="gh", tool_name="t", description="old")
    run.mcp_tools.mcp_tools.add(name="b", provider_identifier="gh", tool_name="t", description="new")
    [descriptor] = mcp_descriptors_from_run_request(run)
    assert (descriptor.definition_name, descriptor.description) == ("b", "new")


def test_dynamic_mcp_tool_routes_by_descriptor(ctx):
    execution = start_tool(request("mcp_docs_search", {"query": "install", "limit": 3, "tags": ["a"]}), ctx)
    assert execution.placeholder().WhichOneof("tool") == "mcp_tool_call"
    message = sent(execution.first())
    assert message.WhichOneof("message") == "mcp_args"
    args = message.mcp_args
    assert args.name == "docs-search"
    assert args.tool_name == "search"
    assert args.provider_identifier == "docs"
    assert args.tool_call_id == "call-1"
    assert args.args["query"].string_value == "install"
    assert args.args["limit"].number_value == 3
    assert args.args["tags"].list_value.values[0].string_value == "a"
    assert not message.HasField("accept_hook_additional_contexts")
    success = pb.McpSuccess()
    success.content.add(text=pb.McpTextContent(text="result one"))
    success.content.add(text=pb.McpTextContent(text="result two"))
    outcome = done(execution.on_exec_result(reply(message, mcp_result=pb.McpResult(success=success))))
    assert outcome.content == "result one\nresult two" and not outcome.is_error
    card = execution.completed().mcp_tool_call
    assert card.description == "Search the docs"
    assert len(card.result.success.content) == 2


def test_mcp_success_with_is_error_flag_is_an_error(ctx):
    execution = start_tool(request("mcp_docs_search", {}), ctx)
    success = pb.McpSuccess(is_error=True)
    success.content.add(text=pb.McpTextContent(text="rate limited"))
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), mcp_result=pb.McpResult(success=success))))
    assert outcome.is_error and outcome.content == "rate limited"


def test_mcp_image_content_is_attached(ctx):
    execution = start_tool(request("mcp_docs_search", {}), ctx)
    success = pb.McpSuccess()
    success.content.add(image=pb.McpImageContent(data=b"\x89PNG....", mime_type="image/png"))
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), mcp_result=pb.McpResult(success=success))))
    assert len(outcome.images) == 1
    assert outcome.images[0].media_type == "image/png"
    assert base64.b64decode(outcome.images[0].data_base64) == b"\x89PNG...."


def test_mcp_structured_content_when_no_text(ctx):
    execution = start_tool(request("mcp_docs_search", {}), ctx)
    success = pb.McpSuccess()
    success.structured_content.update({"hits": 2})
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), mcp_result=pb.McpResult(success=success))))
    assert outcome.content == '{"hits": 2}'


def test_call_mcp_tool_resolves_server_and_tool(ctx):
    execution = start_tool(
        request("CallMcpTool", {"server": "docs", "toolName": "search", "arguments": {"query": "q"}}), ctx
    )
    message = sent(execution.first())
    assert message.mcp_args.name == "docs-search"
    assert message.mcp_args.server_identifier == "docs"
    assert message.mcp_args.args["query"].string_value == "q"
    assert message.accept_hook_additional_contexts is True
    result = pb.McpResult(error=pb.McpError(error="server crashed"))
    outcome = done(execution.on_exec_result(reply(message, mcp_result=result)))
    assert outcome.is_error and "server crashed" in outcome.content
    assert execution.completed().mcp_tool_call.result.error.error.endswith("server crashed")


def test_unknown_mcp_descriptor_is_a_tool_error(ctx):
    outcome = done(start_tool(request("CallMcpTool", {"server": "docs", "toolName": "nope"}), ctx).first())
    assert outcome.is_error and outcome.content.startswith("unknown MCP tool")
    outcome = done(start_tool(request("mcp_other_tool", {}), ctx).first())
    assert outcome.is_error and outcome.content.startswith("unknown MCP tool")


def test_mcp_failure_variants(ctx):
    for result in [
        pb.McpResult(rejected=pb.McpRejected(reason="denied")),
        pb.McpResult(permission_denied=pb.McpPermissionDenied(error="no")),
        pb.McpResult(tool_not_found=pb.McpToolNotFound(name="search", available_tools=["other"])),
        pb.McpResult(server_not_found=pb.McpServerNotFound(name="docs")),
    ]:
        execution = start_tool(request("mcp_docs_search", {}), ctx)
        assert done(execution.on_exec_result(reply(sent(execution.first()), mcp_result=result))).is_error


def test_json_to_value_round_trip(ctx):
    args = {"n": None, "b": False, "nested": {"x": [1, "two", {"y": True}]}}
    execution = start_tool(request("mcp_docs_search", args), ctx)
    value = sent(execution.first()).mcp_args.args
    as_json = {key: json_format.MessageToDict(item) for key, item in value.items()}
    assert as_json == {"n": None, "b": False, "nested": {"x": [1.0, "two", {"y": True}]}}
    assert isinstance(value["n"], struct_pb2.Value)


def test_dynamic_names_match_the_prompt_compiler(clock):
    descriptors = [
        McpDescriptor(server="my server", name="do.it"),
        McpDescriptor(server="s" * 40, name="t" * 40),
        McpDescriptor(server="a.b", name="c"),
        McpDescriptor(server="a_b", name="c"),
    ]
    ctx = ToolContext(mcp_tools=descriptors, clock_ms=clock)
    compiled = mcp_tool_names([d.for_prompt() for d in descriptors])
    names = ctx.mcp_model_names()
    assert set(names) == set(compiled.values()) and len(names) == 4
    assert "mcp_my_server_do_it" in names
    for descriptor in descriptors:
        name = compiled[(descriptor.server, descriptor.name)]
        execution = start_tool(request(name, {}), ctx)
        message = sent(execution.first())
        assert (message.mcp_args.provider_identifier, message.mcp_args.tool_name) == (
            descriptor.provider_identifier,
            descriptor.name,
        )
