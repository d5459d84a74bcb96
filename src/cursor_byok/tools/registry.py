"""Model tool name → execution, and the names this server can execute."""
from __future__ import annotations

from cursor_byok.run import ToolCallRequest

from .base import ToolExecution
from .client_run import (
    AwaitSubagentExecution,
    FetchMcpResourceExecution,
    ListMcpResourcesExecution,
    WebFetchExecution,
    WriteShellStdinExecution,
)
from .context import ToolContext
from .files import DeleteExecution, LsExecution, ReadExecution, StrReplaceExecution, WriteExecution
from .interactive import AskQuestionExecution, CreatePlanExecution, SwitchModeExecution
from .mcp import CallMcpToolExecution, McpExecution
from .search import GlobExecution, GrepExecution, ReadLintsExecution
from .shell import AwaitExecution, ShellExecution
from .steps import Step
from .task import TaskExecution
from .todos import TodoWriteExecution

__all__ = ["BUILTIN_TOOLS", "UnknownToolExecution", "advertised_tools", "start_tool"]

BUILTIN_TOOLS: dict[str, type[ToolExecution]] = {
    cls.tool_name: cls
    for cls in (
        ReadExecution,
        WriteExecution,
        StrReplaceExecution,
        DeleteExecution,
        LsExecution,
        GlobExecution,
        GrepExecution,
        ShellExecution,
        AwaitExecution,
        ReadLintsExecution,
        TodoWriteExecution,
        AskQuestionExecution,
        SwitchModeExecution,
        CreatePlanExecution,
        TaskExecution,
        CallMcpToolExecution,
        WebFetchExecution,
        WriteShellStdinExecution,
        AwaitSubagentExecution,
        ListMcpResourcesExecution,
        FetchMcpResourceExecution,
    )
}
# Offered only while the run has MCP servers.
MCP_ONLY_TOOLS = frozenset({"CallMcpTool", "ListMcpResources", "FetchMcpResource"})


class UnknownToolExecution(ToolExecution):
    """A name no executor handles: completes at once with a tool error and has no card."""

    tool_name = ""
    variant = None

    # The arguments of an unknown tool are not checked: the name is what the model must fix.
    checks_arguments = False

    def _begin(self) -> Step:
        return self._fail(f"unknown tool: {self.name}")


def advertised_tools(ctx: ToolContext) -> list[str]:
    """The fixed model-facing tools this server can execute for the run, sorted.

    Pass it as `tool_names` to prompting.compile_request, with `mcp_tools=[d.for_prompt() for d in
    ctx.mcp_tools]`: the compiler names the dynamic `mcp_*` tools and filters by mode. Tools with
    no executor here (GenerateImage, WebSearch, ...) are never listed.
    """
    names = set(BUILTIN_TOOLS) - MCP_ONLY_TOOLS
    if not ctx.allow_subagents:
        names -= {"Task", "AwaitSubagent"}
    if ctx.mcp_tools:
        names |= MCP_ONLY_TOOLS
    return sorted(names)


def start_tool(call: ToolCallRequest, ctx: ToolContext, *, model_call_id: str = "") -> ToolExecution:
    """The execution for one model tool call. Call `.first()` to get its first step."""
    cls = BUILTIN_TOOLS.get(call.name)
    if cls is not None:
        return cls(call, ctx, model_call_id=model_call_id)
    if call.name.startswith("mcp_"):
        return McpExecution(call, ctx, ctx.mcp_by_model_name(call.name), model_call_id=model_call_id)
    return UnknownToolExecution(call, ctx, model_call_id=model_call_id)
