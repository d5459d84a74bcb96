"""MCP tools: dynamic `mcp_<server>_<tool>` names and CallMcpTool{server, toolName, arguments}."""
from __future__ import annotations

import json
from typing import Any

from google.protobuf.message import Message

from ._wire import json_to_value, pb, struct_to_json, which
from .arguments import Arguments
from .base import ToolExecution, make_image
from .context import McpDescriptor, ToolContext
from .steps import Step

__all__ = ["McpExecution", "CallMcpToolExecution"]


class McpExecution(ToolExecution):
    """A dynamic MCP tool: the whole argument object goes to mcp_args.args."""

    tool_name = "mcp"
    variant = "mcp_tool_call"
    # Dynamic MCP execs leave accept_hook_additional_contexts unset, as the anchor does.
    _accept_hooks: bool | None = None

    def __init__(self, call: Any, ctx: ToolContext, descriptor: McpDescriptor | None, **kwargs: Any) -> None:
        self.descriptor = descriptor
        super().__init__(call, ctx, **kwargs)

    def _parse(self, a: Arguments) -> None:
        self.tool_arguments: dict[str, Any] = dict(a.raw)

    def _server_identifier(self) -> str:
        return ""

    def _mcp_args(self) -> pb.McpArgs:
        args = pb.McpArgs(tool_call_id=self.call_id)
        if self.descriptor is not None:
            args.name = self.descriptor.wire_name
            args.provider_identifier = self.descriptor.provider_identifier
            args.tool_name = self.descriptor.name
            args.server_identifier = self._server_identifier()
        for key, value in self.tool_arguments.items():
            args.args[str(key)].CopyFrom(json_to_value(value))
        return args

    def _args_pb(self) -> Message:
        return self._mcp_args()

    def _decorate(self, card: Message) -> None:
        if self.descriptor is not None and self.descriptor.description:
            card.description = self.descriptor.description

    def _unknown(self) -> str:
        return f"unknown MCP tool: {self.name}"

    def _begin(self) -> Step:
        if self.descriptor is None:
            return self._fail(self._unknown())
        return self._exec(
            "mcp_args", self._mcp_args(), expect=("mcp_result",), accept_hook_additional_contexts=self._accept_hooks
        )

    def _error_result(self, message: str) -> Message:
        return pb.McpToolResult(error=pb.McpToolError(error=message))

    def _on_exec(self, kind: str, result: pb.McpResult, message: pb.ExecClientMessage) -> Step:
        variant = which(result, "result")
        tool = self.descriptor.name if self.descriptor else self.name
        if variant == "success":
            return self._on_success(result.success)
        if variant == "error":
            return self._fail(f"MCP tool {tool} failed: {result.error.error or 'unknown error'}")
        if variant == "rejected":
            return self._finish(
                f"The MCP call to {tool} was rejected: {result.rejected.reason or 'no reason given'}",
                is_error=True,
                result=pb.McpToolResult(rejected=result.rejected),
            )
        if variant == "permission_denied":
            return self._finish(
                f"Permission denied calling MCP tool {tool}: {result.permission_denied.error}",
                is_error=True,
                result=pb.McpToolResult(permission_denied=result.permission_denied),
            )
        if variant == "tool_not_found":
            available = ", ".join(result.tool_not_found.available_tools) or "none"
            return self._fail(f"MCP tool {result.tool_not_found.name or tool} not found (available: {available})")
        if variant == "server_not_found":
            available = ", ".join(result.server_not_found.available_servers) or "none"
            return self._fail(f"MCP server {result.server_not_found.name} not found (available: {available})")
        if variant == "approved":
            return self._fail(f"The MCP call to {tool} was approved but the IDE returned no result")
        return self._fail(f"MCP tool {tool} returned no result")

    def _on_success(self, success: pb.McpSuccess) -> Step:
        texts: list[str] = []
        images: list[Any] = []
        for item in success.content:
            kind = which(item, "content")
            if kind == "text":
                text = item.text.text
                if item.text.HasField("output_location") and item.text.output_location.file_path:
                    text += f"\n(Full output: {item.text.output_location.file_path})"
                texts.append(text)
            elif kind == "image":
                images.append(make_image(item.image.mime_type or "image/png", item.image.data))
        if not texts and success.HasField("structured_content"):
            texts.append(json.dumps(struct_to_json(success.structured_content), ensure_ascii=False))
        content = "\n".join(texts)
        if not content:
            content = f"({len(images)} image(s) attached)" if images else "(no output)"
        return self._finish(
            content, is_error=success.is_error, result=pb.McpToolResult(success=success), images=images
        )


class CallMcpToolExecution(McpExecution):
    """CallMcpTool{server, toolName, arguments}: resolved against the run's MCP descriptors."""

    tool_name = "CallMcpTool"
    _accept_hooks = True

    def __init__(self, call: Any, ctx: ToolContext, **kwargs: Any) -> None:
        super().__init__(call, ctx, None, **kwargs)

    def _parse(self, a: Arguments) -> None:
        self.server = a.string("server", required=True, non_empty=True) or ""
        self.tool = a.string("toolName", required=True, non_empty=True) or ""
        arguments = a.raw.get("arguments")
        if isinstance(arguments, str):  # some models send the nested object as JSON text
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                a.errors.append("argument 'arguments' must be an object")
                arguments = {}
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            a.errors.append("argument 'arguments' must be an object")
            arguments = {}
        self.tool_arguments = arguments
        self.descriptor = self.ctx.mcp_by_server_tool(self.server, self.tool)

    def _server_identifier(self) -> str:
        return self.server

    def _args_pb(self) -> Message:
        args = self._mcp_args()
        if self.descriptor is None:  # still show what the model asked for
            args.name = self.tool
            args.tool_name = self.tool
            args.server_identifier = self.server
        return args

    def _unknown(self) -> str:
        return f"unknown MCP tool: {self.tool} on server {self.server}"
