"""The ports the run engine sees for one run (EventSink, ToolPort, HistoryPort).

Data only: events become output through the run's presenter, committed messages go to the history
and the store, tool batches are posted to the runtime's queue. Nothing from a run that is no longer
the runtime's current one is committed (a cancelled run never commits after the fact).
"""
from __future__ import annotations

import asyncio
from typing import Any, Protocol

from ..protocol import agent_pb2 as pb
from ..run import Message, ToolCallRequest, ToolOutcome, Usage
from . import updates
from .active_run import ActiveRun, now_ms
from .commands import Command, InjectionsTaken, ToolBatch
from .data import ConversationData
from .history import EntryKind, HistoryEntry


class RunOwner(Protocol):
    """What the ports need of the conversation runtime."""

    data: ConversationData

    def post(self, command: Command) -> None: ...

    def is_current(self, run_id: str) -> bool: ...

    def step_committed(self, run: ActiveRun) -> None: ...


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

    # -- ToolPort ---------------------------------------------------------------------------------------
    async def run_tools(self, calls: list[ToolCallRequest]) -> list[ToolOutcome]:
        fut: asyncio.Future[list[ToolOutcome]] = asyncio.get_running_loop().create_future()
        self.owner.post(ToolBatch(self.run.run_id, calls, fut))
        return await fut

    # -- HistoryPort ------------------------------------------------------------------------------------
    def messages(self) -> list[Message]:
        return self.owner.data.history.project()

    def stored(self) -> asyncio.Future[Any] | None:
        run = self.run
        stored, run.input_stored = run.input_stored, None
        return stored

    def commit_assistant(self, message: Message, usage: Usage | None = None) -> None:
        self._commit(EntryKind.ASSISTANT, message)

    def commit_tool_results(self, message: Message) -> None:
        self._commit(EntryKind.TOOL_RESULTS, message)

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
        history = self.owner.data.history
        entries: list[HistoryEntry | None] = []
        out: list[pb.AgentServerMessage] = []
        for inj in taken:
            if inj.request_context:
                entries.append(history.add_request_context(inj.request_context, f"request-context:{inj.key}", run.run_id))
            entries.append(history.append(EntryKind.INJECTION, inj.key, inj.message, run.run_id))
            if inj.injection_id:
                out.append(updates.injection_delivered(inj.injection_id, run.presenter.step, now_ms()))
            if inj.user_message is not None:
                out.append(updates.user_message_appended(inj.user_message))
        self.owner.data.records.append([e for e in entries if e is not None])
        run.send(*out)
        self.owner.post(InjectionsTaken(run.run_id))

    def compact(self, summary: str) -> None:
        run = self.run
        if not self.owner.is_current(run.run_id):
            return
        history = self.owner.data.history
        entry = history.compact(summary, f"compaction:{run.run_id}:{history.next_seq}", run.run_id)
        entries = [entry] if entry is not None else []
        # Keep the current turn's own request after the summary so the model still sees it verbatim.
        for e in reversed(history.entries[:-1]):
            if e.kind is EntryKind.USER and e.run_id == run.run_id:
                again = history.append(EntryKind.USER, f"{e.event_id}:after-compaction:{entry.seq if entry else 0}", e.message, run.run_id)
                if again is not None:
                    entries.append(again)
                break
        self.owner.data.records.append(entries)

    def _commit(self, kind: EntryKind, message: Message) -> None:
        run = self.run
        if not self.owner.is_current(run.run_id):
            return
        history = self.owner.data.history
        entry = history.append(kind, f"{kind.value}:{run.run_id}:{history.next_seq}", message, run.run_id)
        if entry is not None:
            self.owner.data.records.append([entry])
