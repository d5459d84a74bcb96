"""The state of one run while it is active: its stream, engine, tool batch, injections, checkpoints."""
from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

import msgspec

from .. import tools
from ..config import ModelConfig
from ..protocol import agent_pb2 as pb, encode_server_message, encode_server_messages, requested_model_id
from ..run import RunEngine, RunSpec, ToolCallRequest, ToolOutcome
from .actions import Injected
from .client_context import ContextQuery
from .history import DerivedState, TurnLog
from .identity import new_run_id
from .observation import ObservedRun
from .output import OutputStream
from .presenter import RunPresenter
from .run_setup import cursor_run_id, prefetched_blobs, turn_start


def now_ms() -> int:
    return int(time.time() * 1000)


class PendingTool(msgspec.Struct, eq=False):
    call: ToolCallRequest
    execution: tools.ToolExecution
    model_call_id: str
    outcome: ToolOutcome | None = None
    exec_ids: list[int] = msgspec.field(default_factory=list)
    started_ms: int = 0


class ActiveBatch(msgspec.Struct, eq=False):
    pending: list[PendingTool]
    future: asyncio.Future[list[ToolOutcome]]

    def done(self) -> bool:
        return all(p.outcome is not None for p in self.pending)


class ActiveRun(msgspec.Struct, eq=False):
    run_id: str
    cursor_run_id: str
    request_id: str
    output: OutputStream
    run_request: pb.AgentRunRequest
    mode: int
    presenter: RunPresenter
    observed: ObservedRun
    turns: TurnLog  # the turns this run adds, with their steps
    derived: DerivedState  # what its tool calls add to its checkpoints
    follow_up: bool = False  # built by the runtime from an action on this stream, not sent by the IDE
    resumed: bool = False  # after a restart, from the journaled input of its stream
    started_ms: int = msgspec.field(default_factory=now_ms)
    model: ModelConfig | None = None
    engine: RunEngine | None = None
    spec: RunSpec | None = None
    task: asyncio.Task[Any] | None = None
    batch: ActiveBatch | None = None
    execs: dict[int, PendingTool] = msgspec.field(default_factory=dict)
    injections: list[Injected] = msgspec.field(default_factory=list)
    taken: list[Injected] = msgspec.field(default_factory=list)  # handed to the engine, not yet committed
    input_keys: set[str] = msgspec.field(default_factory=set)  # inputs injected into this run
    side_tasks: set[asyncio.Task[None]] = msgspec.field(default_factory=set)  # step checkpoints in flight
    checkpoint_seq: int = 0  # checkpoints started in this run
    checkpoint_sent: int = 0  # the newest one written to the stream
    checkpoint_stored: int = 0  # the newest one given to the store (each replaces the one before)
    call_model: bool = True  # False: the input was answered already; finish without the model
    cancelled: bool = False  # cancelled while preparing: it ends once prepared, before the model
    # Its stream lost its last reader: the reattach grace running out ends the run (see runtime).
    unread: asyncio.TimerHandle | None = None
    input_stored: asyncio.Future[Any] | None = None  # the turn's input being written: the model waits for it
    tool_ctx: tools.ToolContext | None = None
    context_query: ContextQuery | None = None  # the client asked for its request context (its request had none)
    compactions: list[Any] = msgspec.field(default_factory=list)  # checkpoints.Compaction, in order
    known_blobs: dict[bytes, bytes] = msgspec.field(default_factory=dict)  # blob id → bytes (pre-fetched, fetched)
    final_state: pb.ConversationStateStructure | None = None  # the final checkpoint, once sent
    # A resumed run: the batch its stream had in flight, rebuilt (`owed_calls`: every call of that
    # assistant message), and whether the IDE came back for the stream (True) or not (False).
    owed_calls: list[ToolCallRequest] = msgspec.field(default_factory=list)
    rebuilt: ActiveBatch | None = None
    claim: asyncio.Future[bool] | None = None

    def claimed(self, by_ide: bool) -> None:
        """The IDE came back for this resumed run's stream (it reads or appends to it), or will not."""
        if self.claim is not None and not self.claim.done():
            self.claim.set_result(by_ide)

    def send(self, *messages: pb.AgentServerMessage) -> None:
        write_to(self.output, *messages)

    def cancel_tasks(self) -> None:
        """Cancel the run's tasks, letting go of its own: a cancelled task holds its frames, and so
        this run, through its exception."""
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.cancel()
        for side in list(self.side_tasks):
            side.cancel()
        self.end_grace()

    def end_grace(self) -> None:
        """No reattach grace runs out for it any more: its stream has a reader again, or it ended."""
        if self.unread is not None:
            self.unread.cancel()
            self.unread = None


def write_to(output: OutputStream, *messages: pb.AgentServerMessage) -> None:
    """Write server messages to a stream (nothing once it has its terminal)."""
    if output.closed or not messages:
        return
    if len(messages) == 1:
        output.write(encode_server_message(messages[0]))
    else:
        output.write(encode_server_messages(messages))


def begin_run(
    conversation_id: str, request_id: str, output: OutputStream, rr: pb.AgentRunRequest, *, follow_up: bool, resumed: bool
) -> ActiveRun:
    """A new run of `rr`: its ids, presenter and observation record, the blobs the request carried,
    and the turn it opens (a run without a user message continues the last turn)."""
    mode, user, root = turn_start(rr)
    run_id, cursor_id, turns = new_run_id(), cursor_run_id(rr), TurnLog(request_id)
    # Bound to the stream, not to the run: a run that holds what refers back to it is only freed by
    # the cycle collector, with its run request and turns.
    presenter = RunPresenter(run_id, root, functools.partial(write_to, output), turns, output.write)
    observed = ObservedRun(conversation_id, run_id, cursor_id, request_id, requested_model_id(rr), developer=output.developer)
    run = ActiveRun(
        run_id, cursor_id, request_id, output, rr, mode, presenter, observed, turns,
        DerivedState(rr.conversation_state), follow_up, resumed=resumed,
    )
    if rr.pre_fetched_blobs:
        run.known_blobs.update(prefetched_blobs(rr))
    if user is not None:
        run.turns.begin(user, run.mode)
    return run
