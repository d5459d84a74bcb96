"""Tools port: maps model tool calls onto Cursor's exec/interaction wire and back (sans-IO).

The conversation runtime drives one ToolExecution per call:

    execution = start_tool(call, ctx, model_call_id=...)
    emit(started_update(execution, started_at_ms=now))
    step = execution.first()
    loop: ExecStep → fill step.message.id, send exec_server_message (after step.delay_ms)
          InteractionStep → fill step.query.id, send interaction_query
          Progress → emit step.updates, keep waiting
          Done → emit completed_update(execution), commit step.outcome
    inputs: on_exec_result / on_interaction_response / on_stream_close / on_throw / on_abort

A result of the wrong kind raises ResultKindMismatch (state unchanged; log and ignore it, or
fail the call with on_throw). Tools never import the conversation runtime.
"""
from __future__ import annotations

from .base import Phase, ToolExecution
from .context import (
    TODO_STATUSES,
    McpDescriptor,
    TodoEntry,
    ToolContext,
    mcp_descriptors_from_run_request,
)
from .edit import EditProblem, Replacement, apply_str_replace
from .presentation import ArgsStream, completed_update, partial_args_updates, started_update, tool_call_variant
from .registry import BUILTIN_TOOLS, advertised_tools, start_tool
from .shell import TerminalFile, parse_terminal_file
from .steps import Done, ExecStep, InteractionStep, Progress, ResultKindMismatch, Step, ToolProtocolError
from .todos import todo_item

__all__ = [
    "ArgsStream",
    "BUILTIN_TOOLS",
    "Done",
    "EditProblem",
    "ExecStep",
    "InteractionStep",
    "McpDescriptor",
    "Phase",
    "Progress",
    "Replacement",
    "ResultKindMismatch",
    "Step",
    "TODO_STATUSES",
    "TerminalFile",
    "TodoEntry",
    "ToolContext",
    "ToolExecution",
    "ToolProtocolError",
    "advertised_tools",
    "apply_str_replace",
    "completed_update",
    "mcp_descriptors_from_run_request",
    "parse_terminal_file",
    "partial_args_updates",
    "start_tool",
    "started_update",
    "todo_item",
    "tool_call_variant",
]
