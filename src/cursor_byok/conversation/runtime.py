"""ConversationRuntime: the ONLY lifecycle writer of a conversation.

One asyncio task per live conversation consumes one command queue: ordered wire input, run-engine
requests (tool batches), engine/prepare/checkpoint completion, timers, transport attach/detach and
shutdown. Everyone else posts commands. Phase changes go through `state.check_transition`, the one
literal table; terminals are written only here, exactly once per output stream.

Output (deltas, tool cards, exec requests) is written straight to the run's OutputStream from the
engine's synchronous sink: that is data, not lifecycle, and keeps a delta's path to the client free of
queue hops.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import prompting, tools
from ..config import Config, ConfigError, ModelConfig
from ..protocol import (
    ConnectError,
    agent_pb2 as pb,
    encode_server_message,
    encode_server_messages,
    SERVER_HEARTBEAT_FRAME,
    end_stream_error,
    end_stream_ok,
    internal_error,
    model_not_found_error,
    new_error_id,
    provider_error,
)
from ..run import (
    Interrupted,
    Message,
    ProviderError,
    RunEngine,
    RunSpec,
    TextPart,
    ToolCallPart,
    ToolCallRequest,
    ToolOutcome,
    ToolResultPart,
    Usage,
)
from . import updates
from ..store import ConversationRecord, NewEvent, ParentRef, RunRecord
from .history import (
    ConversationHistory,
    background_completion_messages,
    EntryKind,
    HistoryEntry,
    blob_id,
    decode_entry,
    encode_entry,
    message_from_json,
    prompt_mode,
    render_request_context,
    render_user_message,
    RootBlobs,
)
from .commands import (
    CheckpointDone,
    ClientInput,
    Command,
    Detach,
    EngineDone,
    FinalizeExpired,
    Heartbeat,
    InjectionsTaken,
    Prepared,
    Shutdown,
    StartRun,
    ToolBatch,
)
from .identity import ParentConversationRef, new_run_id
from .presenter import RunPresenter
from .sync import BlobSync
from .output import OutputStream
from .state import Outcome, Phase, check_transition

log = logging.getLogger("cursor_byok.runtime")

INTERRUPTED_TOOL_TEXT = "Tool execution was interrupted by a newer user message."
CANCELED_TOOL_TEXT = "Tool execution was cancelled."
UNFINISHED_TOOL_TEXT = (
    "This tool call did not finish (its run was cancelled or the server restarted), so its result is "
    "unknown. Check its effect and run it again if needed."
)


def _now_ms() -> int:
    return int(time.time() * 1000)


# --------------------------------------------------------------------------------------------------
# Services the runtime uses (provided by the gateway at startup)
# --------------------------------------------------------------------------------------------------
@dataclass
class RuntimeServices:
    config: Config
    make_engine: Callable[[ModelConfig], RunEngine]
    store: Any = None  # cursor_byok.store.Store, or None for a memory-only runtime
    # (model, requested model id, requested parameters) → effort; the model catalog's rule.
    resolve_effort: Callable[[ModelConfig, str, list[tuple[str, str]]], str] | None = None
    continuation_window: float = 2.0
    blob_ack_timeout: float = 15.0


# --------------------------------------------------------------------------------------------------
# Per-run state
# --------------------------------------------------------------------------------------------------
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
class Injection:
    injection_id: str
    message: Message
    user_message: pb.UserMessage | None
    request_context: str
    notify: bool = True  # report context_injection_state to the IDE (ids it created)


@dataclass(eq=False)
class ActiveRun:
    run_id: str
    cursor_run_id: str
    request_id: str
    output: OutputStream
    run_request: pb.AgentRunRequest
    mode: int
    started_ms: int = field(default_factory=_now_ms)
    model: ModelConfig | None = None
    engine: RunEngine | None = None
    spec: RunSpec | None = None
    task: asyncio.Task[Any] | None = None
    batch: ActiveBatch | None = None
    execs: dict[int, PendingTool] = field(default_factory=dict)
    injections: list[Injection] = field(default_factory=list)
    taken: list[Injection] = field(default_factory=list)  # handed to the engine, not yet committed
    injection_ids: set[str] = field(default_factory=set)
    presenter: RunPresenter = field(init=False)
    side_tasks: set[asyncio.Task[None]] = field(default_factory=set)  # step checkpoints in flight
    checkpoint_seq: int = 0  # checkpoints started in this run
    checkpoint_sent: int = 0  # the newest one written to the stream
    no_model_call: bool = False  # a duplicate of committed input: finish without waking the model
    tool_ctx: tools.ToolContext | None = None


# --------------------------------------------------------------------------------------------------
# The runtime
# --------------------------------------------------------------------------------------------------
class ConversationRuntime:
    def __init__(self, conversation_id: str, services: RuntimeServices) -> None:
        self.conversation_id = conversation_id
        self.s = services
        self.phase = Phase.IDLE
        self.run: ActiveRun | None = None
        self.history = ConversationHistory(conversation_id)
        self.history_loaded = False
        self.parent: ParentConversationRef | None = None
        self.queued: collections.deque[StartRun] = collections.deque()
        self.last_run_request: pb.AgentRunRequest | None = None
        self.next_exec_id = 0  # monotonic per conversation, never reused
        self.todos: list[tools.TodoEntry] = []
        self.shell_output_seen: dict[str, int] = {}
        self.blobs = BlobSync()
        self.root_blobs = RootBlobs()
        self.last_active = time.monotonic()
        self._queue: asyncio.Queue[Command] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    # -- driver ------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"conversation:{self.conversation_id}")

    def post(self, command: Command) -> None:
        self._queue.put_nowait(command)

    @property
    def running(self) -> bool:
        """Its task still consumes commands (not shut down, not evicted)."""
        return self._task is not None and not self._task.done()

    @property
    def idle(self) -> bool:
        return self.phase is Phase.IDLE and not self.queued and self._queue.empty()

    def stop(self) -> None:
        """Evict an idle runtime: its state lives in the database and is reloaded on next use."""
        if self._task is not None:
            self._task.cancel()

    async def _loop(self) -> None:
        while True:
            cmd = await self._queue.get()
            self.last_active = time.monotonic()
            try:
                if self._handle(cmd):
                    return
            except Exception:  # a bug in a handler must not kill the conversation silently
                log.exception("runtime handler failed", extra={"conversation_id": self.conversation_id})
                if self.run is not None and self.phase is not Phase.FINALIZING:
                    self._fail(ConnectError("internal", "internal error in the conversation runtime"))

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
                if self._is_current(cmd.run_id) and self.phase is Phase.INTERRUPTING:
                    self._transition(Phase.MODELING)
            case CheckpointDone():
                self._on_checkpoint_done(cmd)
            case FinalizeExpired():
                if self._is_current(cmd.run_id) and self.phase is Phase.FINALIZING:
                    self._end_output_and_idle()
            case Detach():
                pass  # the run continues; output stays retained for a reconnecting RunSSE
            case Shutdown():
                self._on_shutdown(cmd)
                return True
        return False

    def _transition(self, target: Phase) -> None:
        try:
            check_transition(self.conversation_id, self.phase, target)
        except Exception:
            log.error(
                "illegal lifecycle transition",
                extra={"conversation_id": self.conversation_id, "from": self.phase.value, "to": target.value},
            )
            raise
        self.phase = target

    def _is_current(self, run_id: str) -> bool:
        return self.run is not None and self.run.run_id == run_id

    # -- output helpers ------------------------------------------------------------------------------
    def _write(self, *messages: pb.AgentServerMessage) -> None:
        run = self.run
        if run is None or run.output.closed:
            return
        if len(messages) == 1:
            run.output.write(encode_server_message(messages[0]))
        else:
            run.output.write(encode_server_messages(messages))

    # -- starting runs -------------------------------------------------------------------------------
    def _on_start_run(self, cmd: StartRun) -> None:
        if cmd.parent is not None and self.parent is None:
            self.parent = cmd.parent
        if self.phase is Phase.IDLE:
            self._begin(cmd)
        elif self.phase is Phase.FINALIZING:
            self.queued.append(cmd)
            self._finish_finalizing()
        else:
            self.queued.append(cmd)

    def _begin(self, cmd: StartRun) -> None:
        rr = cmd.run_request
        action = rr.action
        mode = pb.AGENT_MODE_AGENT
        if action.WhichOneof("action") == "user_message_action" and action.user_message_action.user_message.mode:
            mode = action.user_message_action.user_message.mode
        run = ActiveRun(
            run_id=new_run_id(),
            cursor_run_id=rr.run_id if rr.HasField("run_id") else "",
            request_id=cmd.request_id,
            output=cmd.output,
            run_request=rr,
            mode=mode,
        )
        env = _request_env(rr)
        workspace = env.workspace_paths[0] if env is not None and env.workspace_paths else None
        run.presenter = RunPresenter(run.run_id, workspace, self._write)
        self.blobs.held_by_client(cmd.request_id, rr.conversation_state.root_prompt_messages_json)
        self.run = run
        self.last_run_request = rr
        self._transition(Phase.PREPARING)
        run.task = asyncio.get_running_loop().create_task(self._prepare(run))

    async def _prepare(self, run: ActiveRun) -> None:
        try:
            await self._prepare_inner(run)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # reported to the loop, which decides the outcome
            self.post(Prepared(run.run_id, exc))
            return
        self.post(Prepared(run.run_id))

    async def _prepare_inner(self, run: ActiveRun) -> None:
        rr = run.run_request
        model_id = rr.requested_model.model_id if rr.HasField("requested_model") and rr.requested_model.model_id else rr.model_details.model_id
        model = self.s.config.model(model_id)
        if model is None:
            raise model_not_found_error(model_id)
        run.model = model
        await self._ensure_history()
        self._persist_run_started(run)
        if not self.history.entries and rr.conversation_state.root_prompt_messages_json:
            await self._hydrate(run)
        env = _request_env(rr)
        run.tool_ctx = tools.ToolContext(
            workspace_root=env.workspace_paths[0] if env is not None and env.workspace_paths else None,
            terminals_folder=(env.terminals_folder or None) if env is not None else None,
            mcp_tools=tools.mcp_descriptors_from_run_request(rr),
            conversation_id=self.conversation_id,
            root_conversation_id=self.parent.parent_conversation_id if self.parent else self.conversation_id,
            run_id=run.run_id,
            available_models=[m.id for m in self.s.config.models],
            default_subagent_model=model.id,
            mode=self._mode(run).value,
            todos=list(self.todos),
            allow_subagents=self.parent is None,
            shell_output_seen=self.shell_output_seen,
        )
        new_entries = self._commit_turn_input(run)
        if new_entries is None:
            run.no_model_call = True
            return
        await self._persist_entries(new_entries, durable=True)
        run.engine = self.s.make_engine(model)
        run.spec = self._spec(run)

    def _spec(self, run: ActiveRun) -> RunSpec:
        assert run.model is not None and run.tool_ctx is not None
        mode = self._mode(run)
        rr = run.run_request
        compiled = prompting.compile_request(
            mode,
            run.model,
            tools.advertised_tools(run.tool_ctx),
            [d.for_prompt() for d in run.tool_ctx.mcp_tools],
            None,  # the request context lives in the history, so the system prompt stays byte-stable
            rr.custom_system_prompt if rr.HasField("custom_system_prompt") and rr.custom_system_prompt else None,
        )
        effort = None
        if self.s.resolve_effort is not None:
            model_id = rr.requested_model.model_id if rr.HasField("requested_model") else rr.model_details.model_id
            params = [(p.id, p.value) for p in rr.requested_model.parameters] if rr.HasField("requested_model") else []
            effort = self.s.resolve_effort(run.model, model_id, params) or None
        return RunSpec(model=run.model, system=compiled.system, tools=compiled.tools, effort=effort)

    def _mode(self, run: ActiveRun) -> prompting.Mode:
        return prompt_mode(run.mode, subagent=self.parent is not None)

    def _commit_turn_input(self, run: ActiveRun) -> list[HistoryEntry] | None:
        """Append this turn's request context and user message. None: nothing new (a duplicate)."""
        action = run.run_request.action
        kind = action.WhichOneof("action")
        added: list[HistoryEntry] = self._repair_dangling_tool_calls(run)
        if kind == "user_message_action":
            uma = action.user_message_action
            ctx_text = render_request_context(uma.request_context)
            um = uma.user_message
            key = um.message_id or run.cursor_run_id or run.run_id
            if self.history.has(f"user:{key}"):
                return None
            ctx = self.history.add_request_context(ctx_text, f"request-context:{run.run_id}", run.run_id)
            if ctx is not None:
                added.append(ctx)
            entry = self.history.append(EntryKind.USER, f"user:{key}", self._user_message(run, um), run.run_id)
            if entry is not None:
                added.append(entry)
            return added
        if kind == "background_task_completion_action":
            for key, message in self._background_completions(action.background_task_completion_action):
                entry = self.history.append(EntryKind.BACKGROUND_COMPLETION, key, message, run.run_id)
                if entry is not None:
                    added.append(entry)
            last = self.history.entries[-1] if self.history.entries else None
            if not added and (last is None or last.kind is EntryKind.ASSISTANT):
                return None  # already delivered and followed up: never wake the model twice
            return added  # new completions, or a follow-up a crash cut short
        if kind == "resume_action":
            ctx = self.history.add_request_context(
                render_request_context(action.resume_action.request_context), f"request-context:{run.run_id}", run.run_id
            )
            if ctx is not None:
                added.append(ctx)
            last = self.history.entries[-1] if self.history.entries else None
            if last is None or last.kind is EntryKind.ASSISTANT:
                return added or None  # the last turn is complete: nothing to resume
            return added
        raise ConnectError("invalid_argument", f"run request action {kind or 'none'} cannot start a run")

    def _repair_dangling_tool_calls(self, run: ActiveRun) -> list[HistoryEntry]:
        """After a cancel or a crash the last assistant message may have tool calls whose results were
        never recorded. Answer them with an explicit error result (appended, never rewritten) so the
        provider history stays valid and a side effect is not silently repeated."""
        entries = self.history.entries
        if not entries or entries[-1].kind is not EntryKind.ASSISTANT:
            return []
        last = entries[-1]
        calls = [p for p in last.message.parts if isinstance(p, ToolCallPart)]
        if not calls:
            return []
        results = [
            ToolResultPart(call_id=c.id, name=c.name, content=UNFINISHED_TOOL_TEXT, is_error=True) for c in calls
        ]
        repaired = self.history.append(
            EntryKind.TOOL_RESULTS, f"restart-repair:{last.seq}", Message(role="tool", parts=results), run.run_id
        )
        return [repaired] if repaired is not None else []

    # -- prepare done → modeling -----------------------------------------------------------------------
    def _on_prepared(self, cmd: Prepared) -> None:
        if not self._is_current(cmd.run_id) or self.phase is not Phase.PREPARING:
            return
        run = self.run
        assert run is not None
        if cmd.error is not None:
            self._fail(_as_connect_error(cmd.error))
            return
        if run.no_model_call:
            self._transition(Phase.FINALIZING)
            self._finish_run(Outcome.SUCCEEDED)
            self._end_output_and_idle()
            return
        self._transition(Phase.MODELING)
        run.task = asyncio.get_running_loop().create_task(self._run_engine(run))

    async def _run_engine(self, run: ActiveRun) -> None:
        assert run.engine is not None and run.spec is not None
        port = _RuntimePorts(self, run)
        try:
            result = await run.engine.run(run.spec, port, port, port)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.post(EngineDone(run.run_id, error=exc))
            return
        self.post(EngineDone(run.run_id, usage=getattr(result, "usage_total", None)))

    # -- engine sink (synchronous; writes output directly) -----------------------------------------------
    def on_engine_event(self, run: ActiveRun, event: Any) -> None:
        if not self._is_current(run.run_id) or run.output.closed:
            return
        if run.presenter.present(event) and run.presenter.step > 1:
            self._spawn_step_checkpoint(run)  # the previous step is committed: checkpoint it

    # -- history port (called by the engine) --------------------------------------------------------------
    def project_history(self) -> list[Message]:
        return self.history.project()

    def commit_message(self, run: ActiveRun, kind: EntryKind, message: Message) -> None:
        if not self._is_current(run.run_id):
            return  # a cancelled run never commits after the fact
        entry = self.history.append(kind, f"{kind.value}:{run.run_id}:{self.history.next_seq}", message, run.run_id)
        if entry is not None:
            self._persist_entries_nowait([entry])

    def take_injections(self, run: ActiveRun) -> list[Message]:
        """Hand the queued soft-interrupt messages to the engine (committed by commit_injected)."""
        if not self._is_current(run.run_id) or not run.injections:
            return []
        run.taken, run.injections = run.injections, []
        return [inj.message for inj in run.taken]

    def commit_injected(self, run: ActiveRun) -> None:
        taken, run.taken = run.taken, []
        if not self._is_current(run.run_id) or not taken:
            return
        entries: list[HistoryEntry] = []
        out: list[pb.AgentServerMessage] = []
        for inj in taken:
            if inj.request_context:
                ctx = self.history.add_request_context(inj.request_context, f"request-context:{inj.injection_id}", run.run_id)
                if ctx is not None:
                    entries.append(ctx)
            e = self.history.append(EntryKind.INJECTION, f"injection:{inj.injection_id}", inj.message, run.run_id)
            if e is not None:
                entries.append(e)
            if inj.notify:
                out.append(updates.injection_delivered(inj.injection_id, run.presenter.step, _now_ms()))
            if inj.user_message is not None:
                out.append(updates.user_message_appended(inj.user_message))
        self._persist_entries_nowait(entries)
        self._write(*out)
        self.post(InjectionsTaken(run.run_id))

    def compact(self, run: ActiveRun, summary: str) -> None:
        if not self._is_current(run.run_id):
            return
        entry = self.history.compact(summary, f"compaction:{run.run_id}:{self.history.next_seq}", run.run_id)
        entries = [entry] if entry is not None else []
        # Keep the current turn's own request after the summary so the model still sees it verbatim.
        for e in reversed(self.history.entries[:-1]):
            if e.kind is EntryKind.USER and e.run_id == run.run_id:
                again = self.history.append(EntryKind.USER, f"{e.event_id}:after-compaction:{entry.seq if entry else 0}", e.message, run.run_id)
                if again is not None:
                    entries.append(again)
                break
        self._persist_entries_nowait(entries)

    # -- tool batches ---------------------------------------------------------------------------------------
    def _on_tool_batch(self, cmd: ToolBatch) -> None:
        run = self.run
        if run is None or run.run_id != cmd.run_id or self.phase is not Phase.MODELING:
            if not cmd.future.done():
                cmd.future.set_exception(Interrupted())
            return
        assert run.tool_ctx is not None
        self._transition(Phase.WAITING_TOOLS)
        batch = ActiveBatch([], cmd.future)
        run.batch = batch
        for call in cmd.calls:
            execution = tools.start_tool(call, run.tool_ctx, model_call_id=run.presenter.model_call_id)
            batch.pending.append(PendingTool(call, execution, run.presenter.model_call_id))
        for pending in batch.pending:
            pending.started_ms = _now_ms()
            if pending.execution.presentable:
                self._write(updates.interaction(tools.started_update(pending.execution, started_at_ms=pending.started_ms)))
            self._advance(run, pending, pending.execution.first())
        self._maybe_finish_batch(run)

    def _advance(self, run: ActiveRun, pending: PendingTool, step: Any) -> None:
        match step:
            case tools.ExecStep():
                exec_id = self._reserve_exec_id()
                step.message.id = exec_id
                pending.exec_ids.append(exec_id)
                run.execs[exec_id] = pending
                if step.delay_ms > 0:  # a background-shell poll: send it later, if still wanted
                    asyncio.get_running_loop().call_later(step.delay_ms / 1000, self._send_delayed_exec, run, exec_id, step.message)
                else:
                    self._write(updates.exec_request(step.message))
            case tools.InteractionStep():
                exec_id = self._reserve_exec_id()
                step.query.id = exec_id
                pending.exec_ids.append(exec_id)
                run.execs[exec_id] = pending
                self._write(updates.interaction_query(step.query))
            case tools.Progress():
                if step.updates:
                    self._write(*(updates.interaction(u) for u in step.updates))
            case tools.Done():
                pending.outcome = step.outcome
                for exec_id in pending.exec_ids:
                    run.execs.pop(exec_id, None)
                execution = pending.execution
                if execution.todos is not None:
                    self.todos = list(execution.todos)
                if execution.seen_output is not None:
                    shell_id, seen = execution.seen_output
                    self.shell_output_seen[shell_id] = seen
                if execution.presentable:
                    update = tools.completed_update(execution, completed_at_ms=_now_ms(), started_at_ms=pending.started_ms)
                    self._write(updates.interaction(update))

    def _send_delayed_exec(self, run: ActiveRun, exec_id: int, message: pb.ExecServerMessage) -> None:
        if self._is_current(run.run_id) and run.execs.get(exec_id) is not None:
            self._write(updates.exec_request(message))

    def _reserve_exec_id(self) -> int:
        self.next_exec_id += 1
        return self.next_exec_id

    def _maybe_finish_batch(self, run: ActiveRun) -> None:
        batch = run.batch
        if batch is None or not batch.done():
            return
        run.batch = None
        if not batch.future.done():
            batch.future.set_result([p.outcome for p in batch.pending if p.outcome is not None])
        if self.phase is Phase.WAITING_TOOLS:
            self._transition(Phase.MODELING)

    def _abort_pending(self, run: ActiveRun, reason: str) -> None:
        """Abort every running exec (IDE gets abort{id}); their calls complete as errors."""
        batch = run.batch
        if batch is None:
            return
        for pending in batch.pending:
            if pending.outcome is None:
                for exec_id in pending.exec_ids:
                    if exec_id in run.execs:
                        self._write(updates.exec_abort(exec_id))
                self._advance(run, pending, pending.execution.on_abort(reason))
        run.execs.clear()
        run.batch = None
        if not batch.future.done():
            batch.future.set_exception(Interrupted([p.outcome for p in batch.pending if p.outcome is not None]))

    # -- client input -----------------------------------------------------------------------------------------
    def _on_client_input(self, cmd: ClientInput) -> None:
        msg = cmd.message
        kind = msg.WhichOneof("message")
        run = self.run
        if kind in ("exec_client_message", "exec_client_control_message", "interaction_response"):
            # Exec ids are only unique within one runtime's lifetime: a result that comes on another
            # request id than the active run's (an earlier run's stream, before a restart) is late.
            if run is None or cmd.request_id != run.request_id:
                log.info("ignoring a tool result from another stream", extra={"conversation_id": self.conversation_id})
                return
        if kind == "exec_client_message":
            self._on_exec_result(run, msg.exec_client_message)
        elif kind == "exec_client_control_message":
            self._on_exec_control(run, msg.exec_client_control_message)
        elif kind == "interaction_response":
            self._on_interaction_response(run, msg.interaction_response)
        elif kind == "kv_client_message":
            self.blobs.on_reply(cmd.request_id, msg.kv_client_message)
        elif kind == "conversation_action":
            self._on_action(cmd.request_id, msg.conversation_action)
        elif kind == "run_request":
            output = run.output if run is not None and run.request_id == cmd.request_id else None
            if output is None:
                log.warning("run_request on an idle transport without output", extra={"conversation_id": self.conversation_id})
                return
            self._on_start_run(StartRun(cmd.request_id, output, msg.run_request))
        # client_heartbeat is answered by the gateway's Heartbeat command; prewarm and unknown variants
        # are ignored (kept by protobuf as unknown fields, never crashed on).

    def _pending_for(self, run: ActiveRun | None, exec_id: int) -> PendingTool | None:
        if run is None:
            return None
        pending = run.execs.get(exec_id)
        if pending is None:
            log.info("ignoring a result for an unknown or finished exec", extra={"conversation_id": self.conversation_id, "exec_id": exec_id})
        return pending

    def _step_result(self, run: ActiveRun, pending: PendingTool, fn: Callable[[], Any]) -> None:
        try:
            step = fn()
        except tools.ResultKindMismatch as exc:
            log.warning("exec result of the wrong kind ignored: %s", exc, extra={"conversation_id": self.conversation_id})
            return
        self._advance(run, pending, step)
        self._maybe_finish_batch(run)

    def _on_exec_result(self, run: ActiveRun | None, msg: pb.ExecClientMessage) -> None:
        pending = self._pending_for(run, msg.id)
        if pending is None or run is None:
            return
        if msg.WhichOneof("message") is None:
            return  # an empty ExecClientMessage is not a result
        self._step_result(run, pending, lambda: pending.execution.on_exec_result(msg))

    def _on_exec_control(self, run: ActiveRun | None, msg: pb.ExecClientControlMessage) -> None:
        which = msg.WhichOneof("message")
        if which == "stream_close":
            pending = self._pending_for(run, msg.stream_close.id)
            if pending is not None and run is not None:
                exec_id = msg.stream_close.id
                self._step_result(run, pending, lambda: pending.execution.on_stream_close(exec_id))
        elif which == "throw":
            pending = self._pending_for(run, msg.throw.id)
            if pending is not None and run is not None:
                error = msg.throw.error or "the client reported an error"
                exec_id = msg.throw.id
                self._step_result(run, pending, lambda: pending.execution.on_throw(error, exec_id))

    def _on_interaction_response(self, run: ActiveRun | None, msg: pb.InteractionResponse) -> None:
        pending = self._pending_for(run, msg.id)
        if pending is not None and run is not None:
            self._step_result(run, pending, lambda: pending.execution.on_interaction_response(msg))

    # -- conversation actions -------------------------------------------------------------------------------------
    def _on_action(self, request_id: str, action: pb.ConversationAction) -> None:
        kind = action.WhichOneof("action")
        run = self.run
        active = run is not None and self.phase not in (Phase.IDLE, Phase.FINALIZING)
        if kind == "cancel_action":
            if active:
                self._cancel()
            return
        if kind == "cancel_subagent_action":
            if active and run is not None:
                self._cancel_subagent(run, action.cancel_subagent_action.subagent_id)
            return
        if kind == "user_message_action":
            uma = action.user_message_action
            if active and run is not None:
                inj_id = f"user-message:{uma.user_message.message_id or len(run.injection_ids)}"
                self._inject(run, inj_id, self._user_message(run, uma.user_message), uma.user_message, render_request_context(uma.request_context))
                return
            self._continue_on_stream(request_id, action)
            return
        if kind == "background_task_completion_action":
            if active and run is not None:
                for key, message in self._background_completions(action.background_task_completion_action):
                    self._inject(run, key, message, None, "", interrupt=False)
                return
            self._continue_on_stream(request_id, action)
            return
        if kind == "inject_context_action":
            ica = action.inject_context_action
            if not active or run is None:
                return
            expected = ica.expected_run_id
            # Compare with the Cursor wire run id; the request id only when the run request had none.
            current = run.cursor_run_id or run.request_id
            if expected and expected != current:
                if ica.injection_id not in run.injection_ids:
                    run.injection_ids.add(ica.injection_id)
                    self._write(updates.injection_rejected(ica.injection_id, f"expected run {expected}, active run is {current}"))
                return
            payload = ica.WhichOneof("payload")
            if payload == "user_context":
                um = ica.user_context.user_message
                self._inject(run, ica.injection_id, self._user_message(run, um), um, render_request_context(ica.user_context.request_context))
            elif payload == "system_context":
                text = f"<system_context producer={ica.system_context.producer!r}>\n{ica.system_context.content}\n</system_context>"
                self._inject(run, ica.injection_id, Message(role="user", parts=[TextPart(text=text)]), None, "")
            return
        log.info("conversation action ignored", extra={"conversation_id": self.conversation_id, "action": kind})

    def _continue_on_stream(self, request_id: str, action: pb.ConversationAction) -> None:
        """Not running: a follow-up turn on this stream with the previous run's settings."""
        run = self.run
        base = self.last_run_request
        target = run.output if run is not None and run.request_id == request_id else None
        if base is None or target is None or target.closed:
            log.warning("follow-up action with no run to continue", extra={"conversation_id": self.conversation_id})
            return
        rr = pb.AgentRunRequest()
        rr.CopyFrom(base)
        rr.ClearField("conversation_state")
        rr.action.CopyFrom(action)
        self._on_start_run(StartRun(request_id, target, rr))

    def _background_completions(self, action: pb.BackgroundTaskCompletionAction) -> list[tuple[str, Message]]:
        """The completions not yet delivered, as simulated user turns keyed for deduplication."""
        return [
            (key, message)
            for key, message in background_completion_messages(action)
            if not (self.history.has(key) or self.history.has(f"injection:{key}"))
        ]

    def _user_message(self, run: ActiveRun, um: pb.UserMessage) -> Message:
        return Message(role="user", parts=[TextPart(text=render_user_message(um, self._mode(run)))])

    def _inject(
        self, run: ActiveRun, injection_id: str, message: Message, um: pb.UserMessage | None, ctx: str, *, interrupt: bool = True
    ) -> None:
        """Queue a message for the active run. With `interrupt` (user messages, injected context) the
        current cycle is cut short; without it (background completions) it joins at the next cycle
        boundary, or continues the run if the model had just finished."""
        if injection_id in run.injection_ids or self.history.has(f"injection:{injection_id}"):
            return  # repeated ids are ignored
        run.injection_ids.add(injection_id)
        run.injections.append(Injection(injection_id, message, um, ctx, notify=interrupt))
        if interrupt:
            self._write(updates.injection_queued(injection_id))
        if interrupt and self.phase in (Phase.MODELING, Phase.WAITING_TOOLS):
            self._transition(Phase.INTERRUPTING)
            self._abort_pending(run, INTERRUPTED_TOOL_TEXT)
            if run.engine is not None:
                run.engine.interrupt()

    def _cancel_subagent(self, run: ActiveRun, subagent_id: str) -> None:
        batch = run.batch
        if batch is None:
            return
        for pending in batch.pending:
            if pending.outcome is None and subagent_id in (pending.call.call_id, getattr(pending.execution, "subagent_id", None)):
                for exec_id in pending.exec_ids:
                    if exec_id in run.execs:
                        self._write(updates.exec_abort(exec_id))
                self._advance(run, pending, pending.execution.on_abort("The sub-task was cancelled by the user."))
        self._maybe_finish_batch(run)

    # -- ending runs -----------------------------------------------------------------------------------------------
    def _on_engine_done(self, cmd: EngineDone) -> None:
        if not self._is_current(cmd.run_id) or self.phase in (Phase.FINALIZING, Phase.CHECKPOINTING, Phase.IDLE):
            return
        run = self.run
        assert run is not None
        if cmd.error is not None:
            self._fail(_as_connect_error(cmd.error))
            return
        if run.injections:
            # Interrupt arrived as the model finished: continue the same run with the injections.
            if self.phase is not Phase.INTERRUPTING:
                self._transition(Phase.INTERRUPTING)
            self._transition(Phase.MODELING)
            run.task = asyncio.get_running_loop().create_task(self._run_engine(run))
            return
        if self.phase is Phase.INTERRUPTING:
            self._transition(Phase.MODELING)
        self._transition(Phase.CHECKPOINTING)
        self._write(updates.turn_ended(run.presenter.usage_total()))
        run.task = asyncio.get_running_loop().create_task(self._checkpoint(run))

    def _spawn_step_checkpoint(self, run: ActiveRun) -> None:
        run.checkpoint_seq += 1
        task = asyncio.get_running_loop().create_task(self._step_checkpoint(run, run.checkpoint_seq))
        run.side_tasks.add(task)
        task.add_done_callback(run.side_tasks.discard)

    async def _step_checkpoint(self, run: ActiveRun, seq: int) -> None:
        """A checkpoint after a committed step, while the run goes on. Data only: a failure is logged,
        never fatal, and a step checkpoint never overtakes a newer one (or the final one)."""
        try:
            state, acked = await self._build_checkpoint(run)
            await self._persist_checkpoint(run, state, kind="step")
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("step checkpoint failed", exc_info=True, extra={"conversation_id": self.conversation_id})
            return
        mid_run = self.phase in (Phase.MODELING, Phase.WAITING_TOOLS, Phase.INTERRUPTING)
        if acked and mid_run and self._is_current(run.run_id) and seq > run.checkpoint_sent and not run.output.closed:
            run.checkpoint_sent = seq
            run.output.write(encode_server_message(updates.checkpoint(state)))

    async def _checkpoint(self, run: ActiveRun) -> None:
        run.checkpoint_seq += 1
        run.checkpoint_sent = run.checkpoint_seq  # no step checkpoint may follow the final one
        try:
            state, acked = await self._build_checkpoint(run)
            await self._persist_checkpoint(run, state)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.post(CheckpointDone(run.run_id, exc))
            return
        if acked and self._is_current(run.run_id) and not run.output.closed:
            run.output.write(encode_server_message(updates.checkpoint(state)))
        elif not acked:
            # A client that never acks blobs must not lose its turn: the checkpoint is persisted
            # here, but one naming blobs the client may not hold is not sent.
            log.warning("checkpoint blobs were not acked in time; checkpoint not sent", extra={"conversation_id": self.conversation_id})
        self.post(CheckpointDone(run.run_id))

    async def _build_checkpoint(self, run: ActiveRun) -> tuple[pb.ConversationStateStructure, bool]:
        """Blobs first (each set_blob acked by the client), then the structure naming them.
        Returns the state and whether every blob was acked in time."""
        state = pb.ConversationStateStructure()
        if run.run_request.HasField("conversation_state"):
            state.CopyFrom(run.run_request.conversation_state)
        del state.root_prompt_messages_json[:]
        del state.pending_tool_calls[:]
        model_name = run.model.id if run.model else ""
        blobs = self.root_blobs.build(run.spec.system if run.spec else None, self.history.project(), model_name)
        waiters = [self.blobs.set_blob(run.output, run.request_id, bid, data) for bid, data in blobs]
        pending = [w for w in waiters if w is not None]
        acked = True
        if pending:
            try:
                await asyncio.wait_for(asyncio.gather(*pending), self.s.blob_ack_timeout)
            except TimeoutError:
                acked = False
        state.root_prompt_messages_json.extend(bid for bid, _ in blobs)
        state.mode = run.mode
        if run.model is not None:
            state.token_details.max_tokens = run.model.context_window
            state.token_details.used_tokens = min(run.presenter.usage.get("input_tokens", 0), 2**32 - 1)
        return state, acked

    async def _hydrate(self, run: ActiveRun) -> None:
        """Rebuild the history from the client's checkpoint when our database has none (a new
        machine, a deleted database): root blobs come from the run request's pre-fetched blobs or
        are asked of the client with get_blob; every blob must hash to its id."""
        state = run.run_request.conversation_state
        prefetched = {b.id: b.value for b in run.run_request.pre_fetched_blobs if blob_id(b.value) == b.id}
        wanted = [bid for bid in state.root_prompt_messages_json if bid not in prefetched]
        fetches = (self.blobs.get_blob(run.output, run.request_id, bid) for bid in wanted)
        fetched = await asyncio.wait_for(asyncio.gather(*fetches), self.s.blob_ack_timeout)
        blobs = {**prefetched, **dict(zip(wanted, fetched, strict=True))}
        entries: list[HistoryEntry] = []
        for bid in state.root_prompt_messages_json:
            role, message = message_from_json(blobs[bid])
            if message is None:
                continue  # the system prompt: we compile our own
            kind = {"assistant": EntryKind.ASSISTANT, "tool": EntryKind.TOOL_RESULTS}.get(role, EntryKind.USER)
            entry = self.history.append(kind, f"hydrated:{bid.hex()}", message, run.run_id)
            if entry is not None:
                entries.append(entry)
        await self._persist_entries(entries, durable=True)

    def _on_checkpoint_done(self, cmd: CheckpointDone) -> None:
        if not self._is_current(cmd.run_id) or self.phase is not Phase.CHECKPOINTING:
            return
        if cmd.error is not None:
            self._fail(_as_connect_error(cmd.error))
            return
        self._transition(Phase.FINALIZING)
        self._finish_run(Outcome.SUCCEEDED)
        if self.queued:
            self._finish_finalizing()
            return
        run = self.run
        assert run is not None
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.s.continuation_window, self.post, FinalizeExpired(run.run_id))

    def _finish_finalizing(self) -> None:
        """Leave FINALIZING: the next queued run continues on the same stream, or the stream ends."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        run = self.run
        if self.queued and run is not None and self.queued[0].output is run.output:
            # A follow-up on the same stream: no terminal in between (FINALIZING → PREPARING).
            self.run = None
            self._begin(self.queued.popleft())
            return
        self._end_output_and_idle()

    def _end_output_and_idle(self) -> None:
        run = self.run
        if run is not None and not run.output.closed:
            run.output.close(END_STREAM_OK)
        self.run = None
        self._transition(Phase.IDLE)
        if self.queued:
            self._begin(self.queued.popleft())

    def _fail(self, error: ConnectError) -> None:
        run = self.run
        assert run is not None
        self._stop_tasks(run)
        self._abort_pending(run, CANCELED_TOOL_TEXT)
        self._transition(Phase.FINALIZING)
        self._finish_run(Outcome.FAILED, error)
        if not run.output.closed:
            run.output.close(end_stream_error(error))
        self.run = None
        self._transition(Phase.IDLE)
        if self.queued:
            self._begin(self.queued.popleft())

    def _cancel(self) -> None:
        run = self.run
        assert run is not None
        self._stop_tasks(run)
        self._abort_pending(run, CANCELED_TOOL_TEXT)
        self._transition(Phase.FINALIZING)
        self._finish_run(Outcome.CANCELED)
        if not run.output.closed:
            run.output.close(END_STREAM_CANCELED)
        self.run = None
        self._transition(Phase.IDLE)
        if self.queued:
            self._begin(self.queued.popleft())

    def _stop_tasks(self, run: ActiveRun) -> None:
        if run.task is not None and not run.task.done():
            run.task.cancel()
        for task in list(run.side_tasks):
            task.cancel()
        self.blobs.cancel(run.request_id)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _finish_run(self, outcome: Outcome, error: ConnectError | None = None) -> None:
        run = self.run
        assert run is not None
        self._persist_run_finished(run, outcome, error)

    def _on_shutdown(self, cmd: Shutdown) -> None:
        run = self.run
        if run is not None:
            if self.phase is Phase.FINALIZING:
                self._end_output_and_idle()
            else:
                self._stop_tasks(run)
                self._abort_pending(run, CANCELED_TOOL_TEXT)
                if not run.output.closed:
                    run.output.close(end_stream_error(ConnectError("unavailable", f"server shutting down: {cmd.reason}")))
                self.run = None
                self.phase = Phase.IDLE
        for queued in self.queued:
            if not queued.output.closed:
                queued.output.close(end_stream_error(ConnectError("unavailable", f"server shutting down: {cmd.reason}")))
        self.queued.clear()
        if not cmd.done.done():
            cmd.done.set_result(None)

    # -- persistence ------------------------------------------------------------------------------------------------
    async def _ensure_history(self) -> None:
        if self.history_loaded:
            return
        self.history_loaded = True
        store = self.s.store
        if store is None:
            return
        record = await store.get_conversation(self.conversation_id)
        if record is not None and record.parent is not None and self.parent is None:
            p = record.parent
            self.parent = ParentConversationRef(p.parent_conversation_id, p.parent_run_id, p.parent_tool_call_id)
        rows = await store.load_events(self.conversation_id)
        entries = []
        for row in rows:
            stored = decode_entry(row.payload)
            entries.append(HistoryEntry(row.seq, row.event_id, stored.kind, row.run_id or "", stored.message))
        self.history.restore(entries)

    async def _persist_entries(self, entries: list[HistoryEntry], durable: bool) -> None:
        store = self.s.store
        if store is None or not entries:
            return
        fut = store.append_events(self.conversation_id, [_event_record(e) for e in entries])
        if durable:
            await fut

    def _persist_entries_nowait(self, entries: list[HistoryEntry]) -> None:
        store = self.s.store
        if store is None or not entries:
            return
        store.append_events(self.conversation_id, [_event_record(e) for e in entries])

    async def _persist_checkpoint(self, run: ActiveRun, state: pb.ConversationStateStructure, kind: str = "final") -> None:
        store = self.s.store
        if store is None:
            return
        await store.put_checkpoint(self.conversation_id, state.SerializeToString(), kind=kind, run_id=run.run_id)

    def _persist_run_started(self, run: ActiveRun) -> None:
        store = self.s.store
        if store is None:
            return
        model_id = run.run_request.requested_model.model_id or run.run_request.model_details.model_id
        parent = self.parent
        now = _now_ms()
        store.upsert_conversation(
            ConversationRecord(
                conversation_id=self.conversation_id,
                created_at_ms=now,
                updated_at_ms=now,
                parent=ParentRef(parent.parent_conversation_id, parent.parent_run_id, parent.parent_tool_call_id) if parent else None,
                model_id=model_id,
                mode=pb.AgentMode.Name(run.mode) if run.mode in pb.AgentMode.values() else str(run.mode),
                last_cursor_run_id=run.cursor_run_id or None,
            )
        )
        store.bind_request(run.request_id, self.conversation_id, run.cursor_run_id or None)
        store.start_run(
            RunRecord(
                run_id=run.run_id,
                conversation_id=self.conversation_id,
                phase=self.phase.value,
                started_at_ms=run.started_ms,
                cursor_run_id=run.cursor_run_id or None,
                request_id=run.request_id,
            )
        )

    def _persist_run_finished(self, run: ActiveRun, outcome: Outcome, error: ConnectError | None) -> None:
        store = self.s.store
        if store is None:
            return
        store.finish_run(
            run.run_id,
            outcome.value,
            error_code=error.code if error else None,
            error_message=error.message if error else None,
        )


# --------------------------------------------------------------------------------------------------
# The ports the run engine sees (ToolPort, HistoryPort, EventSink), bound to one run
# --------------------------------------------------------------------------------------------------
class _RuntimePorts:
    def __init__(self, rt: ConversationRuntime, run: ActiveRun) -> None:
        self.rt = rt
        self.run = run

    # EventSink
    def emit(self, event: Any) -> None:
        self.rt.on_engine_event(self.run, event)

    # ToolPort
    async def run_tools(self, calls: list[ToolCallRequest]) -> list[ToolOutcome]:
        fut: asyncio.Future[list[ToolOutcome]] = asyncio.get_running_loop().create_future()
        self.rt.post(ToolBatch(self.run.run_id, calls, fut))
        return await fut

    # HistoryPort
    def messages(self) -> list[Message]:
        return self.rt.project_history()

    def commit_assistant(self, message: Message, usage: Usage | None = None) -> None:
        self.rt.commit_message(self.run, EntryKind.ASSISTANT, message)

    def commit_tool_results(self, message: Message) -> None:
        self.rt.commit_message(self.run, EntryKind.TOOL_RESULTS, message)

    def take_injections(self) -> list[Message]:
        return self.rt.take_injections(self.run)

    def commit_injected(self, messages: list[Message]) -> None:
        self.rt.commit_injected(self.run)

    def compact(self, summary: str) -> None:
        self.rt.compact(self.run, summary)


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------
END_STREAM_OK = end_stream_ok()
END_STREAM_CANCELED = end_stream_error(ConnectError("canceled", "run was cancelled"))


def _request_env(rr: pb.AgentRunRequest) -> pb.RequestContextEnv | None:
    action = rr.action
    kind = action.WhichOneof("action")
    if kind == "user_message_action" and action.user_message_action.request_context.HasField("env"):
        return action.user_message_action.request_context.env
    if kind == "resume_action" and action.resume_action.request_context.HasField("env"):
        return action.resume_action.request_context.env
    return None


def _as_connect_error(exc: BaseException) -> ConnectError:
    if isinstance(exc, ConnectError):
        return exc
    if isinstance(exc, ProviderError):
        return provider_error(str(exc), retryable=bool(getattr(exc, "retryable", False)))
    if isinstance(exc, ConfigError):
        return ConnectError("failed_precondition", str(exc))
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return ConnectError("deadline_exceeded", "timed out waiting for the client")
    error_id = new_error_id()
    log.error("run failed with an unexpected error", exc_info=exc, extra={"error_id": error_id})
    return internal_error(error_id)  # the exception's text stays in the log


def _event_record(entry: HistoryEntry) -> Any:
    return NewEvent(event_id=entry.event_id, kind=entry.kind.value, payload=encode_entry(entry.kind, entry.message), run_id=entry.run_id)


__all__ = [
    "ActiveRun",
    "ClientInput",
    "ConversationRuntime",
    "Detach",
    "Heartbeat",
    "RuntimeServices",
    "Shutdown",
    "StartRun",
]
