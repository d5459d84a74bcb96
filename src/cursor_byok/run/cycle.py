"""One model response assembled from its stream events (a cycle's, or a summary call's), and the
tool batch it asks for: the calls parsed, and one outcome per call once the batch has run."""
from __future__ import annotations

import time
from typing import Any

import msgspec

from ..providers import (
    Finish,
    Message,
    ProviderCall,
    StopReason,
    StreamEvent,
    TextDelta,
    TextPart,
    ThinkingDelta,
    ThinkingEnd,
    ThinkingPart,
    ToolCallArgsDelta,
    ToolCallPart,
    ToolCallStart,
    ToolResultPart,
    Usage,
)
from .events import ModelCycleStarted
from .ports import EventSink
from .types import INTERRUPTED_RESULT, ToolCallRequest, ToolOutcome

NO_RESULT = "The tool finished without returning a result."


# ---- one model response, assembled from stream events --------------------------------------------
class _Text:
    __slots__ = ("chunks",)

    def __init__(self) -> None:
        self.chunks: list[str] = []


class _Thinking:
    __slots__ = ("chunks", "replay", "closed")

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.replay: dict[str, Any] | None = None
        self.closed = False


class _Call:
    __slots__ = ("id", "name", "chunks")

    def __init__(self, call_id: str, name: str) -> None:
        self.id = call_id
        self.name = name
        self.chunks: list[str] = []


class Cycle:
    """Forwards a cycle's stream events to the sink and builds the assistant message from them."""

    __slots__ = ("_emit", "_step", "_begun", "_parts", "_current", "_calls", "usage", "stop_reason", "emitted", "call")

    def __init__(self, sink: EventSink, step: int, call: ProviderCall) -> None:
        self._emit = sink.emit
        self._step = step
        self._begun = False
        self._parts: list[_Text | _Thinking | _Call] = []
        self._current: _Text | _Thinking | None = None
        self._calls: dict[int, _Call] = {}
        self.usage: Usage | None = None
        self.stop_reason: StopReason = "other"
        self.emitted = False
        self.call = call

    def _new_part(self, part: _Text | _Thinking | _Call) -> None:
        self._parts.append(part)
        if not self.call.first_token_ns:
            self.call.first_token_ns = time.monotonic_ns()

    def begin(self) -> None:
        """Report the cycle started, once: after its request has left, and before its first event."""
        if not self._begun:
            self._begun = True
            self._emit(ModelCycleStarted(self._step))

    def apply(self, event: StreamEvent) -> None:
        if not self._begun:
            self.begin()
        kind = type(event)
        if kind is TextDelta:
            current = self._current
            if type(current) is not _Text:
                current = self._current = _Text()
                self._new_part(current)
            current.chunks.append(event.text)  # type: ignore[union-attr]
        elif kind is ToolCallArgsDelta:
            call = self._calls.get(event.index)  # type: ignore[union-attr]
            if call is not None:
                call.chunks.append(event.delta)  # type: ignore[union-attr]
        elif kind is ThinkingDelta:
            current = self._current
            if type(current) is not _Thinking or current.closed:  # type: ignore[union-attr]
                current = self._current = _Thinking()
                self._new_part(current)
            current.chunks.append(event.text)  # type: ignore[union-attr]
        elif kind is ThinkingEnd:
            current = self._current
            if type(current) is not _Thinking or current.closed:  # type: ignore[union-attr]
                current = _Thinking()  # replay-only block (e.g. encrypted reasoning, no summary)
                self._parts.append(current)
            current.replay = event.replay  # type: ignore[union-attr]
            current.closed = True  # type: ignore[union-attr]
            self._current = None
        elif kind is ToolCallStart:
            call = _Call(event.id, event.name)  # type: ignore[union-attr]
            self._calls[event.index] = call  # type: ignore[union-attr]
            self._new_part(call)
            self._current = None
        elif kind is Usage:
            self.usage = event  # type: ignore[assignment]
        elif kind is Finish:
            self.stop_reason = event.stop_reason  # type: ignore[union-attr]
            return  # reported as ModelCycleFinished instead
        if not self.emitted:
            self.call.first_event_ns = time.monotonic_ns()
            self.emitted = True
        self._emit(event)

    def message(self) -> Message:
        parts: list[Any] = []
        for part in self._parts:
            if type(part) is _Text:
                text = "".join(part.chunks)
                if text:
                    parts.append(TextPart(text))
            elif type(part) is _Thinking:
                parts.append(ThinkingPart("".join(part.chunks), part.replay))
            else:
                parts.append(ToolCallPart(part.id, part.name, "".join(part.chunks)))  # type: ignore[union-attr]
        return Message("assistant", parts)

    def partial_text(self) -> Message | None:
        """What an interrupted cycle keeps: its text only (tool calls and unsigned thinking go)."""
        texts = ["".join(p.chunks) for p in self._parts if type(p) is _Text]
        parts = [TextPart(t) for t in texts if t]
        return Message("assistant", parts) if parts else None

    def tool_calls(self) -> list[ToolCallRequest]:
        return [tool_call_request(p.id, p.name, "".join(p.chunks)) for p in self._parts if type(p) is _Call]


