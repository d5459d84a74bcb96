"""The client's request context, asked for when a run request carries none.

Cursor's IDE sends its environment (workspace folders, terminals folder, shell, OS, time zone) with
each user message. Cursor's agent SDK sends none: its executor answers the exec
`request_context_args` instead, which Cursor's backend sends before the first model call. Without
that answer the tools run in the wrong place (Shell in the SDK process's own directory, Await with
no terminals folder), so a run whose request lacks the context asks once, before the model, and
runs as if the request had carried the answer. A client that does not answer in time, or answers
with an error, leaves the run as it came.
"""
from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from ..protocol import agent_pb2 as pb, which
from . import updates

# How long a run waits for the client's answer before it goes on without one.
ANSWER_WAIT_SECONDS = 10.0
# The actions whose message carries a request context (a field of that name).
_CONTEXT_ACTIONS = frozenset({"user_message_action", "resume_action"})


class ContextQuery(msgspec.Struct, eq=False):
    """A request_context_args exec in flight: its exec id and the answer awaited."""

    exec_id: int
    answer: asyncio.Future[pb.RequestContext | None]

    def takes(self, kind: str, msg: Any) -> bool:
        """Whether a client message is this query's (its result, or the stream control after it);
        a result or a throw settles the answer."""
        if kind == "exec_client_message":
            if msg.id != self.exec_id or not msg.HasField("request_context_result"):
                return False
            result = msg.request_context_result
            self._settle(result.success.request_context if result.HasField("success") else None)
            return True
        if kind == "exec_client_control_message":
            control = which(msg, "message")
            if control not in ("stream_close", "throw") or getattr(msg, control).id != self.exec_id:
                return False
            self._settle(None)
            return True
        return False

    def _settle(self, context: pb.RequestContext | None) -> None:
        if not self.answer.done():
            self.answer.set_result(context)

    def give_up(self) -> None:
        self._settle(None)


def lacks_request_context(rr: pb.AgentRunRequest) -> bool:
    kind = which(rr.action, "action")
    return kind in _CONTEXT_ACTIONS and not getattr(rr.action, kind).HasField("request_context")


def ask(exec_id: int) -> tuple[ContextQuery, pb.AgentServerMessage]:
    """The query and the exec request that asks the client."""
    query = ContextQuery(exec_id, asyncio.get_running_loop().create_future())
    return query, updates.exec_request(pb.ExecServerMessage(id=exec_id, request_context_args=pb.RequestContextArgs()))


def with_request_context(rr: pb.AgentRunRequest, context: pb.RequestContext) -> pb.AgentRunRequest:
    """A copy of `rr` whose action carries `context`, as the IDE's would. Cursor's SDK names its
    MCP servers' tools in the context, where the IDE puts them in the run request: a run request
    without any takes the context's."""
    completed = pb.AgentRunRequest()
    completed.CopyFrom(rr)
    getattr(completed.action, which(completed.action, "action")).request_context.CopyFrom(context)
    if not completed.mcp_tools.mcp_tools:
        completed.mcp_tools.mcp_tools.extend(context.tools)
    return completed
