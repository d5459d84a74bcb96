"""Task: a subagent the IDE runs as a child conversation (exec subagent_args, field 28)."""
from __future__ import annotations

from google.protobuf.message import Message

from ._wire import pb, which
from .arguments import Arguments
from .base import ToolExecution
from .steps import Step

__all__ = ["TaskExecution", "subagent_type_pb"]

# Model-facing subagent_type → SubagentType oneof member; anything else is `custom{name}`.
_KNOWN_TYPES = {
    "computer_use": "computer_use",
    "computeruse": "computer_use",
    "explore": "explore",
    "media_review": "media_review",
    "bash": "bash",
    "browser_use": "browser_use",
    "shell": "shell",
    "vm_setup_helper": "vm_setup_helper",
    "debug": "debug",
    "cursor_guide": "cursor_guide",
    "watch_video": "watch_video",
}
_GENERAL = {"", "generalpurpose", "general_purpose", "general-purpose", "general"}


def subagent_type_pb(name: str | None) -> pb.SubagentType:
    out = pb.SubagentType()
    key = (name or "").strip().lower()
    if key in _GENERAL:
        out.unspecified.SetInParent()
    elif key.replace("-", "_") in _KNOWN_TYPES:
        getattr(out, _KNOWN_TYPES[key.replace("-", "_")]).SetInParent()
    else:
        out.custom.name = name or ""
    return out


class TaskExecution(ToolExecution):
    """Task{description, prompt, subagent_type?, model?, run_in_background?} → subagent_args.

    model: absent or "inherit" → ctx.default_subagent_model; a named model must be one of
    ctx.available_models when that list is known.
    """

    tool_name = "Task"
    variant = "task_tool_call"

    def _parse(self, a: Arguments) -> None:
        self.description = a.string("description", required=True, non_empty=True) or ""
        self.prompt = a.string("prompt", required=True, non_empty=True) or ""
        self.subagent_type = a.string("subagent_type") or ""
        self.requested_model = a.string("model")
        self.run_in_background = a.boolean("run_in_background")
        self._started_ms = 0
        model = self.requested_model
        if model is None or model.strip() in ("", "inherit"):
            self.model_id = self.ctx.default_subagent_model
        else:
            self.model_id = model.strip()
            known = list(self.ctx.available_models)
            if known and self.model_id not in known:
                a.errors.append(f"unknown model '{self.model_id}' (available: {', '.join(known)})")

    def _args_pb(self) -> Message:
        args = pb.TaskArgs(
            description=self.description,
            prompt=self.prompt,
            subagent_type=subagent_type_pb(self.subagent_type),
        )
        if self.model_id:
            args.model = self.model_id
        return args

    def _subagent_args(self) -> pb.SubagentArgs:
        args = pb.SubagentArgs(
            tool_call_id=self.call_id,
            subagent_type=self.subagent_type,
            model_id=self.model_id,
            prompt=self.prompt,
            environment=pb.SUBAGENT_EXECUTION_ENVIRONMENT_LOCAL,
        )
        if self.run_in_background is not None:
            args.run_in_background = self.run_in_background
        if self.ctx.conversation_id:
            args.parent_conversation_id = self.ctx.conversation_id
        root = self.ctx.root_conversation_id or self.ctx.conversation_id
        if root:
            args.root_parent_conversation_id = root
        return args

    def _begin(self) -> Step:
        if not self.ctx.allow_subagents:
            return self._fail("Subagents are disabled for this conversation")
        if not self.model_id:
            return self._fail("No model is configured for subagents")
        self._started_ms = self.ctx.clock_ms()
        return self._exec(
            "subagent_args", self._subagent_args(), expect=("subagent_result",), accept_hook_additional_contexts=False
        )

    def _error_result(self, message: str) -> Message:
        return pb.TaskResult(error=pb.TaskError(error=message))

    def _on_exec(self, kind: str, result: pb.SubagentResult, message: pb.ExecClientMessage) -> Step:
        variant = which(result, "result")
        if variant == "error":
            who = f" ({result.error.agent_id})" if result.error.agent_id else ""
            return self._fail(f"Subagent{who} failed: {result.error.error or 'unknown error'}")
        if variant != "success":
            return self._fail("Task returned no result")
        success = result.success
        background = bool(self.run_in_background) or success.background_reason != 0
        card = pb.TaskSuccess(
            agent_id=success.agent_id,
            is_background=background,
            duration_ms=max(self.ctx.clock_ms() - self._started_ms, 0),
            background_reason=success.background_reason,
        )
        if success.HasField("transcript_path"):
            card.transcript_path = success.transcript_path
        lines = [f"Subagent name: {self.description}", f"Subagent ID: {success.agent_id}"]
        if background:
            lines.append("The subagent is running in the background; you will be told when it finishes.")
        else:
            lines.append("")
            lines.append(success.final_message or "(The subagent finished without a final message.)")
        return self._finish("\n".join(lines), is_error=False, result=pb.TaskResult(success=card))
