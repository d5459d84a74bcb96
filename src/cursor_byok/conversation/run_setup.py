"""What a run request asks for, read once when its run starts: the model, the agent mode, the IDE's
environment, the tool context and the compiled prompt. Pure: no awaits, no clock."""
from __future__ import annotations

import hashlib
from collections.abc import Callable

from .. import prompting, tools
from ..config import Config, ModelConfig
from ..protocol import agent_pb2 as pb, which
from ..run import RunSpec
from .identity import ParentConversationRef

ResolveEffort = Callable[[ModelConfig, str, list[tuple[str, str]]], str]


def cursor_run_id(rr: pb.AgentRunRequest) -> str:
    return rr.run_id if rr.HasField("run_id") else ""


def turn_start(rr: pb.AgentRunRequest) -> tuple[int, pb.UserMessage | None, str | None]:
    """What a run begins with, its action read once: the agent mode, the user message it begins a
    turn with (None: the run continues the last turn) and the workspace root."""
    action = rr.action
    kind = which(action, "action")
    mode, user = pb.AGENT_MODE_AGENT, None
    if kind == "user_message_action":
        user = action.user_message_action.user_message
        mode = user.mode or mode
    elif kind == "inject_context_action" and action.inject_context_action.HasField("user_context"):
        user = action.inject_context_action.user_context.user_message
    return mode, user, _root_of(_env_of(action, kind))


def prefetched_blobs(rr: pb.AgentRunRequest) -> dict[bytes, bytes]:
    """The run request's pre-fetched blobs that hash to their ids."""
    return {b.id: b.value for b in rr.pre_fetched_blobs if hashlib.sha256(b.value).digest() == b.id}


def request_env(rr: pb.AgentRunRequest) -> pb.RequestContextEnv | None:
    action = rr.action
    return _env_of(action, which(action, "action"))


def _env_of(action: pb.ConversationAction, kind: str | None) -> pb.RequestContextEnv | None:
    if kind == "user_message_action" and action.user_message_action.request_context.HasField("env"):
        return action.user_message_action.request_context.env
    if kind == "resume_action" and action.resume_action.request_context.HasField("env"):
        return action.resume_action.request_context.env
    return None


def workspace_root(rr: pb.AgentRunRequest) -> str | None:
    return _root_of(request_env(rr))


def _root_of(env: pb.RequestContextEnv | None) -> str | None:
    return env.workspace_paths[0] if env is not None and env.workspace_paths else None


def tool_context(
    rr: pb.AgentRunRequest, *, conversation_id: str, run_id: str, parent: ParentConversationRef | None,
    config: Config, model: ModelConfig, mode: prompting.Mode,
) -> tools.ToolContext:
    env = request_env(rr)
    return tools.ToolContext(
        workspace_root=_root_of(env),
        terminals_folder=(env.terminals_folder or None) if env is not None else None,
        mcp_tools=tools.mcp_descriptors_from_run_request(rr),
        conversation_id=conversation_id,
        root_conversation_id=parent.parent_conversation_id if parent else conversation_id,
        run_id=run_id,
        available_models=[m.id for m in config.models],
        default_subagent_model=model.id,
        mode=mode._value_,
        allow_subagents=parent is None,
    )


def run_spec(
    rr: pb.AgentRunRequest, model: ModelConfig, ctx: tools.ToolContext, mode: prompting.Mode, resolve_effort: ResolveEffort | None
) -> RunSpec:
    compiled = prompting.compile_request(
        mode,
        model,
        tools.advertised_tools(ctx),
        [d.for_prompt() for d in ctx.mcp_tools] if ctx.mcp_tools else [],
        None,  # the request context lives in the history, so the system prompt stays byte-stable
        rr.custom_system_prompt if rr.HasField("custom_system_prompt") and rr.custom_system_prompt else None,
    )
    effort = None
    if resolve_effort is not None:
        if rr.HasField("requested_model"):
            requested = rr.requested_model
            model_id, params = requested.model_id, [(p.id, p.value) for p in requested.parameters] if requested.parameters else []
        else:
            model_id, params = rr.model_details.model_id, []
        effort = resolve_effort(model, model_id, params) or None
    return RunSpec(model=model, system=compiled.system, tools=compiled.tools, tools_chars=compiled.tools_chars, effort=effort)
