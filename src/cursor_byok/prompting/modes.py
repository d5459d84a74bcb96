"""Modes and the fixed, model-facing tool set each one advertises."""
from __future__ import annotations

import enum


class Mode(str, enum.Enum):
    AGENT = "agent"
    ASK = "ask"
    PLAN = "plan"
    SUBAGENT = "subagent"


# Every fixed tool the compiler knows. The tools layer maps these names to Cursor exec messages.
FIXED_TOOLS: tuple[str, ...] = (
    "AskQuestion", "Await", "AwaitSubagent", "CallMcpTool", "CreatePlan", "Delete", "FetchMcpResource", "Glob", "Grep",
    "ListMcpResources", "Ls", "Read", "ReadLints", "Shell", "StrReplace", "SwitchMode", "Task", "TodoWrite",
    "WebFetch", "Write", "WriteShellStdin",
)

_ASK = frozenset({"Read", "Ls", "Glob", "Grep", "ReadLints", "AskQuestion", "SwitchMode", "WebFetch"})
_MODE_TOOLS: dict[Mode, frozenset[str]] = {
    Mode.AGENT: frozenset(FIXED_TOOLS),
    Mode.ASK: _ASK,
    Mode.PLAN: _ASK | {"CreatePlan", "TodoWrite"},
    Mode.SUBAGENT: frozenset(FIXED_TOOLS) - {"Task", "AwaitSubagent", "AskQuestion", "SwitchMode", "CreatePlan"},
}


def tools_for_mode(mode: Mode | str) -> list[str]:
    """The fixed tools a mode allows, sorted by name."""
    return sorted(_MODE_TOOLS[Mode(mode)])


def mode_allows_mcp(mode: Mode | str) -> bool:
    """Dynamic MCP tools are offered exactly where CallMcpTool is."""
    return "CallMcpTool" in _MODE_TOOLS[Mode(mode)]
