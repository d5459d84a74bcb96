"""Helpers for driving ToolExecutions with real protobuf messages (as the runtime would)."""
from __future__ import annotations

import json
from typing import Any

from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.run import ToolCallRequest
from cursor_byok.tools import Done, ExecStep, InteractionStep, McpDescriptor, ToolContext


def request(
    name: str,
    args: dict[str, Any] | None = None,
    *,
    call_id: str = "call-1",
    raw: str | None = None,
    error: str | None = None,
) -> ToolCallRequest:
    text = raw if raw is not None else json.dumps(args or {})
    parsed = None if (raw is not None or error is not None) else (args or {})
    return ToolCallRequest(call_id=call_id, name=name, arguments=text, parsed=parsed, error=error)


class FakeClock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def make_ctx(clock: FakeClock) -> ToolContext:
    return ToolContext(
        workspace_root="/ws",
        mcp_tools=[
            McpDescriptor(
                server="docs",
                name="search",
                description="Search the docs",
                input_schema={"type": "object"},
                provider_identifier="docs",
                definition_name="docs-search",
            )
        ],
        conversation_id="conv-1",
        run_id="run-1",
        available_models=["model-a", "model-b"],
        terminals_folder="/home/u/.cursor/projects/ws/terminals",
        default_subagent_model="model-a",
        clock_ms=clock,
    )


_next_id = [100]


def sent(step: Any) -> pb.ExecServerMessage:
    """What the runtime does with an ExecStep: reserve an id and fill it in place."""
    assert isinstance(step, ExecStep), step
    _next_id[0] += 1
    step.message.id = _next_id[0]
    return step.message


def asked(step: Any) -> pb.InteractionQuery:
    assert isinstance(step, InteractionStep), step
    _next_id[0] += 1
    step.query.id = _next_id[0]
    return step.query


def reply(message: pb.ExecServerMessage, **result: Any) -> pb.ExecClientMessage:
    """An ExecClientMessage answering `message` with one result field, e.g. read_result=..."""
    return pb.ExecClientMessage(id=message.id, exec_id=message.exec_id, **result)


def done(step: Any) -> Any:
    assert isinstance(step, Done), step
    return step.outcome
