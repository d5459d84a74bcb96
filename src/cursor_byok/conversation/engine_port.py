"""The ports the run engine sees for one run (EventSink, ToolPort, HistoryPort).

Data only: events become output through the run's presenter, committed messages go to the history
and the store, tool batches are posted to the runtime's queue. Nothing from a run that is no longer
the runtime's current one is committed (a cancelled run never commits after the fact).
"""
from __future__ import annotations

import asyncio
import collections
from typing import Any, Protocol

from ..run import ContextEstimator, Message, ProviderCall, ToolCallRequest, ToolOutcome, Usage
from .active_run import ActiveRun
from .checkpoints import Compaction
from .commands import Command, InjectionsTaken, StartRun, ToolBatch
from .data import ConversationData
from .history import EntryKind, Projection


class RunOwner(Protocol):
    """What the ports need of the conversation runtime."""

    data: ConversationData

    def post(self, command: Command) -> None: ...

    def is_current(self, run_id: str) -> bool: ...

    queued: collections.deque[StartRun]

    def step_committed(self, run: ActiveRun) -> None: ...

    def before_request(self, stored: asyncio.Future[Any] | None) -> None: ...


class RunPorts:
    def __init__(self, owner: RunOwner, run: ActiveRun) -> None:
        self.owner = owner
        self.run = run

    # -- EventSink (synchronous; writes output directly) ------------------------------------------------
    def emit(self, event: Any) -> None:
        run = self.run
        if not self.owner.is_current(run.run_id) or run.output.closed:
            return
        if run.presenter.present(event) and run.presenter.step > 1:
            self.owner.step_committed(run)  # a new step began: the previous one is committed

    def provider_call(self, call: ProviderCall) -> None:
        self.owner.data.services.observer.provider_call(self.run.observed, call)

    # -- ToolPort ---------------------------------------------------------------------------------------
    async def run_tools(self, calls: list[ToolCallRequest]) -> list[ToolOutcome]:
        fut: asyncio.Future[list[ToolOutcome]] = asyncio.get_running_loop().create_future()
        self.owner.post(ToolBatch(self.run.run_id, calls, fut))
        return await fut

    # -- HistoryPort ------------------------------------------------------------------------------------
    def messages(self) -> Projection:
        return self.owner.data.history.project()

    def estimator(self) -> ContextEstimator:
        return self.owner.data.history.context_size

    def stored(self) -> asyncio.Future[Any] | None:
        run = self.run
        stored, run.input_stored = run.input_stored, None
        self.owner.before_request(stored)
        if not self.owner.is_current(run.run_id):  # a command queued before it ended the run (its task is cancelled)
            raise asyncio.CancelledError
        return stored

    def commit_assistant(self, message: Message, usage: Usage | None = None, *, answer: bool = False) -> None:
        # The turn's end waits for the answer's commit: hand it to the store at once (committed on
        # the loop when the store is idle). Not a tool step's: nothing waits for it yet.
        self._commit(EntryKind.ASSISTANT, message, awaited=answer)

    def commit_tool_results(self, message: Message) -> None:
        if self._commit(EntryKind.TOOL_RESULTS, message):
            run, owner = self.run, self.owner
            owner.data.settle_inputs(run, follow_up_queued=any(q.output is run.output for q in owner.queued))

    def take_injections(self) -> list[Message]:
        """Hand the queued soft-interrupt messages to the engine (committed by commit_injected)."""
        run = self.run
        if not self.owner.is_current(run.run_id) or not run.injections:
            return []
        run.taken, run.injections = run.injections, []
        return [inj.message for inj in run.taken]

    def commit_injected(self, messages: list[Message]) -> None:
        run = self.run
        taken, run.taken = run.taken, []
        if not self.owner.is_current(run.run_id) or not taken:
            return
        self.owner.data.commit_injections(run, taken)
        self.owner.post(InjectionsTaken(run.run_id))

    def compact(self, summary: str) -> None:
        run = self.run
        if not self.owner.is_current(run.run_id):
            return
        history = self.owner.data.history
        replaced = self.owner.data.checkpoints.root_ids(run)
        entry = history.compact(summary, f"compaction:{run.run_id}:{history.next_seq}", run.run_id)
        entries = [entry] if entry is not None else []
        if entry is not None:
            run.compactions.append(Compaction(summary, replaced, entry.message))
        # Keep the current turn's own request after the summary so the model still sees it verbatim.
        for e in reversed(history.entries[:-1]):
            if e.kind is EntryKind.USER and e.run_id == run.run_id:
                again = history.append(EntryKind.USER, f"{e.event_id}:after-compaction:{entry.seq if entry else 0}", e.message, run.run_id)
                if again is not None:
                    entries.append(again)
                break
        self.owner.data.records.append(entries)

    def _commit(self, kind: EntryKind, message: Message, *, awaited: bool = False) -> bool:
        """Append a message of the current run to the history; False when the run is not current."""
        run = self.run
        if not self.owner.is_current(run.run_id):
            return False
        history = self.owner.data.history
        entry = history.append(kind, f"{kind.value}:{run.run_id}:{history.next_seq}", message, run.run_id)
        if entry is not None:
            self.owner.data.records.append([entry], awaited=awaited)
        return True
