"""Conversation lifecycle as pure data: phases and the one literal table of legal transitions.

A conversation has no terminal state; runs end and the conversation returns to Idle. Only
`runtime.py` applies transitions; everything here is pure (no awaits, no clock reads).
"""
from __future__ import annotations

import enum


class Phase(str, enum.Enum):
    IDLE = "idle"
    PREPARING = "preparing"
    MODELING = "modeling"
    WAITING_TOOLS = "waiting_tools"
    INTERRUPTING = "interrupting"
    CHECKPOINTING = "checkpointing"
    FINALIZING = "finalizing"


class Outcome(str, enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


class IllegalTransition(RuntimeError):
    """A lifecycle bug: the runtime asked for a transition the table does not allow."""

    def __init__(self, conversation_id: str, current: Phase, target: Phase) -> None:
        super().__init__(f"conversation {conversation_id}: illegal transition {current.value} -> {target.value}")
        self.conversation_id = conversation_id
        self.current = current
        self.target = target


P = Phase
# Every phase may also end its run (cancel or failure) by going to FINALIZING; FINALIZING ends in IDLE
# or, when input was queued during it, starts the next run (PREPARING).
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    P.IDLE: frozenset({P.PREPARING}),
    P.PREPARING: frozenset({P.MODELING, P.FINALIZING}),
    P.MODELING: frozenset({P.WAITING_TOOLS, P.INTERRUPTING, P.CHECKPOINTING, P.FINALIZING}),
    P.WAITING_TOOLS: frozenset({P.MODELING, P.INTERRUPTING, P.FINALIZING}),
    P.INTERRUPTING: frozenset({P.MODELING, P.FINALIZING}),
    P.CHECKPOINTING: frozenset({P.FINALIZING}),
    P.FINALIZING: frozenset({P.IDLE, P.PREPARING}),
}

ACTIVE_PHASES = frozenset(TRANSITIONS) - {P.IDLE}


def check_transition(conversation_id: str, current: Phase, target: Phase) -> Phase:
    """Return `target` if the table allows current -> target, else raise IllegalTransition."""
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(conversation_id, current, target)
    return target
