"""What a ToolExecution asks its driver (the conversation runtime) to do next."""
from __future__ import annotations

from typing import Union

import msgspec

from cursor_byok.run import ToolOutcome

from ._wire import pb

__all__ = [
    "ExecStep",
    "InteractionStep",
    "Progress",
    "Done",
    "Step",
    "ToolProtocolError",
    "ResultKindMismatch",
]


class ExecStep(msgspec.Struct):
    """Send `message` as `exec_server_message` after reserving a fresh id into `message.id`.

    delay_ms > 0 (only Await's terminal polls): send it no earlier than that many ms from now.
    Every ExecStep is a new exec (new id); its results go to the same ToolExecution.
    """

    message: pb.ExecServerMessage
    delay_ms: int = 0


class InteractionStep(msgspec.Struct):
    """Send `query` as `interaction_query` after reserving a fresh id into `query.id`."""

    query: pb.InteractionQuery


class Progress(msgspec.Struct):
    """Interaction updates to emit now; the execution still waits on the same exec/interaction."""

    updates: list[pb.InteractionUpdate] = msgspec.field(default_factory=list)


class Done(msgspec.Struct):
    """The call is finished: emit tool_call_completed (ToolExecution.completed()) and commit."""

    outcome: ToolOutcome


Step = Union[ExecStep, InteractionStep, Progress, Done]


class ToolProtocolError(Exception):
    """An input the execution cannot accept; its state is unchanged."""


class ResultKindMismatch(ToolProtocolError):
    """A client result of a kind the pending exec/interaction did not ask for.

    Raised instead of completing the call, so a stray message cannot fail a valid call. The
    runtime should log it and ignore the message, or call `execution.on_throw(str(err))` if it
    prefers to fail the call.
    """

    def __init__(self, got: str | None, expected: tuple[str, ...], tool: str) -> None:
        self.got = got
        self.expected = expected
        self.tool = tool
        wanted = " or ".join(expected) if expected else "nothing"
        super().__init__(f"result kind {got} does not match the requested tool {tool} (expected {wanted})")
