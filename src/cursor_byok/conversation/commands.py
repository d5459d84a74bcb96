"""What reaches a conversation runtime: everything goes through its one command queue."""
from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from ..protocol import agent_pb2 as pb
from ..run import ToolCallRequest, ToolOutcome, Usage
from .identity import ParentConversationRef
from .output import OutputStream


class StartRun(msgspec.Struct):
    request_id: str
    output: OutputStream
    run_request: pb.AgentRunRequest
    parent: ParentConversationRef | None = None
    follow_up: bool = False  # built by the runtime from an action on this stream
    resumed: bool = False  # its run was cut by a restart: resumed from the journaled input


class ClientInput(msgspec.Struct):
    request_id: str
    message: pb.AgentClientMessage
    output: OutputStream | None = None  # the stream it was appended on (the request id's latest)
    seqno: int = 0  # its append seqno (0: not from the journal's view of the stream)
    replayed: bool = False  # journaled before a restart and applied again after it


class Heartbeat(msgspec.Struct):
    output: OutputStream


class ToolBatch(msgspec.Struct):
    run_id: str
    calls: list[ToolCallRequest]
    future: asyncio.Future[list[ToolOutcome]]


class Prepared(msgspec.Struct):
    run_id: str
    error: BaseException | None = None


class EngineDone(msgspec.Struct):
    run_id: str
    usage: Usage | None = None
    error: BaseException | None = None


class InjectionsTaken(msgspec.Struct):
    run_id: str


class CheckpointDone(msgspec.Struct):
    run_id: str
    error: BaseException | None = None


class FinalizeExpired(msgspec.Struct):
    run_id: str


class RecoveryExpired(msgspec.Struct):
    """A resumed run has waited long enough for its IDE (and the tool results it still owed)."""

    run_id: str


class ReattachExpired(msgspec.Struct):
    """The run's stream has had no reader for the reattach grace: its client is gone."""

    run_id: str


class Reader(msgspec.Struct):
    """A reader (RunSSE, or a Run stream's response side) came to (`attached`) or left `output`."""

    request_id: str
    attached: bool
    output: OutputStream


class Shutdown(msgspec.Struct):
    reason: str
    done: asyncio.Future[None]


Command = (
    StartRun | ClientInput | Heartbeat | ToolBatch | Prepared | EngineDone | InjectionsTaken | CheckpointDone
    | FinalizeExpired | RecoveryExpired | ReattachExpired | Reader | Shutdown
)


# What a run step's end is as a command (the runtime's `_start`): run id, error, result.
def prepared(run_id: str, error: BaseException | None, _: Any) -> Prepared:
    return Prepared(run_id, error)


def engine_done(run_id: str, error: BaseException | None, result: Any) -> EngineDone:
    return EngineDone(run_id, getattr(result, "usage_total", None), error)


def checkpoint_done(run_id: str, error: BaseException | None, _: Any) -> CheckpointDone:
    return CheckpointDone(run_id, error)
