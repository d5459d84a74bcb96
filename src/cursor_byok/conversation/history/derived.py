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


def plan_blob(calls: Iterable[pb.ToolCall]) -> Blob | None:
    """The ConversationPlan of the latest plan the user accepted (CreatePlan that succeeded)."""
    plan = None
    for call in calls:
        if call.HasField("create_plan_tool_call"):
            c = call.create_plan_tool_call
            if c.result.HasField("success") and c.args.plan:
                plan = c.args.plan
    return encode_blob(pb.ConversationPlan(plan=plan)) if plan is not None else None


def add_read_paths(state: pb.ConversationStateStructure, calls: Iterable[pb.ToolCall]) -> None:
    """Paths of successful reads, each once, in the order first read."""
    known = set(state.read_paths)
    for call in calls:
        if call.HasField("read_tool_call") and call.read_tool_call.result.HasField("success"):
            path = call.read_tool_call.result.success.path or call.read_tool_call.args.path
            if path and path not in known:
                known.add(path)
                state.read_paths.append(path)


def record_subagents(state: pb.ConversationStateStructure, calls: Iterable[pb.ToolCall]) -> None:
    """Task children: the run of each (keyed by the parent's Task call id) and the persisted state
    of each sub-agent (keyed by its id), which a later Task may resume."""
    for call in calls:
        if not call.HasField("task_tool_call") or not call.tool_call_id:
            continue
        task = call.task_tool_call
        run = state.subagent_runs_by_parent_tool_call_id[call.tool_call_id]
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
                _persist_subagent(state, success.agent_id, task.args, call)
        else:
            run.status = pb.SUBAGENT_RUN_STATUS_ABORTED


def _persist_subagent(state: pb.ConversationStateStructure, agent_id: str, args: pb.TaskArgs, call: pb.ToolCall) -> None:
    started = call.started_at_ms if call.HasField("started_at_ms") else 0
    last_used = call.completed_at_ms if call.HasField("completed_at_ms") else started
    known = agent_id in state.subagent_states
    persisted = state.subagent_states[agent_id]
    if not known:
        persisted.created_timestamp_ms = started
        persisted.subagent_type.CopyFrom(args.subagent_type)
        if args.HasField("model"):
            persisted.model_id = args.model
        persisted.environment = args.environment
    persisted.last_used_timestamp_ms = max(persisted.last_used_timestamp_ms, last_used)


def summary_blobs(summary: str, summarized: Sequence[bytes], summary_message: bytes) -> tuple[Blob, Blob]:
    """(ConversationSummary, ConversationSummaryArchive) of one compaction: the summary text, and
    the archive of the root messages it replaced with the root id of the summary message."""
    archive = pb.ConversationSummaryArchive(
        summarized_messages=list(summarized), summary=summary, window_tail=0, summary_message=summary_message
    )
    return encode_blob(pb.ConversationSummary(summary=summary)), encode_blob(archive)
