"""State a checkpoint derives from what the conversation did: the todo list, the plan, the paths
read, the sub-tasks run, and the summaries of compactions. Pure: state in, state out.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from ...protocol import agent_pb2 as pb
from .turns import Blob, encode_blob


def todo_blobs(items: Sequence[pb.TodoItem]) -> list[Blob]:
    """One TodoItem blob per item, in list order."""
    return [encode_blob(item) for item in items]


class DerivedState:
    """What one run's finished tool calls add to its checkpoints: the plan, the paths read, the
    sub-tasks. Each call is taken once (`add`) as its step is published; every checkpoint then
    lays the result over the state the run started from (`apply`), in time proportional to what
    this run added, not to the whole conversation."""

    def __init__(self, base: pb.ConversationStateStructure) -> None:
        self._known_paths: set[str] | None = None  # the base's read paths, once a read asks (most runs read nothing)
        self._base = base
        self.read_paths: list[str] = []
        self.plan: Blob | None = None
        self.subagent_runs: dict[str, pb.SubagentRunState] = {}
        self.subagent_states: dict[str, pb.SubagentPersistedState] = {}

    def add(self, calls: Iterable[pb.ToolCall]) -> None:
        for call in calls:
            if call.HasField("read_tool_call"):
                self._read(call.read_tool_call)
            elif call.HasField("create_plan_tool_call"):
                c = call.create_plan_tool_call
                if c.result.HasField("success") and c.args.plan:  # a plan the user accepted
                    self.plan = encode_blob(pb.ConversationPlan(plan=c.args.plan))
            elif call.HasField("task_tool_call") and call.tool_call_id:
                self._task(call)

    def apply(self, state: pb.ConversationStateStructure) -> None:
        state.read_paths.extend(self.read_paths)
        if self.plan is not None:
            state.plan = self.plan[0]
        for key, run in self.subagent_runs.items():
            state.subagent_runs_by_parent_tool_call_id[key].CopyFrom(run)
        for key, persisted in self.subagent_states.items():
            state.subagent_states[key].CopyFrom(persisted)

    def _read(self, call: pb.ReadToolCall) -> None:
        """Paths of successful reads, each once, in the order first read."""
        if call.result.HasField("success"):
            path = call.result.success.path or call.args.path
            known = self._known_paths
            if known is None:
                known = self._known_paths = set(self._base.read_paths)
            if path and path not in known:
                known.add(path)
                self.read_paths.append(path)

    def _task(self, call: pb.ToolCall) -> None:
        """A Task child: its run (keyed by the parent's Task call id) and the persisted state of
        the sub-agent (keyed by its id), which a later Task may resume."""
        task = call.task_tool_call
        run = self.subagent_runs.setdefault(call.tool_call_id, pb.SubagentRunState())
        run.parent_tool_call_id = call.tool_call_id
        run.environment = task.args.environment
        if task.args.description:
            run.title = task.args.description
        if task.result.HasField("error"):
            run.status = pb.SUBAGENT_RUN_STATUS_ERROR
            run.detail = task.result.error.error
        elif task.result.HasField("success"):
            success = task.result.success
            background = success.is_background
            run.status = pb.SUBAGENT_RUN_STATUS_BACKGROUNDED if background else pb.SUBAGENT_RUN_STATUS_SUCCESS
            if success.HasField("result_suffix"):
                run.detail = success.result_suffix
            if success.HasField("transcript_path"):
                run.transcript_path = success.transcript_path
            if not background and call.HasField("completed_at_ms"):
                run.completed_timestamp_ms = call.completed_at_ms
            if success.agent_id:
                run.subagent_id = success.agent_id
                self._persist(success.agent_id, task.args, call)
        else:
            run.status = pb.SUBAGENT_RUN_STATUS_ABORTED

    def _persist(self, agent_id: str, args: pb.TaskArgs, call: pb.ToolCall) -> None:
        started = call.started_at_ms if call.HasField("started_at_ms") else 0
        last_used = call.completed_at_ms if call.HasField("completed_at_ms") else started
        persisted = self.subagent_states.get(agent_id)
        if persisted is None:
            persisted = pb.SubagentPersistedState()
            if agent_id in self._base.subagent_states:  # resumed: it keeps where it came from
                persisted.CopyFrom(self._base.subagent_states[agent_id])
            else:
                persisted.created_timestamp_ms = started
                persisted.subagent_type.CopyFrom(args.subagent_type)
                if args.HasField("model"):
                    persisted.model_id = args.model
                persisted.environment = args.environment
            self.subagent_states[agent_id] = persisted
        persisted.last_used_timestamp_ms = max(persisted.last_used_timestamp_ms, last_used)


def summary_blobs(summary: str, summarized: Sequence[bytes], summary_message: bytes) -> tuple[Blob, Blob]:
    """(ConversationSummary, ConversationSummaryArchive) of one compaction: the summary text, and
    the archive of the root messages it replaced with the root id of the summary message."""
    archive = pb.ConversationSummaryArchive(
        summarized_messages=list(summarized), summary=summary, window_tail=0, summary_message=summary_message
    )
    return encode_blob(pb.ConversationSummary(summary=summary)), encode_blob(archive)
