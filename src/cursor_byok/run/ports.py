"""What the run engine needs from its host (the conversation runtime), as protocols."""
from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Protocol

from ..providers import Message, ProviderCall, Usage
from .compaction import ContextEstimator
from .events import RunEvent
from .types import ToolCallRequest, ToolOutcome


class Interrupted(Exception):
    """Raised by a ToolPort when a soft interrupt aborted its batch. `outcomes` holds the calls that
    did finish; every other call of the batch gets the standard interrupted result."""

    def __init__(self, outcomes: list[ToolOutcome] | None = None) -> None:
        super().__init__("tool batch interrupted")
        self.outcomes = list(outcomes or [])


class ToolPort(Protocol):
    async def run_tools(self, calls: list[ToolCallRequest]) -> list[ToolOutcome]:
        """Execute a batch of valid calls (parsed is set) and return one outcome per call, in any
        order. May raise Interrupted. Calls with invalid arguments never reach the port: the engine
        answers them with an error outcome itself."""
        ...


class HistoryPort(Protocol):
    """The engine's view of the canonical history. Commits are append-only."""

    def messages(self) -> Sequence[Message]:
        """Provider-neutral projection of the history, ending with the current turn (keyed, so an
        adapter keeps each message's encoding across requests, see `KeyedMessages`)."""
        ...

    def estimator(self) -> ContextEstimator:
        """The estimate of this history's context size, kept with the history across its runs (so a
        run sizes only the messages added since the last one looked); reset when a compaction
        restarts the messages."""
        ...

    def stored(self) -> Awaitable[object] | None:
        """What the model must not be called before: the history it sees being stored durably (None
        once it is). The engine builds the request meanwhile and sends it once this is done. Asked
        right before each provider call is made: the host may take what it has pending (a cancel)
        before the request can leave."""
        ...

    def commit_assistant(self, message: Message, usage: Usage | None, *, answer: bool = False) -> None:
        """`answer`: the step made no tool calls, so the run's end (which waits for it to be stored)
        follows at once."""
        ...

    def commit_tool_results(self, message: Message) -> None: ...

    def take_injections(self) -> list[Message]:
        """Remove and return user messages queued by soft interrupts (may be empty)."""
        ...

    def commit_injected(self, messages: list[Message]) -> None:
        """Append messages returned by take_injections; the engine calls this at a cycle boundary,
        in the same order, right after taking them."""
        ...

    def compact(self, summary: str) -> None:
        """Prefix reset: keep only the latest request context, then the summary, then the current
        turn. Called between model cycles, never during one."""
        ...


class EventSink(Protocol):
    def emit(self, event: RunEvent) -> None:
        """Synchronous and non-blocking; called once per event in order."""
        ...

    def provider_call(self, call: ProviderCall) -> None:
        """A provider call ended (however it ended): what it did, for observers. Synchronous."""
        ...
