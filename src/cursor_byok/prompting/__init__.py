"""Stateless, deterministic prompt compiler: system prompt, tool schemas, request-context and
runtime-message rendering, and the compaction prompt. Our own wording throughout."""
from __future__ import annotations

from .compiler import (
    CompactionPrompt,
    CompiledPrompt,
    McpRoute,
    McpToolDescriptor,
    compaction_prompt,
    compile_request,
    mcp_tool_names,
    system_prompt,
)
from .context import (
    NamedText,
    RequestContext,
    RuntimeMessage,
    Selection,
    render_request_context,
    render_runtime_message,
    user_query,
)
from .modes import FIXED_TOOLS, Mode, mode_allows_mcp, tools_for_mode
from .tools import FIXED_TOOL_SCHEMAS

__all__ = [
    "FIXED_TOOLS",
    "FIXED_TOOL_SCHEMAS",
    "CompactionPrompt",
    "CompiledPrompt",
    "McpRoute",
    "McpToolDescriptor",
    "Mode",
    "NamedText",
    "RequestContext",
    "RuntimeMessage",
    "Selection",
    "compaction_prompt",
    "compile_request",
    "mcp_tool_names",
    "mode_allows_mcp",
    "render_request_context",
    "render_runtime_message",
    "system_prompt",
    "tools_for_mode",
    "user_query",
]
