"""ConversationRuntime: the ONLY lifecycle writer of a conversation.

Commands come in one at a time, in order: ordered wire input, run-engine requests (tool batches),
engine/prepare/checkpoint completion, timers, transport attach/detach and shutdown. A turn's own
(its run request, its RunSSE coming, the client's input, the end of its steps, its finalize window)
are taken in the step they come in when none is queued ahead or being handled (`take_now`); the
rest wait in a queue, taken by a task made when the first one waits. Phase changes go through
`state.check_transition`, the one literal table; what an action means in each phase is
`actions.decide`; terminals are written only here, once per stream.

Output (deltas, tool cards, exec requests) is written straight to the run's OutputStream from the
engine's synchronous sink: that is data, not lifecycle, and keeps a delta's path to the client free of
queue hops. The conversation's data (`data`: history, tool state, checkpoints, the store) is
prepared and changed from here too, but holds no lifecycle of its own.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from .. import prompting
from ..protocol import (
    SERVER_HEARTBEAT_FRAME, ConnectError, agent_pb2 as pb, encode_server_message, end_stream_error, end_stream_ok, internal_error,
    new_error_id, which,
)
from ..run import Interrupted
from . import actions, updates
from .active_run import ActiveRun, begin_run
from .commands import (
    CheckpointDone, ClientInput, Command, EngineDone, FinalizeExpired, Heartbeat, InjectionsTaken, Prepared, ReattachExpired, Reader,
    RecoveryExpired, Shutdown, StartRun, ToolBatch, checkpoint_done, engine_done, prepared,
)
from .data import ConversationData, RuntimeServices
from .engine_port import RunPorts
from .inbox import CommandInbox
from .output import OutputStream
from .run_errors import run_error
from .run_setup import cursor_run_id
from .state import Outcome, Phase, check_transition
from .tool_calls import TOOL_RESULT_KINDS
from .turn_input import stored_as

log = logging.getLogger("cursor_byok.runtime")
TAKEN_OVER = "its client left and sent a new run request"

INTERRUPTED_TOOL_TEXT = "Tool execution was interrupted by a newer user message."
CANCELED_TOOL_TEXT = "Tool execution was cancelled."
MID_RUN = (Phase.MODELING, Phase.WAITING_TOOLS, Phase.INTERRUPTING)


class ConversationRuntime(CommandInbox):
    def __init__(self, conversation_id: str, services: RuntimeServices) -> None:
        super().__init__(f"conversation:{conversation_id}")
        self.conversation_id = conversation_id
        self.s = services
        self.phase = Phase.IDLE
        self.run: ActiveRun | None = None
        self.data = ConversationData(conversation_id, services)
        self.queued: collections.deque[StartRun] = collections.deque()
        self.last_active = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def idle(self) -> bool:
        return self.phase is Phase.IDLE and not self.queued and not self._queue

    def _take(self, cmd: Command) -> bool:
        """Handle one command (True: the runtime ends); one at a time, in order."""
        self.last_active = time.monotonic()
        self._taking = True
        try:
            return self._handle(cmd)
        except Exception:  # a bug in a handler must not kill the conversation silently
            error_id = new_error_id()
            log.exception("runtime handler failed", extra={"conversation_id": self.conversation_id, "error_id": error_id})
            if self.run is not None and self.phase is not Phase.FINALIZING:
                self._fail(internal_error(error_id))
            return False
        finally:
            self._taking = False

    def _handle(self, cmd: Command) -> bool:
        match cmd:
            case ClientInput():
                self._on_client_input(cmd)
            case ToolBatch():
                self._on_tool_batch(cmd)
            case Heartbeat():
                if not cmd.output.closed:
                    cmd.output.write(SERVER_HEARTBEAT_FRAME)
            case StartRun():
                self._on_start_run(cmd)
            case Prepared():
                self._on_prepared(cmd)
            case EngineDone():
                self._on_engine_done(cmd)
            case InjectionsTaken():
                if self.is_current(cmd.run_id) and self.phase is Phase.INTERRUPTING:
                    self._transition(Phase.MODELING)
            case CheckpointDone():
                self._on_checkpoint_done(cmd)
            case RecoveryExpired():  # a resumed run waited long enough for its IDE
                self.data.give_up_resume(self.run if self.is_current(cmd.run_id) else None)
            case FinalizeExpired():
                if self.is_current(cmd.run_id) and self.phase is Phase.FINALIZING:
                    self._close_window(cmd)
            case Reader():
                self._on_reader(cmd)
            case ReattachExpired():
                if self.is_current(cmd.run_id) and self.run is not None and not self.run.output.readers:
                    self._cancel(self.run, "its client left and did not come back")
            case Shutdown():
                self._on_shutdown(cmd)
                return True
        return False

    def _transition(self, target: Phase) -> None:
        try:
            check_transition(self.conversation_id, self.phase, target)
        except Exception:
            extra = {"conversation_id": self.conversation_id, "from": self.phase.value, "to": target.value}
            log.error("illegal lifecycle transition", extra=extra)
            raise
        self.phase = target
        if self.run is not None:
            self.run.observed.phases.append((target._value_, time.monotonic_ns()))  # _value_: the attribute, not the property's call

    def is_current(self, run_id: str) -> bool:
        return self.run is not None and self.run.run_id == run_id

    # -- starting runs -------------------------------------------------------------------------------
    def _on_start_run(self, cmd: StartRun) -> None:
        if cmd.parent is not None and self.data.parent is None:
            self.data.parent = cmd.parent
        if self.phase is Phase.IDLE and not self.queued and not cmd.output.closed:  # nothing ahead, no run: no queue trip
            self._begin(cmd)
            return
        self.queued.append(cmd)
        self.data.run_queued(self.run, cmd.output)
        if self.phase is Phase.IDLE:
            self._begin_next()
        elif self.phase is Phase.FINALIZING:
            self._finish_finalizing()
        elif self.run is not None and self.run.unread is not None and cmd.output is not self.run.output:
            self._cancel(self.run, TAKEN_OVER)  # Cursor's SDK cancels so

    def _begin_next(self) -> None:
        """Start the oldest queued run whose stream is still open (a cancel or failure closed the
        stream of follow-ups queued behind it: its terminal told the IDE)."""
        while self.queued:
            cmd = self.queued.popleft()
            if not cmd.output.closed:
                self._begin(cmd)
                return

    def _begin(self, cmd: StartRun) -> None:
        run = begin_run(self.conversation_id, cmd.request_id, cmd.output, cmd.run_request, follow_up=cmd.follow_up, resumed=cmd.resumed)
        self.s.observer.run_started(run.observed)
        self.data.blobs.held_by_client(cmd.request_id, cmd.run_request.conversation_state)
        self.run = run
        self._transition(Phase.PREPARING)
        if cmd.resumed:  # before any input is taken; it waits for its IDE, not forever
            self.data.resume(run, partial(self.post, RecoveryExpired(run.run_id)))
        self._start(run, self.data.prepare(run), prepared)

    def _start(self, run: ActiveRun, work: Awaitable[Any], done: Callable[[str, BaseException | None, Any], Command]) -> None:
        """Run one step of `run` (`work`, not yet started), at once up to its first wait, then as its
        task; its end (result or error) comes back as the command `done(run id, error, result)`,
        taken where it ends when the runtime is free, and the handlers decide what it means. A
        cancelled task reports nothing: the run has ended. One that ends without waiting (a prepare
        with nothing to read) is taken next, as the queue would: now, unless commands wait ahead."""
        run.task, ended = self._step(run.run_id, work, done)
        if ended is not None:
            self._take_next(ended)

    # -- prepare done → modeling -----------------------------------------------------------------------
    def _on_prepared(self, cmd: Prepared) -> None:
        if not self.is_current(cmd.run_id) or self.phase is not Phase.PREPARING:
            return
        run = self.run
        assert run is not None
        if run.cancelled:  # its input is in the history now, as a turn cancelled later keeps it
            self._end_run(Outcome.CANCELED, END_STREAM_CANCELED)
            return
        if cmd.error is not None:
            self._fail(run_error(cmd.error))
            return
        if not run.call_model and not run.injections:
            self._succeed()  # the input was answered already: finish without waking the model
            return
        self._transition(Phase.MODELING)
        self._run_engine(run)

    def _run_engine(self, run: ActiveRun) -> None:
        assert run.engine is not None and run.spec is not None
        port = RunPorts(self, run)
        self._start(run, run.engine.run(run.spec, port, port, port), engine_done)

    # -- tools and client input ---------------------------------------------------------------------------
    def _on_tool_batch(self, cmd: ToolBatch) -> None:
        run = self.run
        if run is None or run.run_id != cmd.run_id or self.phase is not Phase.MODELING:
            if not cmd.future.done():
                cmd.future.set_exception(Interrupted())
            return
        self._transition(Phase.WAITING_TOOLS)
        if self.data.tool_rounds.start(run, cmd.calls, cmd.future):
            self._batch_done()
        else:
            self.data.checkpoints.round_started(run, lambda: self.is_current(run.run_id) and self.phase in MID_RUN)

    def _batch_done(self) -> None:
        if self.phase is Phase.WAITING_TOOLS:
            self._transition(Phase.MODELING)

    def _on_client_input(self, cmd: ClientInput) -> None:
        msg = cmd.message
        kind = which(msg, "message")
        run = self.run
        on_run_stream = run is not None and cmd.output is run.output
        self.data.input_taken(cmd, run if on_run_stream else None)
        if kind in TOOL_RESULT_KINDS:
            # Exec ids are only unique within one runtime's lifetime: a result that comes on another
            # stream than the active run's (an earlier run's, before a restart) is late.
            if not on_run_stream:
                log.info("ignoring a tool result from another stream", extra={"conversation_id": self.conversation_id})
            elif self.data.tool_rounds.on_client_message(run, kind, getattr(msg, kind), replayed=cmd.replayed):  # type: ignore[arg-type]
                self._batch_done()
        elif kind == "kv_client_message":
            self.data.blobs.on_reply(cmd.request_id, msg.kv_client_message)
        elif kind == "conversation_action":
            self._on_action(cmd, msg.conversation_action)
        elif kind == "run_request":
            if not on_run_stream:
                log.warning("run_request on a transport without an active run", extra={"conversation_id": self.conversation_id})
                return
            self._on_start_run(StartRun(cmd.request_id, cmd.output, msg.run_request))  # type: ignore[arg-type]
        # client_heartbeat is answered by the gateway's Heartbeat command; prewarm and unknown variants
        # are ignored (kept by protobuf as unknown fields, never crashed on).

    # -- conversation actions: decided by `actions`, performed here -----------------------------------------
    def _situation(self) -> actions.Situation:
        run = self.run
        queued = tuple(actions.Stream(q.request_id, q.output.generation, cursor_run_id(q.run_request)) for q in self.queued)
        if run is None:
            return actions.Situation(self.phase, None, queued, prompting.Mode.AGENT)
        active = actions.Stream(run.request_id, run.output.generation, run.cursor_run_id)
        return actions.Situation(self.phase, active, queued, self.data.mode(run), f"{run.run_id}:{len(run.input_keys)}")

    def _on_action(self, cmd: ClientInput, action: pb.ConversationAction) -> None:
        stream = (cmd.request_id, cmd.output.generation if cmd.output is not None else -1)
        decision = actions.decide(self._situation(), stream, action)
        run = self.run
        match decision:
            case actions.CancelRun() if run is not None:
                self._cancel(run)
            case actions.EndStream():
                self._end_output_and_idle()
            case actions.CancelQueued():
                for q in [q for q in self.queued if (q.request_id, q.output.generation) == decision.stream]:
                    self.queued.remove(q)
                    self._close_stream(q.output, END_STREAM_CANCELED)
            case actions.CancelSubagent() if run is not None:
                if self.data.tool_rounds.cancel_subagent(run, decision.subagent_id):
                    self._batch_done()
            case actions.Inject() if run is not None:
                self._inject(run, decision.items, decision.interrupt)
            case actions.FollowUp():
                self._follow_up(decision)
            case actions.Reject():
                _, output = self._on_stream(decision.stream)
                if not output.closed:
                    output.write(encode_server_message(updates.injection_rejected(decision.injection_id, decision.reason)))
            case actions.Ignore():
                log.info("conversation action not applied: %s", decision.reason, extra={"conversation_id": self.conversation_id})

    def _on_stream(self, stream: actions.StreamKey) -> tuple[pb.AgentRunRequest, OutputStream]:
        """The run request and output of the run (active or queued) on a stream `decide` named."""
        runs = ([(self.run.run_request, self.run.output)] if self.run is not None else []) + [(q.run_request, q.output) for q in self.queued]
        return next((rr, output) for rr, output in runs if (output.request_id, output.generation) == stream)

    def _inject(self, run: ActiveRun, items: tuple[actions.Injected, ...], interrupt: bool) -> None:
        """Queue messages for the active run. With `interrupt` (user messages, injected context) the
        current cycle is cut short; without it (background completions) they join at the next cycle
        boundary, or continue the run if the model had just finished."""
        fresh = False
        for item in items:
            if item.key in run.input_keys or stored_as(self.data.history, item.key) is not None:
                continue  # an input already taken is not taken again
            run.input_keys.add(item.key)
            run.injections.append(item)
            fresh = True
            if item.injection_id:
                run.send(updates.injection_queued(item.injection_id))
        if fresh and interrupt and self.phase in (Phase.MODELING, Phase.WAITING_TOOLS):
            self._transition(Phase.INTERRUPTING)
            self.data.tool_rounds.abort_pending(run, INTERRUPTED_TOOL_TEXT)
            if run.engine is not None:
                run.engine.interrupt()

    def _follow_up(self, decision: actions.FollowUp) -> None:
        """The action becomes the next run on its stream, with that stream's run settings."""
        base, output = self._on_stream(decision.stream)
        if any(q.output is output and q.run_request.action == decision.action for q in self.queued):
            return  # the same follow-up again
        # On the newest checkpoint the IDE got on this stream (the finished run's), if one was sent.
        latest = self.run.final_state if self.run is not None and self.run.output is output else None
        rr = actions.follow_up_request(base, decision.action, latest)
        if decision.injection_id:
            output.write(encode_server_message(updates.injection_queued_for_next_turn(decision.injection_id)))
        self._on_start_run(StartRun(output.request_id, output, rr, follow_up=True))

    def _on_reader(self, cmd: Reader) -> None:
        """A reader came to the run's stream (a resumed run goes on) or left it: with none left, the
        reattach grace starts (detach is not cancel within it, its end is), unless a run request waits."""
        if (run := self.run) is None or run.output is not cmd.output:
            return
        if cmd.attached:
            run.claimed(True)
            run.end_grace()
        elif not cmd.output.readers and not cmd.output.closed and run.unread is None:
            run.unread = asyncio.get_running_loop().call_later(self.s.reattach_grace, self.take_now, ReattachExpired(run.run_id))
            if any(q.output is not run.output for q in self.queued):  # its next prompt came before this close
                self._cancel(run, TAKEN_OVER)

    def _cancel(self, run: ActiveRun, why: str = "") -> None:
        """Cancel the run in any phase: before the model it ends once prepared; a finished one's
        stream ends; any other ends now, its steps so far kept."""
        if why:
            log.info("run cancelled: %s", why, extra={"conversation_id": self.conversation_id})
        if self.phase is Phase.PREPARING:
            self._cancel_preparing(run)
        elif self.phase is Phase.FINALIZING:
            self._end_output_and_idle()
        else:
            self._end_run(Outcome.CANCELED, END_STREAM_CANCELED)

    def _cancel_preparing(self, run: ActiveRun) -> None:
        """A cancel before the model: the run ends (cancelled) once prepared, what the user typed in
        its history; what its preparation waits on (calls a resumed run owed, the context ask) ends now."""
        run.cancelled = True
        self.data.tool_rounds.abort_pending(run, CANCELED_TOOL_TEXT)
        if run.context_query is not None:
            run.context_query.give_up()

    # -- ending runs -----------------------------------------------------------------------------------------------
    def _on_engine_done(self, cmd: EngineDone) -> None:
        if not self.is_current(cmd.run_id) or self.phase not in MID_RUN:
            return
        run = self.run
        assert run is not None
        if cmd.error is not None:
            self._fail(run_error(cmd.error))
            return
        if run.injections:
            # Input arrived as the model finished: continue the same run with it.
            if self.phase is not Phase.INTERRUPTING:
                self._transition(Phase.INTERRUPTING)
            self._transition(Phase.MODELING)
            self._run_engine(run)
            return
        if self.phase is Phase.INTERRUPTING:
            self._transition(Phase.MODELING)
        self._transition(Phase.CHECKPOINTING)
        self._start(run, self.data.checkpoints.final(run, lambda: self.is_current(run.run_id)), checkpoint_done)

    def before_request(self, stored: asyncio.Future[Any] | None) -> None:
        """A model request of the current run is built, to leave once `stored` (its input's commit,
        None: done) is: commands delivered and still queued are taken just before it may leave, now
        or in the pass that learns the commit (the call starts from a callback of `stored` added
        after this one). A cancel among them ends the run: the request never leaves."""
        if stored is None or stored.done():
            self.take_queued()
        else:
            stored.add_done_callback(self.take_queued)

    def step_committed(self, run: ActiveRun) -> None:
        """A step of the run is committed (the engine began the next): checkpoint it meanwhile."""
        self.data.checkpoints.start_step(run, lambda: self.is_current(run.run_id) and self.phase in MID_RUN)

    def _on_checkpoint_done(self, cmd: CheckpointDone) -> None:
        if not self.is_current(cmd.run_id) or self.phase is not Phase.CHECKPOINTING:
            return
        if cmd.error is not None:
            self._fail(run_error(cmd.error))
            return
        self._succeed()

    def _succeed(self) -> None:
        """The run succeeded. FINALIZING: its stream ends now (Cursor's SDK holds a run finished
        only then) or, with a continuation window, stays open for a follow-up (one waiting runs)."""
        run = self.run
        assert run is not None
        self._transition(Phase.FINALIZING)
        self._finish_run(run, Outcome.SUCCEEDED)
        if any(q.output is run.output for q in self.queued):
            self._finish_finalizing()
        elif self.s.continuation_window > 0:
            self._timer = asyncio.get_running_loop().call_later(self.s.continuation_window, self.take_now, FinalizeExpired(run.run_id))
        else:
            self._close_window(FinalizeExpired(run.run_id))

    def _close_window(self, expired: FinalizeExpired) -> None:
        """End the finished run's stream, after the input already accepted for it."""
        assert self.run is not None
        if self.run.output in self._unhandled:
            self.post(expired)
        else:
            self._end_output_and_idle()

    def _finish_finalizing(self) -> None:
        """Leave FINALIZING: a follow-up queued on the same stream continues it (no terminal in
        between: FINALIZING → PREPARING), else the stream ends and the next queued run starts."""
        self._cancel_timer()
        run = self.run
        follow_up = next((q for q in self.queued if q.output is run.output), None) if run is not None else None
        if follow_up is not None:
            self.queued.remove(follow_up)
            self.run = None
            self._begin(follow_up)
            return
        self._end_output_and_idle()

    def _end_output_and_idle(self) -> None:
        self._cancel_timer()
        run = self.run
        if run is not None:
            self._close_stream(run.output, END_STREAM_OK)
        self.run = None
        self._transition(Phase.IDLE)
        self._begin_next()

    def _fail(self, error: ConnectError) -> None:
        self._end_run(Outcome.FAILED, end_stream_error(error), error)

    def _end_run(self, outcome: Outcome, terminal: bytes, error: ConnectError | None = None) -> None:
        run = self.run
        assert run is not None
        run.cancel_tasks()
        self._cancel_timer()
        self.data.tool_rounds.abort_pending(run, CANCELED_TOOL_TEXT)
        self._transition(Phase.FINALIZING)
        self._finish_run(run, outcome, error)
        self._close_stream(run.output, terminal)
        self.run = None
        self._transition(Phase.IDLE)
        self._begin_next()

    def _close_stream(self, output: OutputStream, terminal: bytes) -> None:
        """The one terminal of a stream; what was kept for its request id goes with it (its journaled input too)."""
        if not output.closed:
            output.close(terminal)
        self.data.blobs.forget(output.request_id)
        self.data.records.inputs_applied(output)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _finish_run(self, run: ActiveRun, outcome: Outcome, error: ConnectError | None = None) -> None:
        """The run's one outcome (every run that started gets exactly one)."""
        self.data.records.run_finished(run, outcome, error)
        self.s.observer.run_finished(run.observed, outcome.value, error.code if error else None, error.message if error else None)

    def _on_shutdown(self, cmd: Shutdown) -> None:
        """Every open stream gets its terminal: a finished run's `{}`, any other `unavailable`
        (and the run is recorded failed with it)."""
        error = ConnectError("unavailable", cmd.reason)  # the whole message: "server shutting down"
        self.data.records.stopping = True  # what is cut now is resumed at the next start
        queued, self.queued = self.queued, collections.deque()
        for q in queued:
            self._close_stream(q.output, end_stream_error(error))
        if self.phase is Phase.FINALIZING:
            self._end_output_and_idle()
        elif self.run is not None:
            self._fail(error)
        if not cmd.done.done():
            cmd.done.set_result(None)


END_STREAM_OK = end_stream_ok()
END_STREAM_CANCELED = end_stream_error(ConnectError("canceled", "run was cancelled"))


__all__ = ["ConversationRuntime", "RuntimeServices"]
