"""Events the run engine emits; provider stream events (except Finish) are forwarded as they are."""
from __future__ import annotations

from typing import Literal, Union

import msgspec

from ..providers import (
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from .types import ToolCallRequest, ToolOutcome

# What ModelCycleFinished reports: the provider's stop reason, or why the engine ended the cycle.
CycleStop = Literal["end_turn", "tool_use", "max_tokens", "refusal", "other", "interrupted", "context_length"]


class ModelCycleStarted(msgspec.Struct, frozen=True):
    step: int  # 1-based count of model calls in this run


class ModelCycleFinished(msgspec.Struct, frozen=True):
    step: int
    stop_reason: CycleStop


class ToolBatchStarted(msgspec.Struct, frozen=True):
    calls: list[ToolCallRequest]  # every call of the response, in order, invalid ones included


class ToolBatchFinished(msgspec.Struct, frozen=True):
    outcomes: list[ToolOutcome]  # one per call, in call order, as committed to history


class CompactionStarted(msgspec.Struct, frozen=True):
    reason: Literal["threshold", "context_length"]
    estimated_tokens: int


class CompactionFinished(msgspec.Struct, frozen=True):
    summary: str
    applied: bool = True  # False: a soft interrupt stopped the summary call; history is unchanged


RunEvent = Union[
    ModelCycleStarted,
    ModelCycleFinished,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    ToolCallStart,
    ToolCallArgsDelta,
    ToolCallEnd,
    Usage,
    ToolBatchStarted,
    ToolBatchFinished,
    CompactionStarted,
    CompactionFinished,
]
