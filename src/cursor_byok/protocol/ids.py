"""Typed identities (ARCHITECTURE.md "Identities (never mix them)").

NewTypes cost nothing at runtime; they let the type checker catch a request id passed where a
conversation id belongs. Each docstring below is the identity's meaning.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, NewType

from .compat import which
from .errors import ConnectError

if TYPE_CHECKING:
    from .pb import agent_v1_pb2

__all__ = [
    "MAX_ID_BYTES",
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
    "check_client_message_ids",
    "check_id",
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
RunId.__doc__ = """Internal run id: one server-side run of the engine, globally unique ("run-" and
32 random hex digits), minted by `conversation.new_run_id()`; never derived from a request id or a
Cursor run id."""

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
    """A fresh trace id: 32 lowercase hex digits of 128 random bits (the W3C trace-id shape).
    Straight from the OS's random source: every run start makes one, and a uuid4 object built only
    for its hex costs four times as much."""
    return TraceId(os.urandom(16).hex())


# Identifiers a client chooses are keys of our maps and rows: bounded, printable, one line.
MAX_ID_BYTES = 256


def check_id(name: str, value: str) -> None:
    """ConnectError invalid_argument unless `value` is a usable identifier (empty passes: absent)."""
    if len(value) <= MAX_ID_BYTES and value.isprintable() and (value.isascii() or len(value.encode()) <= MAX_ID_BYTES):
        return
    if len(value) > MAX_ID_BYTES or len(value.encode()) > MAX_ID_BYTES:
        raise ConnectError("invalid_argument", f"protocol error: {name} is longer than {MAX_ID_BYTES} bytes")
    raise ConnectError("invalid_argument", f"protocol error: {name} contains control or unprintable characters")


def _check_user_message(prefix: str, um: agent_v1_pb2.UserMessage) -> None:
    check_id(f"{prefix}.message_id", um.message_id)


def _check_action(prefix: str, action: agent_v1_pb2.ConversationAction) -> None:
    kind = which(action, "action")
    if kind == "user_message_action":
        uma = action.user_message_action
        check_id(f"{prefix}.user_message.message_id", uma.user_message.message_id)  # every turn's: inline
        for um in uma.prepend_user_messages:
            _check_user_message(f"{prefix}.prepend_user_messages", um)
    elif kind == "inject_context_action":
        ica = action.inject_context_action
        check_id(f"{prefix}.injection_id", ica.injection_id)
        check_id(f"{prefix}.expected_run_id", ica.expected_run_id)
        if ica.HasField("user_context"):
            _check_user_message(f"{prefix}.user_context.user_message", ica.user_context.user_message)
    elif kind == "cancel_subagent_action":
        check_id(f"{prefix}.subagent_id", action.cancel_subagent_action.subagent_id)
    elif kind == "background_shell_action":
        check_id(f"{prefix}.tool_call_id", action.background_shell_action.tool_call_id)
    elif kind == "background_subagent_action":
        check_id(f"{prefix}.tool_call_id", action.background_subagent_action.tool_call_id)
    elif kind == "async_ask_question_completion_action":
        check_id(f"{prefix}.original_tool_call_id", action.async_ask_question_completion_action.original_tool_call_id)
    elif kind == "background_task_completion_action":
        for c in action.background_task_completion_action.completions:
            check_id(f"{prefix}.task_id", c.task_id)
            check_id(f"{prefix}.subagent_id", c.subagent_id)
            check_id(f"{prefix}.tool_call_id", c.tool_call_id)


def check_client_message_ids(message: agent_v1_pb2.AgentClientMessage, variant: str | None) -> None:
    """Check every identifier of a client message that the server keys anything by, once, at the
    edge: ConnectError invalid_argument names the first bad one. `variant` is the set oneof."""
    if variant == "run_request":
        rr = message.run_request
        check_id("conversation_id", rr.conversation_id)
        check_id("run_id", rr.run_id)
        _check_action("action", rr.action)
    elif variant == "conversation_action":
        _check_action("conversation_action", message.conversation_action)
    elif variant == "exec_client_message":
        check_id("exec_client_message.exec_id", message.exec_client_message.exec_id)
