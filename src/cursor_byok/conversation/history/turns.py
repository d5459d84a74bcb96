"""The turns a checkpoint names: what the IDE redraws a conversation from.

A turn is one user message and the steps that answered it (assistant text, thinking with its
duration, tool calls with their typed call, result and times). Each step, the user message and the
turn itself are blobs: `ConversationTurnStructure{agent_conversation_turn{user_message = blob id of
the UserMessage, steps = blob ids of ConversationStep, request_id}}`.

A step is published (named by a checkpoint) once it is closed and every step before it is too, so
the steps one checkpoint names are a prefix of the steps any later one names: a published step
never changes. Text closes when thinking or a tool call begins or the model cycle ends; thinking
closes with its duration; a tool call closes with its result, and calls keep the order they were
started in, whichever finishes first. Earlier turns are carried as received.
"""
from __future__ import annotations

import msgspec
from google.protobuf.message import Message

from ...protocol import agent_pb2 as pb
from .checkpoint import blob_id

Blob = tuple[bytes, bytes]  # (blob id, blob bytes)


def encode_blob(message: Message) -> Blob:
    data = message.SerializeToString(deterministic=True)
    return blob_id(data), data


class StepLog:
    """The steps of one turn in the order they happened."""

    def __init__(self) -> None:
        self._steps: list[pb.ConversationStep | None] = []  # None: a tool call still running
        self._slots: dict[str, int] = {}  # running tool call id → its index in _steps
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._blobs: list[Blob] = []  # blobs of the published prefix, built once each
        self._taken = 0  # published steps whose tool calls were taken

    def text(self, text: str) -> None:
        if self._thinking:  # a step of its own before the text (checked here: once per streamed delta)
            self._close_thinking(0)
        self._text.append(text)

    def thinking(self, text: str) -> None:
        self._close_text()
        self._thinking.append(text)

    def end_thinking(self, duration_ms: int) -> None:
        self._close_thinking(duration_ms)

    def close(self) -> None:
        """A boundary (the model cycle ended): open text or thinking becomes a step."""
        self._close_text()
        self._close_thinking(0)

    def tool_started(self, call_id: str) -> None:
        self.close()
        self._slots[call_id] = len(self._steps)
        self._steps.append(None)

    def tool_completed(self, call_id: str, tool_call: pb.ToolCall) -> None:
        index = self._slots.pop(call_id, None)
        step = pb.ConversationStep()
        step.tool_call.CopyFrom(tool_call)
        if index is None:  # a call we did not see start (not drawn when it started)
            self.close()
            self._steps.append(step)
        else:
            self._steps[index] = step

    def _close_text(self) -> None:
        if self._text:
            step = pb.ConversationStep()
            step.assistant_message.text = "".join(self._text)
            self._text = []
            self._steps.append(step)

    def _close_thinking(self, duration_ms: int) -> None:
        if self._thinking:
            step = pb.ConversationStep()
            step.thinking_message.text = "".join(self._thinking)
            step.thinking_message.duration_ms = max(1, duration_ms)
            self._thinking = []
            self._steps.append(step)

    def _publish(self) -> int:
        """Extend the published prefix over the steps closed since; its length."""
        while len(self._blobs) < len(self._steps):
            step = self._steps[len(self._blobs)]
            if step is None:
                break
            self._blobs.append(encode_blob(step))
        return len(self._blobs)

    def published(self) -> list[Blob]:
        """Blobs of the closed prefix of steps (each built once: it never changes again)."""
        self._publish()
        return list(self._blobs)

    def take_tool_calls(self) -> list[pb.ToolCall]:
        """The tool calls published since the last take."""
        count = self._publish()
        taken = [s.tool_call for s in self._steps[self._taken : count] if s is not None and s.HasField("tool_call")]
        self._taken = count
        return taken


class Turn(msgspec.Struct, eq=False):
    """One turn of this run: begun by a user message, or (None) continuing the state's last turn."""

    user_message: pb.UserMessage | None
    steps: StepLog = msgspec.field(default_factory=StepLog)


class TurnLog:
    """The turns one run adds to a conversation, the one in progress last."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.turns: list[Turn] = []

    @property
    def steps(self) -> StepLog:
        """Where the run's steps go: the current turn's (a continuation if none was begun)."""
        if not self.turns:
            self.turns.append(Turn(None))
        return self.turns[-1].steps

    def begin(self, user_message: pb.UserMessage, mode: int) -> None:
        """A user message starts a turn (the one before keeps what it had)."""
        if self.turns:
            self.turns[-1].steps.close()
        um = user_message
        if um.mode != mode:  # a copy only to set its mode: the IDE's own (read only here) usually has it
            um = pb.UserMessage()
            um.CopyFrom(user_message)
            um.mode = mode  # type: ignore[assignment]
        self.turns.append(Turn(um))

    def close(self) -> None:
        """The run ended: whatever text or thinking is still open becomes a step."""
        if self.turns:
            self.turns[-1].steps.close()

    def continues(self) -> bool:
        """Whether this run adds steps to the state's last turn (it began none of its own first)."""
        return bool(self.turns) and self.turns[0].user_message is None and bool(self.turns[0].steps.published())

    def take_tool_calls(self) -> list[pb.ToolCall]:
        """The tool calls published since the last take, in every turn of the run."""
        return [call for turn in self.turns for call in turn.steps.take_tool_calls()]

    def build(self, base: list[bytes], last_base_turn: bytes | None) -> tuple[list[bytes], list[Blob]]:
        """(turn ids, blobs they need) for a checkpoint whose state carried `base` turn ids.
        `last_base_turn`: the bytes of base's last turn, which a continuation extends (None: it
        could not be had, so the continuation starts a turn without a user message)."""
        ids = list(base)
        blobs: list[Blob] = []
        for turn in self.turns:
            steps = turn.steps.published()
            if turn.user_message is not None:
                user = encode_blob(turn.user_message)
                blobs.append(user)
                structure = pb.AgentConversationTurnStructure(user_message=user[0], request_id=self.request_id)
            else:
                if not steps:
                    continue  # nothing new: the state's last turn stays as it was
                structure = _continued(last_base_turn) if ids else None
                if structure is not None:
                    ids.pop()  # the extended turn replaces the one it extends
                else:
                    structure = pb.AgentConversationTurnStructure(request_id=self.request_id)
            blobs.extend(steps)
            structure.steps.extend(bid for bid, _ in steps)
            turn_blob = encode_blob(pb.ConversationTurnStructure(agent_conversation_turn=structure))
            blobs.append(turn_blob)
            ids.append(turn_blob[0])
        return ids, blobs


def _continued(data: bytes | None) -> pb.AgentConversationTurnStructure | None:
    if data is None:
        return None
    try:
        turn = pb.ConversationTurnStructure.FromString(data)
    except Exception:  # noqa: BLE001 - a turn we cannot read is not extended, never fatal
        return None
    if not turn.HasField("agent_conversation_turn"):
        return None
    return turn.agent_conversation_turn


def decode_turn(data: bytes) -> pb.AgentConversationTurnStructure | None:
    """An agent turn blob (None: another kind of turn, or not a turn)."""
    return _continued(data)
