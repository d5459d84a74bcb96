"""The state of one run while it is active: its stream, engine, tool batch, injections, checkpoints."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from .. import tools
from ..config import ModelConfig
from ..protocol import agent_pb2 as pb, encode_server_message, encode_server_messages
from ..run import RunEngine, RunSpec, ToolCallRequest, ToolOutcome
from .actions import Injected
from .output import OutputStream
from .presenter import RunPresenter


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(eq=False)
class PendingTool:
    call: ToolCallRequest
    execution: tools.ToolExecution
    model_call_id: str
    outcome: ToolOutcome | None = None
    exec_ids: list[int] = field(default_factory=list)
    started_ms: int = 0


@dataclass(eq=False)
class ActiveBatch:
    pending: list[PendingTool]
    future: asyncio.Future[list[ToolOutcome]]

    def done(self) -> bool:
        return all(p.outcome is not None for p in self.pending)


@dataclass(eq=False)
class ActiveRun:
    run_id: str
    cursor_run_id: str
    request_id: str
    output: OutputStream
    run_request: pb.AgentRunRequest
    mode: int
    follow_up: bool = False  # built by the runtime from an action on this stream, not sent by the IDE
    started_ms: int = field(default_factory=now_ms)
    model: ModelConfig | None = None
    engine: RunEngine | None = None
    spec: RunSpec | None = None
    task: asyncio.Task[Any] | None = None
    batch: ActiveBatch | None = None
    execs: dict[int, PendingTool] = field(default_factory=dict)
    injections: list[Injected] = field(default_factory=list)
    taken: list[Injected] = field(default_factory=list)  # handed to the engine, not yet committed
    input_keys: set[str] = field(default_factory=set)  # inputs injected into this run
    presenter: RunPresenter = field(init=False)
    side_tasks: set[asyncio.Task[None]] = field(default_factory=set)  # step checkpoints in flight
    checkpoint_seq: int = 0  # checkpoints started in this run
    checkpoint_sent: int = 0  # the newest one written to the stream
    call_model: bool = True  # False: the input was answered already; finish without the model
    input_stored: asyncio.Future[Any] | None = None  # the turn's input being written: the model waits for it
    tool_ctx: tools.ToolContext | None = None

    def send(self, *messages: pb.AgentServerMessage) -> None:
        """Write server messages to this run's stream (nothing once it has its terminal)."""
        if self.output.closed or not messages:
            return
        if len(messages) == 1:
            self.output.write(encode_server_message(messages[0]))
        else:
            self.output.write(encode_server_messages(messages))
