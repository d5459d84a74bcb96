"""Conversation identities (see ARCHITECTURE.md, "Identities"): never mix them."""
from __future__ import annotations

import os

import msgspec


class ParentConversationRef(msgspec.Struct, frozen=True):
    """Immutable origin of a child conversation (a Task sub-agent). All three fields or none.

    parent_conversation_id: which conversation chain it belongs to;
    parent_run_id: the parent's *internal* run that dispatched it;
    parent_tool_call_id: the ordinary tool call (Task) that created it.
    """

    parent_conversation_id: str
    parent_run_id: str
    parent_tool_call_id: str

    def __post_init__(self) -> None:
        if not (self.parent_conversation_id and self.parent_run_id and self.parent_tool_call_id):
            raise ValueError("ParentConversationRef needs all three of conversation, run and tool call id")


def new_run_id() -> str:
    """A globally unique internal run id (never derived from request_id): 128 random bits in hex,
    as a uuid4's hex but without building the uuid (one per run start)."""
    return "run-" + os.urandom(16).hex()
