"""The per-call tool execution state machine (sans-IO; the conversation runtime drives it).

Lifecycle: READY --first()--> EXEC | INTERACTION | DONE; EXEC/INTERACTION --results--> ... DONE.
Each ExecStep/InteractionStep is one outstanding request; the runtime fills its `.id` in place
(the execution keeps the object, so it can recognise results and closes for earlier ids of the
same call and ignore them). Once DONE, every further input is ignored (returns an empty
Progress), so Done is produced exactly once.
"""
from __future__ import annotations

import base64
import enum
import json
from collections.abc import Sequence
from typing import Any, ClassVar

from google.protobuf.message import Message

from cursor_byok.run import ImagePart, ToolCallRequest, ToolOutcome

from ._wire import exec_server_message, interaction_query, pb, which
from .arguments import Arguments
from .context import ToolContext
from .steps import Done, ExecStep, InteractionStep, Progress, ResultKindMismatch, Step, ToolProtocolError

__all__ = ["Phase", "ToolExecution", "make_outcome", "make_image"]


class Phase(enum.Enum):
    READY = "ready"
    EXEC = "exec"
    INTERACTION = "interaction"
    DONE = "done"


def make_outcome(
    call_id: str, name: str, content: str, is_error: bool, images: Sequence[Any] = ()
) -> ToolOutcome:
    if images:
        return ToolOutcome(call_id=call_id, name=name, content=content, is_error=is_error, images=list(images))
    return ToolOutcome(call_id=call_id, name=name, content=content, is_error=is_error)


def make_image(mime_type: str, data: bytes) -> ImagePart:
    """An image attached to a tool outcome (ToolOutcome.images holds provider image parts)."""
    return ImagePart(media_type=mime_type, data_base64=base64.b64encode(data).decode("ascii"))


