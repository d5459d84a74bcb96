"""In-memory stand-ins for the conversation runtime's side of the engine's ports."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from cursor_byok.run import ContextEstimator, Message, ProviderCall, RunEvent, TextPart, ToolCallRequest, ToolOutcome, Usage


def user(text: str) -> Message:
    return Message("user", [TextPart(text)])


class MemoryHistory:
    def __init__(self, *initial: Message) -> None:
        self.items: list[Message] = list(initial)
        self.queue: list[Message] = []
        self.log: list[tuple[str, object]] = []
        self.summaries: list[str] = []
        self.answers: list[bool] = []  # per assistant commit: was it marked as the run's answer
        self.context_size = ContextEstimator()

    def messages(self) -> list[Message]:
        return list(self.items)

    def estimator(self) -> ContextEstimator:
        return self.context_size

    def stored(self) -> Awaitable[object] | None:
        return None  # memory only: nothing to wait for

    def commit_assistant(self, message: Message, usage: Usage | None, *, answer: bool = False) -> None:
        self.items.append(message)
        self.log.append(("assistant", (message, usage)))
        self.answers.append(answer)

    def commit_tool_results(self, message: Message) -> None:
        self.items.append(message)
        self.log.append(("tool", message))

    def take_injections(self) -> list[Message]:
        taken, self.queue = self.queue, []
        return taken

    def commit_injected(self, messages: list[Message]) -> None:
        self.items.extend(messages)
        self.log.append(("injected", messages))

    def compact(self, summary: str) -> None:
        # The runtime keeps the latest request context, the summary and the current turn; here the
        # current turn is the last user message.
        current = next(m for m in reversed(self.items) if m.role == "user")
        self.items = [user(f"Summary of the conversation so far:\n{summary}"), current]
        self.context_size.reset()
        self.summaries.append(summary)
        self.log.append(("compact", summary))


class RecordingSink:
    def __init__(self, on_event: Callable[[RunEvent], None] | None = None) -> None:
        self.events: list[RunEvent] = []
        self.calls: list[ProviderCall] = []  # provider calls, as they ended
        self.on_event = on_event

    def provider_call(self, call: ProviderCall) -> None:
        self.calls.append(call)

    def emit(self, event: RunEvent) -> None:
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]


Handler = Callable[[list[ToolCallRequest]], Awaitable[list[ToolOutcome]]]


async def echo_tools(calls: list[ToolCallRequest]) -> list[ToolOutcome]:
    return [ToolOutcome(c.call_id, c.name, f"{c.name} ok: {c.parsed}") for c in calls]


class ScriptedTools:
    def __init__(self, handler: Handler = echo_tools) -> None:
        self.handler = handler
        self.batches: list[list[ToolCallRequest]] = []
        self.cancelled = asyncio.Event()

    async def run_tools(self, calls: list[ToolCallRequest]) -> list[ToolOutcome]:
        self.batches.append(calls)
        try:
            return await self.handler(calls)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
