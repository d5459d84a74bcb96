"""Cursor's RequestContext (workspace, env, rules, repos…) → the neutral request-context text.

Deterministic: the same RequestContext always renders to the same bytes (sorted maps, fixed
order), so an unchanged context is recognised by content and never appended twice.
"""
from __future__ import annotations

from ...protocol import agent_pb2 as pb


def render_request_context(ctx: pb.RequestContext) -> str:
    if not ctx.ByteSize():
        return ""
    lines: list[str] = ["<request_context>"]
    env = ctx.env
    if env.ByteSize():
        if env.os_version:
            lines.append(f"os: {env.os_version}")
        if env.shell:
            lines.append(f"shell: {env.shell}")
        for path in env.workspace_paths:
            lines.append(f"workspace: {path}")
        if env.HasField("process_working_directory"):
            lines.append(f"cwd: {env.process_working_directory}")
        if env.time_zone:
            lines.append(f"time_zone: {env.time_zone}")
        if env.terminals_folder:
            lines.append(f"terminals_folder: {env.terminals_folder}")
    for repo in ctx.git_repos:
        lines.append("git_repo: " + " ".join(f"{f.name}={v}" for f, v in repo.ListFields() if isinstance(v, (str, int, bool))))
    for rule in list(ctx.rules) + list(ctx.non_file_rules):
        fields = {f.name: v for f, v in rule.ListFields() if isinstance(v, str)}
        name = fields.get("full_path") or fields.get("name") or fields.get("path") or "rule"
        body = fields.get("content") or fields.get("body") or ""
        lines.append(f"<rule name={name!r}>\n{body}\n</rule>")
    for path in sorted(ctx.file_contents):
        lines.append(f"<file path={path!r}>\n{ctx.file_contents[path]}\n</file>")
    if ctx.HasField("cloud_rule") and ctx.cloud_rule:
        lines.append(f"<rule name='cloud'>\n{ctx.cloud_rule}\n</rule>")
    if ctx.HasField("user_intent_summary") and ctx.user_intent_summary:
        lines.append(f"user_intent: {ctx.user_intent_summary}")
    lines.append("</request_context>")
    return "\n".join(lines) if len(lines) > 2 else ""
