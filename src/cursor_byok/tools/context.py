"""What a tool execution may know about its run: workspace, MCP descriptors, ids, limits."""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from cursor_byok.prompting import McpToolDescriptor, mcp_tool_names

from ._wire import pb, value_to_json

__all__ = [
    "McpDescriptor",
    "TodoEntry",
    "TODO_STATUSES",
    "ToolContext",
    "mcp_descriptors_from_run_request",
]

# Model-facing todo statuses, in the order the summary lists them.
TODO_STATUSES: tuple[str, ...] = ("pending", "in_progress", "completed", "cancelled")

class McpDescriptor(msgspec.Struct, frozen=True):
    """One MCP tool the IDE offered in `AgentRunRequest.mcp_tools`.

    server: the server identifier (McpToolDefinition.provider_identifier);
    name: the tool's own name on that server (McpToolDefinition.tool_name);
    definition_name: McpToolDefinition.name, echoed back as McpArgs.name.
    """

    server: str
    name: str
    description: str = ""
    input_schema: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "object"})
    provider_identifier: str = ""
    definition_name: str = ""

    @property
    def wire_name(self) -> str:
        return self.definition_name or self.name

    def for_prompt(self) -> McpToolDescriptor:
        """The prompt compiler's view (it names the tool `mcp_<server>_<tool>`)."""
        return McpToolDescriptor(
            server=self.server, name=self.name, description=self.description, input_schema=self.input_schema
        )


def _schema_of(definition: Any) -> dict[str, Any]:
    if definition.HasField("input_schema"):
        value = value_to_json(definition.input_schema)
        if isinstance(value, dict):
            return value
    if definition.HasField("input_schema_json") and definition.input_schema_json:
        try:
            value = json.loads(definition.input_schema_json)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
    return {"type": "object"}


def mcp_descriptors_from_run_request(run_request: pb.AgentRunRequest) -> list[McpDescriptor]:
    """Descriptors for the run's MCP tools; a repeated (server, tool) keeps its last definition,
    as the prompt compiler does."""
    unique: dict[tuple[str, str], McpDescriptor] = {}
    for definition in run_request.mcp_tools.mcp_tools:
        tool = definition.tool_name or definition.name
        server = definition.provider_identifier
        if not tool:
            continue
        descriptor = McpDescriptor(
            server=server,
            name=tool,
            description=definition.description,
            input_schema=_schema_of(definition),
            provider_identifier=definition.provider_identifier,
            definition_name=definition.name,
        )
        unique[(descriptor.server, descriptor.name)] = descriptor
    return list(unique.values())


class TodoEntry(msgspec.Struct, frozen=True):
    """One item of the conversation's todo list (status is one of TODO_STATUSES)."""

    id: str
    content: str
    status: str = "pending"


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class ToolContext(msgspec.Struct, frozen=True):
    """Run facts a tool needs. Built by the conversation runtime once per tool round.

    terminals_folder: RequestContextEnv.terminals_folder (where the IDE writes `<shell_id>.txt`
    for each shell); Await needs it. todos: the conversation's current todo list (TodoWrite
    merges into it). clock_ms: injectable so Await's deadline is testable.
    """

    workspace_root: str | None = None
    mcp_tools: Sequence[McpDescriptor] = ()
    conversation_id: str = ""
    run_id: str = ""
    available_models: Sequence[str] = ()
    shell_timeout_ms: int = 30_000
    terminals_folder: str | None = None
    root_conversation_id: str | None = None
    default_subagent_model: str = ""
    mode: str = "agent"
    todos: Sequence[TodoEntry] = ()
    allow_subagents: bool = True
    await_default_timeout_ms: int = 30_000
    await_poll_interval_ms: int = 700
    shell_output_seen: Mapping[str, int] = msgspec.field(default_factory=dict)
    clock_ms: Callable[[], int] = _wall_clock_ms

    def mcp_model_names(self) -> dict[str, McpDescriptor]:
        """Model-facing `mcp_*` name → descriptor, named exactly as the prompt compiler names them."""
        unique = {(d.server, d.name): d for d in self.mcp_tools}
        names = mcp_tool_names([d.for_prompt() for d in unique.values()])
        return {names[key]: descriptor for key, descriptor in unique.items()}

    def mcp_by_model_name(self, name: str) -> McpDescriptor | None:
        return self.mcp_model_names().get(name)

    def mcp_by_server_tool(self, server: str, tool: str) -> McpDescriptor | None:
        for descriptor in self.mcp_tools:
            if descriptor.name == tool and server in (descriptor.server, descriptor.provider_identifier):
                return descriptor
        return None
