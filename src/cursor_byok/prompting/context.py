"""Request context and per-turn runtime messages, rendered deterministically to text.

The runtime appends the rendered request context as a user-role history message only when it
differs from the last one it appended; identical input always renders to identical bytes, so that
comparison is a plain string comparison.
"""
from __future__ import annotations

import re

import msgspec

from .modes import Mode


class NamedText(msgspec.Struct, frozen=True):
    name: str
    content: str


class RequestContext(msgspec.Struct, frozen=True, kw_only=True):
    """Conversation-level facts about the user's environment (no timestamps: they would make every
    turn look like a context change)."""

    workspace_paths: list[str] = []  # first one is the primary folder; order is kept
    os: str = ""
    shell: str = ""
    open_files: list[str] = []  # rendered sorted
    git_branch: str = ""
    git_status: str = ""
    rules: list[NamedText] = []  # user/project rules, rendered sorted by name
    sections: list[NamedText] = []  # further named sections (MCP instructions, skills…), sorted by name


class Selection(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    text: str
    start_line: int | None = None


class RuntimeMessage(msgspec.Struct, frozen=True, kw_only=True):
    """What the user sent this turn, with the per-turn context that belongs to it."""

    query: str
    mode: Mode = Mode.AGENT
    selections: list[Selection] = []
    active_file: str = ""
    timestamp: str = ""  # supplied by the caller (ISO 8601); never read from a clock here


_USER_QUERY = re.compile(r"<user_query>\n?(.*?)\n?</user_query>", re.S)


def user_query(rendered: str) -> str:
    """The user's own words in a rendered runtime message (the text as it is when it has none)."""
    found = _USER_QUERY.search(rendered)
    return found.group(1) if found else rendered


def _block(tag: str, body: str, **attrs: str) -> str:
    attributes = "".join(f' {k}="{v}"' for k, v in attrs.items())
    return f"<{tag}{attributes}>\n{body.strip()}\n</{tag}>"


def render_request_context(ctx: RequestContext) -> str:
    parts: list[str] = []
    env: list[str] = []
    if ctx.workspace_paths:
        env.append("Workspace folders:")
        env.extend(f"- {p}" for p in ctx.workspace_paths)
    if ctx.os:
        env.append(f"Operating system: {ctx.os}")
    if ctx.shell:
        env.append(f"Shell: {ctx.shell}")
    if env:
        parts.append(_block("environment", "\n".join(env)))
    if ctx.open_files:
        parts.append(_block("open_files", "\n".join(f"- {p}" for p in sorted(set(ctx.open_files)))))
    if ctx.git_branch or ctx.git_status:
        git = [f"Branch: {ctx.git_branch}"] if ctx.git_branch else []
        if ctx.git_status:
            git.append(ctx.git_status)
        parts.append(_block("git", "\n".join(git)))
    for rule in sorted(ctx.rules, key=lambda r: (r.name, r.content)):
        parts.append(_block("rule", rule.content, name=rule.name))
    for section in sorted(ctx.sections, key=lambda s: (s.name, s.content)):
        parts.append(_block("section", section.content, name=section.name))
    body = "\n\n".join(parts) if parts else "(no environment details were provided)"
    return _block("request_context", body)


_MODE_REMINDERS = {
    Mode.AGENT: "You are in agent mode: you may change files and run commands.",
    Mode.ASK: "You are in ask mode: read and answer only; do not change anything.",
    Mode.PLAN: "You are in plan mode: explore read-only and finish with a plan for approval.",
    Mode.SUBAGENT: "You are a subagent: complete the task and report back.",
}


def render_runtime_message(message: RuntimeMessage) -> str:
    parts: list[str] = []
    if message.timestamp:
        parts.append(f"Current time: {message.timestamp}")
    if message.active_file:
        parts.append(f"Active file: {message.active_file}")
    for sel in message.selections:
        where = f"{sel.path}:{sel.start_line}" if sel.start_line is not None else sel.path
        parts.append(_block("selection", sel.text, path=where))
    mode = message.mode
    parts.append(_MODE_REMINDERS[mode if type(mode) is Mode else Mode(mode)])
    parts.append(_block("user_query", message.query))
    return "\n\n".join(parts)
