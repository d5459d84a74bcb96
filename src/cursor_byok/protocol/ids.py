"""Typed identities (ARCHITECTURE.md "Identities (never mix them)").

NewTypes cost nothing at runtime; they let the type checker catch a request id passed where a
conversation id belongs. Each docstring below is the identity's meaning.
"""
from __future__ import annotations

import uuid
from typing import NewType

__all__ = [
    "AgentSessionId",
    "ConversationId",
    "CursorRunId",
    "ExecId",
    "InjectionId",
    "MessageId",
    "RequestId",
    "RunId",
    "ToolCallId",
    "TraceId",
    "new_internal_run_id",
    "new_trace_id",
]

RequestId = NewType("RequestId", str)
RequestId.__doc__ = """Transport correlation of BidiAppend ⇄ RunSSE (`BidiRequestId.request_id`,
`x-request-id`). Chosen by the client; may repeat (retries, queued turns). Never a conversation
identity: it is bound to one conversation_id, and a binding to a different one is a conflict."""

CursorRunId = NewType("CursorRunId", str)
CursorRunId.__doc__ = """Cursor's wire run id, `AgentRunRequest.run_id`: wire correlation only.
`InjectContextAction.expected_run_id` is compared with this one."""

RunId = NewType("RunId", str)
RunId.__doc__ = """Internal run id: one server-side run of the engine, globally unique, minted by
`new_internal_run_id()`; never derived from a request id or a Cursor run id."""

ConversationId = NewType("ConversationId", str)
ConversationId.__doc__ = """The one core identity of a persisted conversation (root or sub-task);
`AgentRunRequest.conversation_id` on the wire."""

AgentSessionId = NewType("AgentSessionId", str)
AgentSessionId.__doc__ = """A Cursor agent session instance (client-side session), not a conversation."""

MessageId = NewType("MessageId", str)
MessageId.__doc__ = """`UserMessage.message_id`: idempotency key of a user-message event."""

InjectionId = NewType("InjectionId", str)
InjectionId.__doc__ = """`InjectContextAction.injection_id`: idempotency key of a context
injection; a repeated id is ignored."""

ToolCallId = NewType("ToolCallId", str)
ToolCallId.__doc__ = """The model provider's tool-call id: `call_id` of tool-call updates,
`ToolCall.tool_call_id`, `args.tool_call_id`, `ExecServerMessage.exec_id`, and a subagent
child's `x-parent-agent-tool-call-id`."""

ExecId = NewType("ExecId", int)
ExecId.__doc__ = """`ExecServerMessage.id` (uint32): server-assigned number of one exec request,
echoed by the client's `ExecClientMessage.id` and used by `ExecServerAbort.id`."""

TraceId = NewType("TraceId", str)
TraceId.__doc__ = """Server-unique id of one observed request chain (logs, traces table)."""


def new_trace_id() -> TraceId:
    """A fresh trace id: 32 lowercase hex digits (uuid4; the W3C trace-id shape)."""
    return TraceId(uuid.uuid4().hex)


def new_internal_run_id() -> RunId:
    """A fresh internal run id (uuid4, canonical dashed form)."""
    return RunId(str(uuid.uuid4()))
