"""One conversation's data, as its runtime holds it: the history, the tool state, the blobs the IDE
holds, checkpoints and the store records; and the preparation of a run from it.

Data, not lifecycle: the runtime decides what each result or failure means for the run.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import msgspec

from .. import prompting
from ..config import Config, ModelConfig
from ..protocol import ConnectError, agent_pb2 as pb, model_not_found_error
from ..run import Interrupted, RunEngine, ToolCallPart, batch_outcomes, start_now, tool_call_request, tool_results_message
from . import client_context, updates
from .actions import Injected
from .active_run import ActiveRun, now_ms
from .checkpoints import Checkpoints
from .commands import ClientInput
from .history import ConversationHistory, EntryKind, HistoryEntry, prompt_mode, strict_prefix_checks
from .identity import ParentConversationRef
from .observation import NO_OBSERVER, RunObserver
from .output import OutputStream
from .persistence import ConversationRecords, StoredConversation
from .run_setup import run_spec, tool_context, workspace_root
from .state import Phase
from .sync import BlobSync
from .tool_calls import ToolRounds
from .turn_input import UNFINISHED_TOOL_TEXT, commit_turn_input

log = logging.getLogger("cursor_byok.runtime")


class RuntimeServices(msgspec.Struct):
    """Services the runtime uses (provided by the gateway at startup)."""

    config: Config
    make_engine: Callable[[ModelConfig], RunEngine]
    store: Any = None  # cursor_byok.store.Store, or None for a memory-only runtime
    # (model, requested model id, requested parameters) → effort; the model catalog's rule.
    resolve_effort: Callable[[ModelConfig, str, list[tuple[str, str]]], str] | None = None
    continuation_window: float = 0.0
    blob_ack_timeout: float = 15.0
    observer: RunObserver = NO_OBSERVER  # told of runs, provider calls and tools (observability)
    # A team server: why a developer's turn may not start (their monthly budget is spent), or None.
    over_budget: Callable[[str | None], ConnectError | None] | None = None
    recovery_wait: float = 10.0  # how long a resumed run waits for tool results the IDE still owes
    reattach_grace: float = 3.0  # how long a run whose stream is gone waits for a reader to come back
    # Whether IDEs can reach the server: a start that resumes cut streams sets it False until it
    # serves (`begin_serving`), so their recovery waits do not run out while it resumes others.
    serving: bool = True
    _clocks: list[Callable[[], object]] = msgspec.field(default_factory=list)  # recovery clocks waiting for that
    strict_prefix: bool = msgspec.field(default_factory=strict_prefix_checks)  # read once, not per conversation

    def when_serving(self, start: Callable[[], object]) -> None:
        """`start` now when the server serves, else once it does."""
        if self.serving:
            start()
        else:
            self._clocks.append(start)

    def begin_serving(self) -> None:
        self.serving = True
        clocks, self._clocks = self._clocks, []
        for start in clocks:
            start()


class ConversationData:
    def __init__(self, conversation_id: str, services: RuntimeServices) -> None:
        self.conversation_id = conversation_id
        self.services = services
        self.parent: ParentConversationRef | None = None
        self.history = ConversationHistory(conversation_id, strict_prefix=services.strict_prefix)
        self.records = ConversationRecords(conversation_id, services.store)
        self.blobs = BlobSync()
        self.checkpoints = Checkpoints(self.history, self.blobs, self.records, services.blob_ack_timeout)
        self.tool_rounds = ToolRounds(conversation_id, self.records.put_tool_state, services.observer)
        self.checkpoints.todos = self.tool_rounds.todo_items
        # The stored history is read once per runtime life: `_loading` is that read while it runs,
        # and only a read that completed marks it loaded (a cancelled or failed one is redone).
        self.loaded = False
        self._loading: asyncio.Task[None] | None = None

    def mode(self, run: ActiveRun) -> prompting.Mode:
        return prompt_mode(run.mode, subagent=self.parent is not None)

    async def ensure_loaded(self) -> None:
        if self.loaded:
            return
        if self._loading is None:
            stored = self.records.load_now()
            if stored is not None:  # nothing to wait for: the start goes on in this step
                self._restore(stored)
                return
            loading = start_now(self._load())  # the read asked for now, not from a task a pass later
            if loading.done():  # it did not wait (failed at once: the next start reads again)
                return loading.result()
            self._loading = loading
            loading.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved even if nobody waits
        # Shielded: a Stop during the read cancels the run, not the read, which still completes.
        await asyncio.shield(self._loading)

    async def _load(self) -> None:
        try:
            stored = await self.records.load()
        finally:
            self._loading = None
        self._restore(stored)

    def _restore(self, stored: StoredConversation) -> None:
        if stored.entries.count:  # a new conversation's history has nothing to take in
            self.history.restore(stored.entries)
        if stored.parent is not None and self.parent is None:
            self.parent = stored.parent
        if stored.tool_state is not None:
            self.tool_rounds.state = stored.tool_state
        self.loaded = True

    def resume(self, run: ActiveRun, expire: Callable[[], None]) -> None:
        """A run resumed after a restart (its history loaded), before it takes any input: it waits
        for its IDE to come back for the stream (`run.claim`), `expire` called if none has by the
        recovery wait (counted from when the server serves), and rebuilds the batch its stream had in flight."""
        loop = asyncio.get_running_loop()
        run.claim = loop.create_future()
        self.services.when_serving(lambda: loop.call_later(self.services.recovery_wait, expire))
        self._recover_batch(run)

    def input_taken(self, cmd: ClientInput, run: ActiveRun | None) -> None:
        """The runtime took `cmd` (on `run`'s stream when given): how far the stream's journaled
        input is taken; live input there means the IDE is back for a resumed run."""
        if cmd.output is not None:
            cmd.output.applied_seqno = max(cmd.output.applied_seqno, cmd.seqno)
        if run is not None and not cmd.replayed:
            run.claimed(True)

    def _recover_batch(self, run: ActiveRun) -> None:
        """When the last assistant message's tool calls are the batch this run's stream had in
        flight, rebuild that batch: its calls are owed results (`run.owed_calls`)."""
        last = self.history.entries[-1] if self.history.entries else None
        opened = self.tool_rounds.state.open_batch
        if last is None or last.kind is not EntryKind.ASSISTANT or opened is None:
            return
        calls = [tool_call_request(p.id, p.name, p.arguments) for p in last.message.parts if isinstance(p, ToolCallPart)]
        valid = [c for c in calls if c.parsed is not None]
        model = self.services.config.model(run.observed.requested_model)
        mine = (opened.request_id, opened.generation) == (run.request_id, run.output.cursor_run_id)
        if not mine or model is None or opened.calls != [c.call_id for c in valid]:
            return
        ctx = tool_context(
            run.run_request, conversation_id=self.conversation_id, run_id=run.run_id, parent=self.parent,
            config=self.services.config, model=model, mode=self.mode(run),
        )
        run.owed_calls = calls
        self.tool_rounds.recover(run, valid, ctx)
        log.info("tool batch cut by the restart rebuilt", extra={"conversation_id": self.conversation_id, "calls": len(calls)})

    def run_queued(self, run: ActiveRun | None, output: OutputStream) -> None:
        """A run on `output` is queued behind `run`: a resumed run on another stream yields to it."""
        if run is not None and output is not run.output:
            self.give_up_resume(run)

    def give_up_resume(self, run: ActiveRun | None) -> None:
        """A resumed run's IDE went elsewhere (a run on another stream came), or did not come back
        in time: the results it still owed are not coming (those calls end unfinished) and this
        stream's turn is not continued. Nothing for any other run."""
        if run is not None and run.claim is not None:
            self.tool_rounds.give_up_rebuilt(run, UNFINISHED_TOOL_TEXT)
            run.claimed(False)

    async def _settle_rebuilt(self, run: ActiveRun) -> None:
        """A resumed run's rebuilt batch, once every call has its result (or was given up): its
        results stored, as the engine stores a batch's, before anything else of the run."""
        assert run.rebuilt is not None
        try:
            returned, interrupted = await run.rebuilt.future, False
        except Interrupted as exc:
            returned, interrupted = exc.outcomes, True
        message = tool_results_message(batch_outcomes(run.owed_calls, returned, interrupted))
        entry = self.history.append(EntryKind.TOOL_RESULTS, f"{EntryKind.TOOL_RESULTS.value}:{run.run_id}:{self.history.next_seq}", message, run.run_id)
        await self.records.append_durably([entry] if entry is not None else [])

    def commit_injections(self, run: ActiveRun, taken: list[Injected]) -> None:
        """Injected input into the history (its request context first), and the IDE told."""
        entries: list[HistoryEntry | None] = []
        out: list[pb.AgentServerMessage] = []
        for inj in taken:
            if inj.request_context:
                entries.append(self.history.add_request_context(inj.request_context, f"request-context:{inj.key}", run.run_id))
            entries.append(self.history.append(EntryKind.INJECTION, inj.key, inj.message, run.run_id))
            if inj.injection_id:
                out.append(updates.injection_delivered(inj.injection_id, run.presenter.step, now_ms()))
            if inj.user_message is not None:
                run.turns.begin(inj.user_message, run.mode)
                out.append(updates.user_message_appended(inj.user_message))
        self.records.append([e for e in entries if e is not None])
        run.send(*out)

    def settle_inputs(self, run: ActiveRun, *, follow_up_queued: bool) -> None:
        """A batch's results are queued for the store: the input taken from the run's stream so far
        has had its durable effect, unless some of it still waits (an injection not yet taken, a
        follow-up not yet run). Settle its journal that far."""
        output = run.output
        if run.injections or run.taken or follow_up_queued or output.applied_seqno <= output.settled_seqno:
            return
        output.settled_seqno = output.applied_seqno
        self.records.inputs_settled(output)

    def _ask_client_context(self, run: ActiveRun) -> client_context.ContextQuery:
        """Ask the client for its request context (the run request had none)."""
        query, request = client_context.ask(self.tool_rounds.new_exec_id())
        run.context_query = query
        run.send(request)
        return query

    async def _with_client_context(self, run: ActiveRun, query: client_context.ContextQuery) -> pb.AgentRunRequest:
        """The run's request completed with the client's answer, or as it was when none came in time."""
        # A timer, not asyncio.timeout: a run's preparation starts eagerly, outside any task.
        timer = asyncio.get_running_loop().call_later(client_context.ANSWER_WAIT_SECONDS, query.give_up)
        try:
            context = await query.answer
        finally:
            timer.cancel()
        if context is None:
            log.info("the client gave no request context", extra={"conversation_id": self.conversation_id})
            return run.run_request
        run.run_request = client_context.with_request_context(run.run_request, context)
        run.presenter.workspace_root = workspace_root(run.run_request)
        return run.run_request

    async def prepare(self, run: ActiveRun) -> None:
        """Everything before the model is called: the model, the history (loaded, or hydrated from
        the client's checkpoint when we hold none), the turn's input queued for the store, the
        engine. The engine builds the model request while the input is written and sends it once
        the write has committed (`run.input_stored`), so the input is durable before the model
        sees it without the turn waiting for the disk first."""
        s = self.services
        if s.over_budget is not None and (refusal := s.over_budget(run.observed.developer)) is not None:
            raise refusal  # before anything of the turn is kept or any provider is called
        rr = run.run_request
        model_id = run.observed.requested_model  # its run request's, read when the run began
        model = s.config.model(model_id)
        if model is None:
            raise model_not_found_error(model_id)
        run.model = run.observed.model = model
        # Asked first: the client answers while the history loads.
        asked = None if run.resumed or not client_context.lacks_request_context(rr) else self._ask_client_context(run)
        await self.ensure_loaded()
        self.records.run_started(run, self.parent, Phase.PREPARING._value_)
        if rr.conversation_state.root_prompt_messages_json and not len(self.history):
            hydrated = await self.checkpoints.hydrate(run)
            entries = [self.history.append(kind, key, message, run.run_id) for kind, key, message in hydrated]
            await self.records.append_durably([e for e in entries if e is not None])
        if asked is not None:
            rr = await self._with_client_context(run, asked)
        mode = self.mode(run)
        run.tool_ctx = tool_context(
            rr, conversation_id=self.conversation_id, run_id=run.run_id, parent=self.parent, config=s.config, model=model, mode=mode
        )
        # A user message without a message id is keyed by its Cursor run; one of our follow-ups
        # shares the run id of the run before it, so it is keyed by its own.
        fallback = run.run_id if run.follow_up else (run.cursor_run_id or run.run_id)
        if run.rebuilt is not None:
            await self._settle_rebuilt(run)
        turn = commit_turn_input(self.history, rr, run.run_id, fallback, mode, resumed=run.resumed)
        run.call_model = turn.call_model
        run.input_stored = self.records.append(turn.entries, awaited=True)
        if run.input_stored is not None and (turn.delivered is not None or not turn.call_model):
            await run.input_stored  # the IDE hears of it, or the run ends, only once it is stored
            run.input_stored = None
        if turn.delivered is not None:
            run.send(updates.injection_delivered(turn.delivered.injection_id, 0, now_ms()))
            if turn.delivered.user_message is not None:
                run.send(updates.user_message_appended(turn.delivered.user_message))
        run.engine = s.make_engine(model)
        run.spec = run_spec(rr, model, run.tool_ctx, mode, s.resolve_effort)
        run.spec.pending_calls = turn.pending_calls
        if run.claim is not None and (run.call_model or run.injections) and not await run.claim:
            # The IDE did not come back for this stream: what it had sent is in the history now
            # (input injected while the run was cut too); the turn is its to send again.
            injected, run.injections = run.injections, []
            self.commit_injections(run, injected)
            raise ConnectError("unavailable", "the server restarted during this turn; send it again")