def _valid_text(value: Any) -> Any:
    """JSON may decode to lone surrogates, which protobuf strings reject: replace them."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return value
    if isinstance(value, dict):
        return {_valid_text(key): _valid_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_valid_text(item) for item in value]
    return value


def _parse_arguments(call: ToolCallRequest) -> tuple[dict[str, Any] | None, str | None]:
    if call.error:
        return (_valid_text(call.parsed) if isinstance(call.parsed, dict) else None), call.error
    if isinstance(call.parsed, dict):
        return _valid_text(call.parsed), None
    text = (call.arguments or "").strip() or "{}"
    try:
        value = json.loads(text)
    except ValueError as exc:
        return None, f"arguments are not valid JSON ({exc})"
    if not isinstance(value, dict):
        return None, "arguments must be a JSON object"
    return _valid_text(value), None


class ToolExecution:
    """One model tool call, from presentation to the final ToolOutcome.

    Subclasses set `tool_name` / `variant` (the ToolCall oneof member, None when the IDE has no
    card for it) and implement `_parse`, `_args_pb`, `_begin`, and the result hooks.
    """

    tool_name: ClassVar[str] = ""
    variant: ClassVar[str | None] = None
    checks_arguments: ClassVar[bool] = True

    def __init__(self, call: ToolCallRequest, ctx: ToolContext, *, model_call_id: str = "") -> None:
        self.call = call
        self.ctx = ctx
        self.call_id: str = call.call_id
        self.name: str = call.name
        # The provider's id of the response that produced the call, for progress updates.
        self.model_call_id = model_call_id
        self._phase = Phase.READY
        self._expected: tuple[str, ...] = ()
        self._pending_exec: pb.ExecServerMessage | None = None
        self._outcome: ToolOutcome | None = None
        self._result_pb: Message | None = None
        raw, json_error = _parse_arguments(call)
        self.arguments = Arguments(raw)
        self._parse(self.arguments)
        problems = [json_error] if json_error else list(self.arguments.errors)
        if not self.checks_arguments:
            problems = []
        self.argument_error: str | None = "; ".join(problems) if problems else None

    # ----------------------------------------------------------------- public state
    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def done(self) -> bool:
        return self._phase is Phase.DONE

    @property
    def outcome(self) -> ToolOutcome | None:
        return self._outcome

    @property
    def presentable(self) -> bool:
        """False when no ToolCall card exists for this call (unknown tool): emit no updates."""
        return self.variant is not None

    @property
    def seen_output(self) -> tuple[str, int] | None:
        """(shell_id, characters of its output shown so far) after an Await; else None."""
        return None

    @property
    def todos(self) -> list[Any] | None:
        """The conversation's todo list after this call, for calls that change it (TodoWrite)."""
        return None

    # ----------------------------------------------------------------- presentation
    def _tool_call(self) -> pb.ToolCall:
        tool_call = pb.ToolCall(tool_call_id=self.call_id)
        if self.variant is not None:
            getattr(tool_call, self.variant).SetInParent()
        return tool_call

    def placeholder(self) -> pb.ToolCall:
        """For partial_tool_call when the model opens the call: variant set, args empty."""
        tool_call = self._tool_call()
        if self.variant is not None:
            getattr(tool_call, self.variant).args.SetInParent()
        return tool_call

    def started(self, started_at_ms: int | None = None) -> pb.ToolCall:
        """For tool_call_started: the full arguments (no result)."""
        tool_call = self._tool_call()
        if self.variant is not None:
            card = getattr(tool_call, self.variant)
            args = self._args_pb()
            if args is not None:
                card.args.CopyFrom(args)
            else:
                card.args.SetInParent()
            self._decorate(card)
        if started_at_ms is not None:
            tool_call.started_at_ms = started_at_ms
        return tool_call

    def completed(self, completed_at_ms: int | None = None, started_at_ms: int | None = None) -> pb.ToolCall:
        """For tool_call_completed: arguments and result. Valid once done."""
        if not self.done:
            raise ToolProtocolError(f"{self.name} call {self.call_id} is not finished")
        tool_call = self.started(started_at_ms)
        if self.variant is not None and self._result_pb is not None:
            getattr(tool_call, self.variant).result.CopyFrom(self._result_pb)
        if completed_at_ms is not None:
            tool_call.completed_at_ms = completed_at_ms
        return tool_call

    # ----------------------------------------------------------------- driving
    def first(self) -> Step:
        if self._phase is not Phase.READY:
            raise ToolProtocolError(f"{self.name} call {self.call_id} was already started")
        if self.argument_error is not None:
            return self._fail(f"Invalid arguments for {self.name}: {self.argument_error}")
        return self._begin()

    def on_exec_result(self, message: pb.ExecClientMessage) -> Step:
        if self.done:
            return Progress([])
        kind = which(message, "message")
        if kind is None:  # an ExecClientMessage without a result carries nothing to act on
            return Progress([])
        if self._is_stale(message.id):
            return Progress([])
        if self._phase is not Phase.EXEC or kind not in self._expected:
            raise ResultKindMismatch(kind, self._expected if self._phase is Phase.EXEC else (), self.name)
        return self._on_exec(kind, getattr(message, kind), message)

    def on_interaction_response(self, message: pb.InteractionResponse) -> Step:
        if self.done:
            return Progress([])
        kind = which(message, "result")
        if kind is None:
            return Progress([])
        if self._phase is not Phase.INTERACTION or kind not in self._expected:
            raise ResultKindMismatch(kind, self._expected if self._phase is Phase.INTERACTION else (), self.name)
        return self._on_interaction(kind, getattr(message, kind))

    def on_stream_close(self, exec_id: int | None = None) -> Step:
        """exec_client_control_message.stream_close for this call's exec."""
        if self.done or self._phase is not Phase.EXEC or self._is_stale(exec_id):
            return Progress([])
        return self._on_stream_close()

    def on_throw(self, error: str, exec_id: int | None = None) -> Step:
        """exec_client_control_message.throw: the IDE failed to run the exec."""
        if self.done or self._is_stale(exec_id):
            return Progress([])
        detail = error.strip() or "unknown error"
        return self._fail(f"{self.name} failed in the IDE: {detail}")

    def on_abort(self, reason: str) -> Step:
        """The runtime interrupted or cancelled the call (it sends the exec abort itself)."""
        if self.done:
            return Progress([])
        detail = reason.strip() or "aborted"
        return self._fail(f"Tool execution was interrupted: {detail}")

    # ----------------------------------------------------------------- subclass helpers
    def _is_stale(self, exec_id: int | None) -> bool:
        current = self._pending_exec.id if self._pending_exec is not None else 0
        return bool(exec_id) and bool(current) and exec_id != current

    def _exec(
        self,
        field: str,
        args: Message,
        *,
        expect: tuple[str, ...],
        accept_hook_additional_contexts: bool | None = True,
        delay_ms: int = 0,
    ) -> ExecStep:
        message = exec_server_message(
            self.call_id, field, args, accept_hook_additional_contexts=accept_hook_additional_contexts
        )
        self._phase = Phase.EXEC
        self._expected = expect
        self._pending_exec = message
        return ExecStep(message=message, delay_ms=delay_ms)

    def _query(self, field: str, query: Message, *, expect: str) -> InteractionStep:
        message = interaction_query(field, query)
        self._phase = Phase.INTERACTION
        self._expected = (expect,)
        self._pending_exec = None
        return InteractionStep(query=message)

    def _finish(
        self, content: str, *, is_error: bool, result: Message | None = None, images: Sequence[Any] = ()
    ) -> Done:
        self._phase = Phase.DONE
        self._expected = ()
        self._result_pb = result
        self._outcome = make_outcome(self.call_id, self.name, content, is_error, images)
        return Done(self._outcome)

    def _fail(self, message: str) -> Done:
        return self._finish(message, is_error=True, result=self._error_result(message))

    # ----------------------------------------------------------------- subclass hooks
    def _parse(self, args: Arguments) -> None:
        """Read arguments into attributes; report problems through `args` (never raise)."""

    def _args_pb(self) -> Message | None:
        return None

    def _decorate(self, card: Message) -> None:
        """Extra fields of the ToolCall variant besides args/result (e.g. a description)."""

    def _begin(self) -> Step:
        raise ToolProtocolError(f"{self.name} has no executor")

    def _on_exec(self, kind: str, result: Any, message: pb.ExecClientMessage) -> Step:
        raise ResultKindMismatch(kind, self._expected, self.name)

    def _on_interaction(self, kind: str, result: Any) -> Step:
        raise ResultKindMismatch(kind, self._expected, self.name)

    def _on_stream_close(self) -> Step:
        return self._fail(f"{self.name}: exec stream closed without a result")

    def _error_result(self, message: str) -> Message | None:
        """The ToolCall-variant result that shows `message` as a failure (None: leave unset)."""
        return None
