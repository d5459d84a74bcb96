"""Cursor's RequestContext / UserMessage → the neutral prompting structs, rendered by `prompting`.

Deterministic: the same RequestContext always renders to the same bytes, so an unchanged context
is recognised by content and never appended twice.
"""
from __future__ import annotations

from ... import prompting
from ...protocol import agent_pb2 as pb, enum_name
from ...run import Message, TextPart

_MODES = {
    pb.AGENT_MODE_ASK: prompting.Mode.ASK,
    pb.AGENT_MODE_PLAN: prompting.Mode.PLAN,
}


def prompt_mode(agent_mode: int, *, subagent: bool = False) -> prompting.Mode:
    if subagent:
        return prompting.Mode.SUBAGENT
    return _MODES.get(agent_mode, prompting.Mode.AGENT)


def _rules(ctx: pb.RequestContext) -> list[prompting.NamedText]:
    out = []
    for rule in list(ctx.rules) + list(ctx.non_file_rules):
        if rule.content:
            out.append(prompting.NamedText(name=rule.full_path or "rule", content=rule.content))
    if ctx.HasField("cloud_rule") and ctx.cloud_rule:
        out.append(prompting.NamedText(name="cloud", content=ctx.cloud_rule))
    return out


def _sections(ctx: pb.RequestContext) -> list[prompting.NamedText]:
    out = [prompting.NamedText(name=f"file:{path}", content=ctx.file_contents[path]) for path in sorted(ctx.file_contents)]
    if ctx.HasField("user_intent_summary") and ctx.user_intent_summary:
        out.append(prompting.NamedText(name="user_intent", content=ctx.user_intent_summary))
    return out


def render_request_context(ctx: pb.RequestContext) -> str:
    """The rendered request context, or '' when the IDE sent none."""
    if not ctx.ByteSize():
        return ""
    env = ctx.env
    repo = ctx.git_repos[0] if ctx.git_repos else None
    neutral = prompting.RequestContext(
        workspace_paths=list(env.workspace_paths),
        os=env.os_version,
        shell=env.shell,
        git_branch=repo.branch_name if repo is not None else "",
        git_status=repo.status if repo is not None else "",
        rules=_rules(ctx),
        sections=_sections(ctx),
    )
    return prompting.render_request_context(neutral)


def render_user_message(um: pb.UserMessage, mode: prompting.Mode) -> str:
    return prompting.render_runtime_message(prompting.RuntimeMessage(query=um.text, mode=mode))


def background_completion_messages(action: pb.BackgroundTaskCompletionAction) -> list[tuple[str, Message]]:
    """Each finished background task as a simulated user turn, with the key that makes a
    redelivery (at-least-once from the IDE) a no-op: background-completed:<KIND>:<task>:<tool call>.
    A kind or status newer than our schema is named `unknown(N)`: the completion is still delivered."""
    out = []
    for c in action.completions:
        kind = enum_name(pb.BackgroundTaskKind, c.kind).removeprefix("BACKGROUND_TASK_KIND_")
        status = enum_name(pb.BackgroundTaskStatus, c.status).removeprefix("BACKGROUND_TASK_STATUS_").lower()
        lines = [f"A background {kind.lower()} task finished ({status}): {c.title or c.task_id}."]
        if c.HasField("detail") and c.detail:
            lines.append(c.detail)
        if c.HasField("output_path") and c.output_path:
            lines.append(f"Its output is in {c.output_path}.")
        lines.append("Continue the work in light of this result if it matters; otherwise say briefly that it is done.")
        key = f"background-completed:{kind}:{c.task_id}:{c.tool_call_id}"
        out.append((key, Message(role="user", parts=[TextPart(text="\n".join(lines))])))
    return out
