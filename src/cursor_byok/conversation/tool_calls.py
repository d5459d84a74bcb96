"""Tool batches of the active run: exec requests out to the IDE, its results in, aborts.

Data only: it reports when a batch completed and the runtime changes the phase. The conversation's
tool state (the todo list, how much of each background shell's output the model has seen, the
batch in flight) lives here too, and every change is handed to `on_state` to be persisted.

A batch cut by a restart is rebuilt (`recover`) by starting the same calls from the state they
started from and reserving the same exec ids, then taking the IDE's journaled results again in
order: the same inputs drive the same executions to the same outcomes. What the rebuilt batch would
send the IDE (exec requests, questions) is not sent again: it went out before the restart, or never,
and either way running it twice could repeat a side effect. A step taken because of a result that
arrives after the restart is new, and is sent. So that a batch is always known to the history when
the IDE runs any of it, a new batch's first requests go out once its start is stored (the
assistant message that asked for it was queued before).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import msgspec

from .. import tools
from ..protocol import agent_pb2 as pb, which
from ..run import Interrupted, ToolCallRequest, ToolOutcome
from . import updates
from .active_run import ActiveBatch, ActiveRun, PendingTool, now_ms
from .observation import NO_OBSERVER, ObservedTool, RunObserver

log = logging.getLogger("cursor_byok.runtime")

TOOL_RESULT_KINDS = frozenset({"exec_client_message", "exec_client_control_message", "interaction_response"})


class OpenBatch(msgspec.Struct):
    """The batch in flight, as it started: what rebuilding it after a restart needs."""

    request_id: str  # the stream of the run that started it (with generation)
    generation: str
    calls: list[str]  # its call ids, in order
    exec_base: int  # the exec id counter when it started: a rebuild reserves the same ids
    todos: list[tools.TodoEntry] = []
    shell_output_seen: dict[str, int] = {}


class ToolState(msgspec.Struct):
    """What tools remember across runs of one conversation (persisted, survives eviction)."""

    todos: list[tools.TodoEntry] = []
    shell_output_seen: dict[str, int] = {}
    todos_written: bool = False  # the todo list is ours (else the IDE's checkpoint keeps its own)
    open_batch: OpenBatch | None = None


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(ToolState).decode


def encode_tool_state(state: ToolState) -> bytes:
    return _encode(state)


def decode_tool_state(data: bytes) -> ToolState:
    return _decode(data)


class ToolRounds:
    def __init__(self, conversation_id: str, on_state: Callable[[ToolState], asyncio.Future[Any] | None], observer: RunObserver = NO_OBSERVER) -> None:
        self.conversation_id = conversation_id
        self.state = ToolState()
        self.next_exec_id = 0  # monotonic per runtime life (a rebuilt batch takes its ids again, first)
        self._on_state = on_state
        self._observer = observer
        self._held: list[pb.AgentServerMessage] | None = None  # what a starting batch sends, until it is stored

    def new_exec_id(self) -> int:
        """An exec id for a request outside any batch (the client's request context)."""
        self.next_exec_id += 1
        return self.next_exec_id

    def start(self, run: ActiveRun, calls: list[ToolCallRequest], future: asyncio.Future[list[ToolOutcome]]) -> bool:
        """Start a batch; True when it is already complete (tools that need no exec)."""
        assert run.tool_ctx is not None
        # The todo list as it is now: an earlier batch of this run may have changed it. Recorded
        # before any exec goes out, so a result the IDE sends back is never stored before it.
        state = self.state
        output = run.output
        state.open_batch = OpenBatch(
            output.request_id, output.cursor_run_id, [c.call_id for c in calls], self.next_exec_id,
            list(state.todos), dict(state.shell_output_seen),
        )
        stored = self._on_state(state)
        ctx = msgspec.structs.replace(run.tool_ctx, todos=tuple(state.todos), shell_output_seen=state.shell_output_seen)
        self._held = []
        try:
            done = self._begin_batch(run, calls, ctx, ActiveBatch([], future), run.presenter.model_call_id, send=True)
        finally:
            held, self._held = self._held, None
        if done or stored is None or stored.done():  # nothing of it runs in the IDE, or it is stored
            run.send(*held)
        else:
            stored.add_done_callback(lambda _: self._send_held(run, held))
        return done

    @staticmethod
    def _send_held(run: ActiveRun, held: list[pb.AgentServerMessage]) -> None:
        """A batch's first messages, once its start is stored (a store failure is the run's to
        report; holding them back would only hang it). A request for an exec aborted meanwhile
        is dropped: its abort went first."""
        run.send(*(m for m in held if _pending_request(run, m)))

    def recover(self, run: ActiveRun, calls: list[ToolCallRequest], ctx: tools.ToolContext) -> None:
        """Rebuild the batch cut by a restart (`state.open_batch`, whose calls are `calls`) for the
        resumed `run` (`run.rebuilt`), sending nothing."""
        opened = self.state.open_batch
        assert opened is not None
        self.next_exec_id = opened.exec_base
        run.tool_ctx = ctx
        started = msgspec.structs.replace(ctx, todos=tuple(opened.todos), shell_output_seen=dict(opened.shell_output_seen))
        future: asyncio.Future[list[ToolOutcome]] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # a cancel may end it unread
        batch = ActiveBatch([], future)
        run.rebuilt = batch
        self._begin_batch(run, calls, started, batch, "", send=False)

    def give_up_rebuilt(self, run: ActiveRun, reason: str) -> None:
        """End the calls of a rebuilt batch still waiting for results."""
        if run.rebuilt is not None and run.batch is run.rebuilt:
            self.abort_pending(run, reason)

    def _begin_batch(
        self, run: ActiveRun, calls: list[ToolCallRequest], ctx: tools.ToolContext, batch: ActiveBatch, model_call_id: str,
        *, send: bool,
    ) -> bool:
        run.batch = batch
        for call in calls:
            batch.pending.append(PendingTool(call, tools.start_tool(call, ctx, model_call_id=model_call_id), model_call_id))
        for pending in batch.pending:
            pending.started_ms = now_ms()
            if send and pending.execution.presentable:
                run.turns.steps.tool_started(pending.call.call_id)
                self._send(run, updates.interaction(tools.started_update(pending.execution, started_at_ms=pending.started_ms)))
            self._advance(run, pending, pending.execution.first(), send)
        return self._finish_if_done(run)

    def on_client_message(self, run: ActiveRun, kind: str, msg: Any, *, replayed: bool = False) -> bool:
        """A result, stream control or interaction answer from the IDE; True when it completed the
        batch. `replayed`: journaled before a restart (what it leads to was sent then). The answer
        to the ask for the client's request context goes to the run's preparation, which waits on it."""
        if run.context_query is not None and run.context_query.takes(kind, msg):
            return False
        send = not replayed
        if kind == "exec_client_message":
            if which(msg, "message") is None:
                return False  # an empty ExecClientMessage is not a result
            return self._step(run, msg.id, lambda p: p.execution.on_exec_result(msg), send)
        if kind == "interaction_response":
            return self._step(run, msg.id, lambda p: p.execution.on_interaction_response(msg), send)
        control = which(msg, "message")
        if control == "stream_close":
            exec_id = msg.stream_close.id
            return self._step(run, exec_id, lambda p: p.execution.on_stream_close(exec_id), send)
        if control == "throw":
            exec_id = msg.throw.id
            error = msg.throw.error or "the client reported an error"
            return self._step(run, exec_id, lambda p: p.execution.on_throw(error, exec_id), send)
        return False

    def abort_pending(self, run: ActiveRun, reason: str) -> None:
        """Abort every running exec (the IDE gets abort{id}); their calls complete as errors."""
        batch = run.batch
        if batch is None:
            return
        for pending in batch.pending:
            if pending.outcome is None:
                self._abort(run, pending, reason)
        run.execs.clear()
        run.batch = None
        if not batch.future.done():
            batch.future.set_exception(Interrupted([p.outcome for p in batch.pending if p.outcome is not None]))

    def cancel_subagent(self, run: ActiveRun, subagent_id: str) -> bool:
        batch = run.batch
        if batch is None:
            return False
        for pending in batch.pending:
            if pending.outcome is None and subagent_id in (pending.call.call_id, getattr(pending.execution, "subagent_id", None)):
                self._abort(run, pending, "The sub-task was cancelled by the user.")
        return self._finish_if_done(run)

    # -- internals ------------------------------------------------------------------------------------
    def _abort(self, run: ActiveRun, pending: PendingTool, reason: str) -> None:
        run.send(*(updates.exec_abort(exec_id) for exec_id in pending.exec_ids if exec_id in run.execs))
        self._advance(run, pending, pending.execution.on_abort(reason))

    def _step(self, run: ActiveRun, exec_id: int, fn: Callable[[PendingTool], Any], send: bool) -> bool:
        pending = run.execs.get(exec_id)
        if pending is None:
            log.info("ignoring a result for an unknown or finished exec", extra={"conversation_id": self.conversation_id, "exec_id": exec_id})
            return False
        try:
            step = fn(pending)
        except tools.ResultKindMismatch as exc:
            log.warning("exec result of the wrong kind ignored: %s", exc, extra={"conversation_id": self.conversation_id})
            return False
        self._advance(run, pending, step, send)
        return self._finish_if_done(run)

    def _advance(self, run: ActiveRun, pending: PendingTool, step: Any, send: bool = True) -> None:
        """Act on a step of a call; a request to the IDE goes out only when `send`."""
        match step:
            case tools.ExecStep():
                exec_id = self._reserve(run, pending)
                step.message.id = exec_id
                if not send:
                    pass
                elif step.delay_ms > 0:  # a background-shell poll: send it later, if still wanted
                    asyncio.get_running_loop().call_later(step.delay_ms / 1000, self._send_delayed, run, exec_id, step.message)
                else:
                    self._send(run, updates.exec_request(step.message))
            case tools.InteractionStep():
                step.query.id = self._reserve(run, pending)
                if send:
                    self._send(run, updates.interaction_query(step.query))
            case tools.Progress():
                self._send(run, *(updates.interaction(u) for u in step.updates))
            case tools.Done():
                pending.outcome = step.outcome
                for exec_id in pending.exec_ids:
                    run.execs.pop(exec_id, None)
                self._remember(pending.execution)
                ended_ms = now_ms()
                call = pending.call
                self._observer.tool_finished(run.observed, ObservedTool(call.call_id, call.name, pending.started_ms, ended_ms, step.outcome.is_error))
                if pending.execution.presentable:
                    update = tools.completed_update(pending.execution, completed_at_ms=ended_ms, started_at_ms=pending.started_ms)
                    run.turns.steps.tool_completed(pending.call.call_id, update.tool_call_completed.tool_call)
                    self._send(run, updates.interaction(update))

    def _remember(self, execution: tools.ToolExecution) -> None:
        changed = False
        if execution.todos is not None:
            self.state.todos = list(execution.todos)
            self.state.todos_written = True
            changed = True
        if execution.seen_output is not None:
            shell_id, seen = execution.seen_output
            self.state.shell_output_seen[shell_id] = seen
            changed = True
        if changed:
            self._on_state(self.state)

    def todo_items(self) -> list[pb.TodoItem] | None:
        """The todo list for a checkpoint (None: never written here, the IDE's own list stands)."""
        return [tools.todo_item(entry) for entry in self.state.todos] if self.state.todos_written else None

    def _send(self, run: ActiveRun, *messages: pb.AgentServerMessage) -> None:
        if self._held is not None:
            self._held.extend(messages)
        else:
            run.send(*messages)

    def _reserve(self, run: ActiveRun, pending: PendingTool) -> int:
        self.next_exec_id += 1
        pending.exec_ids.append(self.next_exec_id)
        run.execs[self.next_exec_id] = pending
        return self.next_exec_id

    @staticmethod
    def _send_delayed(run: ActiveRun, exec_id: int, message: pb.ExecServerMessage) -> None:
        if run.execs.get(exec_id) is not None:
            run.send(updates.exec_request(message))

    @staticmethod
    def _finish_if_done(run: ActiveRun) -> bool:
        batch = run.batch
        if batch is None or not batch.done():
            return False
        run.batch = None
        if not batch.future.done():
            batch.future.set_result([p.outcome for p in batch.pending if p.outcome is not None])
        return True


def _pending_request(run: ActiveRun, message: pb.AgentServerMessage) -> bool:
    """False for an exec request or question whose exec is no longer pending; True for the rest."""
    if message.HasField("exec_server_message"):
        return message.exec_server_message.id in run.execs
    if message.HasField("interaction_query"):
        return message.interaction_query.id in run.execs
    return True