def tool_call_request(call_id: str, name: str, arguments: str) -> ToolCallRequest:
    """A model's tool call as the ToolPort gets it: its arguments parsed, or why they could not be."""
    if not arguments.strip():
        return ToolCallRequest(call_id, name, arguments, {})
    try:
        value = msgspec.json.decode(arguments)
    except msgspec.DecodeError as exc:
        return ToolCallRequest(call_id, name, arguments, None, f"the arguments are not valid JSON ({exc})")
    if not isinstance(value, dict):
        return ToolCallRequest(call_id, name, arguments, None, "the arguments must be a JSON object")
    return ToolCallRequest(call_id, name, arguments, value)


def batch_outcomes(calls: list[ToolCallRequest], returned: list[ToolOutcome], interrupted: bool) -> list[ToolOutcome]:
    """One outcome per call of a batch, in call order: what the ToolPort returned for the valid
    calls (the batch was `interrupted` when it raised), the argument error of an invalid one."""
    results: dict[str, ToolOutcome] = {}
    for outcome in returned:
        results.setdefault(outcome.call_id, outcome)
    outcomes: list[ToolOutcome] = []
    for call in calls:
        if call.parsed is None:
            outcomes.append(_invalid_outcome(call))
        elif call.call_id in results:
            outcomes.append(results[call.call_id])
        else:
            content = INTERRUPTED_RESULT if interrupted else NO_RESULT
            outcomes.append(ToolOutcome(call.call_id, call.name, content, is_error=True))
    return outcomes


def tool_results_message(outcomes: list[ToolOutcome]) -> Message:
    return Message("tool", [ToolResultPart(o.call_id, o.name, o.content, o.is_error, o.images) for o in outcomes])


def _invalid_outcome(call: ToolCallRequest) -> ToolOutcome:
    return ToolOutcome(
        call.call_id, call.name,
        f"Invalid arguments for {call.name}: {call.error}. Call the tool again with a complete JSON object.",
        is_error=True,
    )


class Summary:
    """Collects a summary call's text; nothing of it reaches the sink."""

    __slots__ = ("chunks", "usage", "stop_reason", "call")

    def __init__(self, call: ProviderCall) -> None:
        self.chunks: list[str] = []
        self.usage: Usage | None = None
        self.stop_reason: StopReason = "other"
        self.call = call

    def apply(self, event: StreamEvent) -> None:
        call = self.call
        if not call.first_event_ns:
            call.first_event_ns = time.monotonic_ns()
        if type(event) is TextDelta:
            if not call.first_token_ns:
                call.first_token_ns = call.first_event_ns
            self.chunks.append(event.text)
        elif type(event) is Usage:
            self.usage = event
        elif type(event) is Finish:
            self.stop_reason = event.stop_reason
