"""The prompt compiler: (mode, model, tools, request context) → system prompt and tool list.

Deterministic: identical inputs give byte-identical output (fixed tools sorted by name, schemas
with sorted keys, no clock, no dict-order dependence). Dynamic MCP tools come after the fixed
prefix so adding a server never disturbs the cached prefix of the fixed tools.

Compiled once, reused: every run of a conversation asks for the same prompt, so a result is kept
per input and handed out again, as the same objects. That lets the provider adapters keep the
prompt's encoded JSON too (the same system string and tool list come back). Callers must not
mutate what they get.
"""
from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any

import msgspec

from ..config import ModelConfig
from ..lazy import warm_after_start
from ..providers import ToolSchema
from .context import RequestContext, render_request_context
from .modes import FIXED_TOOLS, Mode, mode_allows_mcp, tools_for_mode
from .tools import FIXED_TOOL_SCHEMAS, canonical

_MAX_TOOL_NAME = 64  # OpenAI's limit; Anthropic allows more
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class McpToolDescriptor(msgspec.Struct, frozen=True):
    server: str
    name: str
    description: str = ""
    input_schema: dict[str, Any] = {}


class McpRoute(msgspec.Struct, frozen=True):
    """Which MCP server tool a model-facing `mcp_*` name stands for."""

    name: str
    server: str
    tool: str


class CompiledPrompt(msgspec.Struct, frozen=True):
    system: str
    tools: list[ToolSchema]
    mcp_routes: list[McpRoute] = []
    context_message: str | None = None  # rendered request context, for the runtime to place
    tools_chars: int = 0  # the tool schemas' JSON size (what they add to the context), measured once


class CompactionPrompt(msgspec.Struct, frozen=True):
    system: str
    instruction: str


@functools.cache
def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8").strip()


def read_assets() -> None:
    """Read every prompt asset now: the first read goes through the package resource reader (~4 ms),
    which a first turn would otherwise pay on its way to the model."""
    for asset in resources.files(__package__).joinpath("assets").iterdir():
        if asset.name.endswith(".md"):
            _asset(asset.name)


warm_after_start(__name__, "read_assets")


def compaction_prompt() -> CompactionPrompt:
    return CompactionPrompt(system=_asset("compaction_system.md"), instruction=_asset("compaction_instruction.md"))


def system_prompt(mode: Mode | str, model: ModelConfig, custom_system_prompt: str | None = None) -> str:
    text = _asset("base.md").replace("{model_name}", model.label)
    text += "\n\n" + _asset(f"mode_{Mode(mode).value}.md")
    if custom_system_prompt and custom_system_prompt.strip():
        text += "\n\n## Additional instructions\n\n" + custom_system_prompt.strip()
    return text


def _hash8(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


def mcp_tool_names(descriptors: Sequence[McpToolDescriptor]) -> dict[tuple[str, str], str]:
    """Model-facing names `mcp_<server>_<tool>`: unsafe characters become `_`; a name that is too
    long or collides after that gets a short hash of (server, tool) instead of its tail."""
    base: dict[tuple[str, str], str] = {}
    for d in descriptors:
        base[(d.server, d.name)] = _NAME_UNSAFE.sub("_", f"mcp_{d.server}_{d.name}")
    counts: dict[str, int] = {}
    for name in base.values():
        counts[name] = counts.get(name, 0) + 1
    names: dict[tuple[str, str], str] = {}
    for key, name in base.items():
        if len(name) > _MAX_TOOL_NAME or counts[name] > 1:
            suffix = "_" + _hash8(*key)
            name = name[: _MAX_TOOL_NAME - len(suffix)] + suffix
        names[key] = name
    return names


def _mcp_schema(schema: Any) -> dict[str, Any]:
    if not isinstance(schema, dict) or schema.get("type") not in (None, "object"):
        return {"type": "object", "properties": {}}
    out = dict(schema)
    out["type"] = "object"
    out.setdefault("properties", {})
    return canonical(out)


_COMPILED_ENTRIES = 64  # distinct (mode, model, tools, MCP set, custom prompt) in use at once, and then some
_compiled: dict[tuple[object, ...], CompiledPrompt] = {}


def compile_request(
    mode: Mode | str,
    model: ModelConfig,
    tool_names: Sequence[str],
    mcp_tools: Sequence[McpToolDescriptor] = (),
    request_context: RequestContext | None = None,
    custom_system_prompt: str | None = None,
) -> CompiledPrompt:
    """System prompt and tools for one model call.

    Fixed tools: `tool_names` (what the tools layer can execute) intersected with the mode's set,
    sorted by name. MCP tools: only in modes that allow CallMcpTool, sorted by model-facing name,
    appended after the fixed tools.
    """
    mode = mode if type(mode) is Mode else Mode(mode)  # a Mode as it is: Mode(mode) is two Python calls even then
    if request_context is not None:  # rendered into the result: compile it afresh
        return _compile(mode, model, tool_names, mcp_tools, request_context, custom_system_prompt)
    key = (mode, model.label, tuple(sorted(tool_names)), msgspec.json.encode(mcp_tools) if mcp_tools else b"", custom_system_prompt)
    compiled = _compiled.get(key)
    if compiled is None:
        compiled = _compile(mode, model, tool_names, mcp_tools, None, custom_system_prompt)
        if len(_compiled) >= _COMPILED_ENTRIES:
            del _compiled[next(iter(_compiled))]  # the oldest
        _compiled[key] = compiled
    return compiled


def _compile(
    mode: Mode,
    model: ModelConfig,
    tool_names: Sequence[str],
    mcp_tools: Sequence[McpToolDescriptor],
    request_context: RequestContext | None,
    custom_system_prompt: str | None,
) -> CompiledPrompt:
    unknown = sorted(set(tool_names) - set(FIXED_TOOLS))
    if unknown:
        raise ValueError(f"unknown tool names: {', '.join(unknown)}")
    allowed = set(tools_for_mode(mode))
    tools = [FIXED_TOOL_SCHEMAS[name] for name in sorted(set(tool_names) & allowed)]
    routes: list[McpRoute] = []
    if mcp_tools and mode_allows_mcp(mode):
        unique = {(d.server, d.name): d for d in mcp_tools}  # a repeated descriptor: the last wins
        names = mcp_tool_names(list(unique.values()))
        dynamic = sorted(unique.values(), key=lambda d: names[(d.server, d.name)])
        for d in dynamic:
            name = names[(d.server, d.name)]
            description = d.description.strip() or f"Tool {d.name} of MCP server {d.server}."
            tools.append(ToolSchema(name=name, description=description, parameters=_mcp_schema(d.input_schema)))
            routes.append(McpRoute(name=name, server=d.server, tool=d.name))
    return CompiledPrompt(
        system=system_prompt(mode, model, custom_system_prompt),
        tools=tools,
        tools_chars=len(msgspec.json.encode(tools)),
        mcp_routes=routes,
        context_message=render_request_context(request_context) if request_context is not None else None,
    )
