"""What the conversation domain tells its observer (the `observability` package): a run started, one
of its provider calls ended, one of its tools finished, the run ended. The runtime makes these calls
at points it passes anyway; an observer only reads, and nothing it does changes a run.
"""
from __future__ import annotations

import time
from typing import Any, Protocol

import msgspec

from ..config import ModelConfig
from ..protocol import new_trace_id
from ..run import ProviderCall


class ObservedRun(msgspec.Struct, eq=False):
    """One run as observers see it. `trace_id` names the run's chain of work (its provider calls,
    its log lines): server-unique, never the request id."""

    conversation_id: str
    run_id: str
    cursor_run_id: str
    request_id: str
    requested_model: str
    trace_id: str = msgspec.field(default_factory=new_trace_id)
    started_ms: int = msgspec.field(default_factory=lambda: time.time_ns() // 1_000_000)
    started_ns: int = msgspec.field(default_factory=time.monotonic_ns)
    model: ModelConfig | None = None  # once the run's model is resolved
    phases: list[tuple[str, int]] = msgspec.field(default_factory=list)  # (phase entered, monotonic ns)
    observer_state: Any = None  # what the observer keeps about the run
    developer: str | None = None  # a team server's, whose run it is


class ObservedTool(msgspec.Struct, frozen=True):
    call_id: str
    name: str
    started_ms: int
    ended_ms: int
    is_error: bool


class RunObserver(Protocol):
    def run_started(self, run: ObservedRun) -> None: ...

    def provider_call(self, run: ObservedRun, call: ProviderCall) -> None:
        """May come after `run_finished` (a call cut by the run's cancellation ends later)."""

    def tool_finished(self, run: ObservedRun, tool: ObservedTool) -> None: ...

    def run_finished(self, run: ObservedRun, outcome: str, error_code: str | None, error_message: str | None) -> None: ...


class NoObserver:
    """Observes nothing (a memory-only runtime, or observability turned off)."""

    def run_started(self, run: ObservedRun) -> None:
        pass

    def provider_call(self, run: ObservedRun, call: ProviderCall) -> None:
        pass

    def tool_finished(self, run: ObservedRun, tool: ObservedTool) -> None:
        pass

    def run_finished(self, run: ObservedRun, outcome: str, error_code: str | None, error_message: str | None) -> None:
        pass


NO_OBSERVER = NoObserver()
