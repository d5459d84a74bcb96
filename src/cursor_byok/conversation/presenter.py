"""Turns one run's engine events into the Cursor updates the IDE renders (text, thinking, tool-call
partials, token counts, steps), keeping the little state that takes: open thinking, streamed tool
arguments, usage so far. Output only: it never touches the lifecycle."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .. import tools
from ..protocol import agent_pb2 as pb
from ..run import (
    CompactionFinished,
    CompactionStarted,
    ModelCycleFinished,
    ModelCycleStarted,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    ToolCallArgsDelta,
    ToolCallStart,
    Usage,
)
from . import updates
from .history import TurnLog

USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


class RunPresenter:
    def __init__(
        self, run_id: str, workspace_root: str | None, write: Callable[..., None], turns: TurnLog,
        write_frame: Callable[..., None],
    ) -> None:
        self.run_id = run_id
        self.turns = turns  # the steps of the turn in progress are recorded there
        self.workspace_root = workspace_root
        self._write = write  # (*AgentServerMessage) -> None
        # An encoded message's frame (the stream is open while events come); `now=True`: sent at once.
        self._write_frame = write_frame
        self._first_output = False  # the model cycle's first text or thinking is still to come: it goes at once
        self.step = 0
        self.model_call_id = ""
        self.output_tokens = 0
        self.usage: dict[str, int] = {}
        self._thinking_since: float | None = None
        self._args: dict[str, tools.ArgsStream] = {}

    def present(self, event: Any) -> bool:
        """Write the updates for one engine event. True when a new model cycle (step) started."""
        if type(event) is TextDelta:  # most events are; their frames are built without a message
            if self._thinking_since is not None:
                self.end_thinking()
            self.turns.steps.text(event.text)
            self._write_output(updates.text_delta_frame(event.text))
            return False
        match event:
            case ThinkingDelta():
                if self._thinking_since is None:
                    self._thinking_since = time.monotonic()
                self.turns.steps.thinking(event.text)
                self._write_output(updates.thinking_delta_frame(event.text))
            case ThinkingEnd():
                self.end_thinking()
            case ToolCallStart():
                self.end_thinking()
                self.turns.steps.close()
                stream = tools.ArgsStream(event.id, event.name, self.model_call_id, workspace_root=self.workspace_root)
                self._args[event.id] = stream
                self._interaction(stream.opened())
            case ToolCallArgsDelta():
                stream = self._args.get(event.id)
                if stream is not None:
                    self._interaction(stream.feed(event.delta))
            case Usage():
                if event.output_tokens:
                    self.output_tokens += event.output_tokens
                    self._write(updates.token_delta(self.output_tokens))
                for name in USAGE_FIELDS:
                    value = getattr(event, name)
                    if value is not None:
                        self.usage[name] = self.usage.get(name, 0) + value
            case ModelCycleStarted():
                self.step = event.step
                self.model_call_id = f"{self.run_id}:{event.step}"
                self._args.clear()
                self._first_output = True
                self._write_frame(updates.step_started_frame(event.step))
                return True
            case ModelCycleFinished():
                self.end_thinking()
                self.turns.steps.close()
                self._write(updates.step_completed(event.step, 0))
            case CompactionStarted():
                self._write(updates.summary_started())
            case CompactionFinished():
                self._write(updates.summary_completed())  # applied or not: the IDE stops showing it
        return False

    def _write_output(self, frame: bytes) -> None:
        """A text or thinking delta's frame. The cycle's first goes at once: a user waits for it,
        and at the pass's end it would follow every other stream's work in that pass."""
        if self._first_output:
            self._first_output = False
            self._write_frame(frame, now=True)
        else:
            self._write_frame(frame)

    def end_thinking(self) -> None:
        if self._thinking_since is not None:
            ms = int((time.monotonic() - self._thinking_since) * 1000)
            self._thinking_since = None
            self.turns.steps.end_thinking(ms)
            self._write(updates.thinking_completed(ms))

    def usage_total(self) -> Usage | None:
        return Usage(**self.usage) if self.usage else None

    def _interaction(self, items: list[pb.InteractionUpdate]) -> None:
        if items:
            self._write(*(updates.interaction(u) for u in items))
