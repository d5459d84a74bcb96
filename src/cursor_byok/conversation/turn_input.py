"""What a run adds to the history before the model is called, and whether it calls the model.

Every input has an idempotency key, so a retried input is never stored twice; whether it still
needs the model is decided by the history alone: an input is answered once a final assistant
message follows it (`ConversationHistory.answered`). A turn that failed, was cancelled or was cut
by a crash is therefore run again when the IDE retries it; one that was answered is not. A run
resumed after a restart (`resumed`) carries on where its stream stood: it calls the model unless the
history already ends with an answer, whatever its own input's state.

Pure: no awaits, no clock, no output; it appends to the in-memory history the runtime hands it.
"""
from __future__ import annotations

import msgspec

from .. import prompting
from ..protocol import ConnectError, agent_pb2 as pb, which
from ..run import Message, ToolCallPart, ToolResultPart
from .actions import Injected, injected_context, user_message
from .history import (
    ConversationHistory,
    EntryKind,
    HistoryEntry,
    background_completion_messages,
    message_from_json,
    render_request_context,
)

UNFINISHED_TOOL_TEXT = (
    "This tool call did not finish (its run was cancelled or the server restarted), so its result is "
    "unknown. Check its effect and run it again if needed."
)


class TurnInput(msgspec.Struct):
    entries: list[HistoryEntry] = msgspec.field(default_factory=list)  # appended now; stored before the model runs
    call_model: bool = True
    delivered: Injected | None = None  # an IDE injection that became this run: report it delivered
    pending_calls: list[ToolCallPart] = msgspec.field(default_factory=list)  # a round in flight: run before the model


def stored_as(history: ConversationHistory, key: str) -> str | None:
    """The event id an input with this key is stored under, if it is: its key, or the id it had in
    a database written before every path shared keys (mid-run input was `injection:<id>`, a user
    message `injection:user-message:<message id>`)."""
    if history.has(key):
        return key
    legacy = f"injection:user-message:{key[5:]}" if key.startswith("user:") else f"injection:{key}"
    return legacy if history.has(legacy) else None


def commit_turn_input(
    history: ConversationHistory, rr: pb.AgentRunRequest, run_id: str, fallback_key: str, mode: prompting.Mode,
    *, resumed: bool = False,
) -> TurnInput:
    """Append this run's request context and input. `fallback_key` names a user message that came
    without a message id."""
    turn = _turn_input(history, rr, run_id, fallback_key, mode)
    if resumed:
        last = history.entries[-1] if history.entries else None
        answered = last is not None and last.kind is EntryKind.ASSISTANT and not any(isinstance(p, ToolCallPart) for p in last.message.parts)
        turn.call_model = not answered
    return turn


def _turn_input(history: ConversationHistory, rr: pb.AgentRunRequest, run_id: str, fallback_key: str, mode: prompting.Mode) -> TurnInput:
    action = rr.action
    kind = which(action, "action")
    if kind == "user_message_action":
        uma = action.user_message_action
        um = uma.user_message
        key = f"user:{um.message_id or fallback_key}"
        return _input(history, key, user_message(um, mode), render_request_context(uma.request_context), run_id)
    if kind == "inject_context_action":
        item = injected_context(action.inject_context_action, mode)
        if item is None:
            raise ConnectError("invalid_argument", "inject_context_action carries no context")
        turn = _input(history, item.key, item.message, item.request_context, run_id)
        turn.delivered = item
        return turn
    if kind == "background_task_completion_action":
        return _background_completions(history, action.background_task_completion_action, run_id)
    if kind == "resume_action":
        pending = pending_calls(history, rr.conversation_state)
        turn = TurnInput(pending_calls=pending) if pending else TurnInput(repair_dangling_tool_calls(history, run_id))
        ctx = history.add_request_context(
            render_request_context(action.resume_action.request_context), f"request-context:{run_id}", run_id
        )
        if ctx is not None:
            turn.entries.append(ctx)
        last = history.entries[-1] if history.entries else None
        # Nothing to resume after a complete turn (unless the context changed since).
        turn.call_model = bool(turn.entries or pending) or not (last is None or last.kind is EntryKind.ASSISTANT)
        return turn
    if kind is None:
        raise ConnectError("invalid_argument", "run request has no action this server knows (none, or one from a newer Cursor)")
    raise ConnectError("invalid_argument", f"run request action {kind} cannot start a run")


def _input(history: ConversationHistory, key: str, message: Message, ctx: str, run_id: str) -> TurnInput:
    stored = stored_as(history, key)
    if stored is not None:
        if history.answered(stored):
            return TurnInput(call_model=False)
        return TurnInput(repair_dangling_tool_calls(history, run_id))  # stored, never answered: run it again
    turn = TurnInput(repair_dangling_tool_calls(history, run_id))
    context = history.add_request_context(ctx, f"request-context:{run_id}", run_id)
    if context is not None:
        turn.entries.append(context)
    entry = history.append(EntryKind.USER, key, message, run_id)
    if entry is not None:
        turn.entries.append(entry)
    return turn


def _background_completions(history: ConversationHistory, action: pb.BackgroundTaskCompletionAction, run_id: str) -> TurnInput:
    completions = background_completion_messages(action)
    stored = {key: stored_as(history, key) for key, _ in completions}
    if all(event_id is not None and history.answered(event_id) for event_id in stored.values()):
        return TurnInput(call_model=False)  # delivered and followed up: never wake the model twice
    turn = TurnInput(repair_dangling_tool_calls(history, run_id))
    for key, message in completions:
        if stored[key] is None:
            entry = history.append(EntryKind.BACKGROUND_COMPLETION, key, message, run_id)
            if entry is not None:
                turn.entries.append(entry)
    return turn


def pending_calls(history: ConversationHistory, state: pb.ConversationStateStructure) -> list[ToolCallPart]:
    """The tool calls of the history's last message when the client's checkpoint says they were in
    flight (`pending_tool_calls`): a resume runs them before the model is called again."""
    entries = history.entries
    if not entries or entries[-1].kind is not EntryKind.ASSISTANT or not state.pending_tool_calls:
        return []
    calls = [p for p in entries[-1].message.parts if isinstance(p, ToolCallPart)]
    in_flight: set[str] = set()
    for text in state.pending_tool_calls:
        try:
            _, message = message_from_json(text.encode())
        except (ValueError, KeyError, TypeError):
            continue  # not one of ours or not readable: those calls are repaired, not run
        if message is not None:
            in_flight.update(p.id for p in message.parts if isinstance(p, ToolCallPart))
    return calls if calls and all(c.id in in_flight for c in calls) else []


def repair_dangling_tool_calls(history: ConversationHistory, run_id: str) -> list[HistoryEntry]:
    """After a cancel or a crash the last assistant message may have tool calls whose results were
    never recorded. Answer them with an explicit error result (appended, never rewritten) so the
    provider history stays valid and a side effect is not silently repeated."""
    last = history.last()
    if last is None or last.kind is not EntryKind.ASSISTANT:
        return []
    calls = [p for p in last.message.parts if isinstance(p, ToolCallPart)]
    if not calls:
        return []
    results = [ToolResultPart(call_id=c.id, name=c.name, content=UNFINISHED_TOOL_TEXT, is_error=True) for c in calls]
    repaired = history.append(EntryKind.TOOL_RESULTS, f"restart-repair:{last.seq}", Message(role="tool", parts=results), run_id)
    return [repaired] if repaired is not None else []
