"""Canonical conversation history, its provider projection, and checkpoint message blobs."""
from __future__ import annotations

from .checkpoint import (
    ROOT_SIZE,
    SEED_FIELD,
    RootBlob,
    RootBlobs,
    RootSeed,
    blob_id,
    message_from_json,
    message_json,
    pending_json,
    root_id,
    root_ids,
    seed_field,
    seed_of,
    system_json,
)
from .derived import DerivedState, summary_blobs, todo_blobs
from .turns import Blob, StepLog, TurnLog, decode_turn
from .request import background_completion_messages, prompt_mode, render_request_context, render_user_message
from .entry import EntryKind, HistoryEntry, canonical, decode_entry, encode_entry
from .log import ConversationHistory, PrefixViolation, Projection, Window, strict_prefix_checks
from .stored import StoredEntries

__all__ = [
    "Blob",
    "StepLog",
    "TurnLog",
    "DerivedState",
    "background_completion_messages",
    "decode_turn",
    "pending_json",
    "summary_blobs",
    "todo_blobs",
    "ConversationHistory",
    "EntryKind",
    "HistoryEntry",
    "PrefixViolation",
    "Projection",
    "StoredEntries",
    "Window",
    "strict_prefix_checks",
    "blob_id",
    "canonical",
    "decode_entry",
    "encode_entry",
    "message_from_json",
    "message_json",
    "prompt_mode",
    "render_request_context",
    "render_user_message",
    "RootBlob",
    "RootBlobs",
    "RootSeed",
    "ROOT_SIZE",
    "SEED_FIELD",
    "seed_field",
    "seed_of",
    "root_id",
    "root_ids",
    "system_json",
]
