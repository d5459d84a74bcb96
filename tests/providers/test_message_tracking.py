"""History messages' parts are out of the cycle collector's walks: a loaded conversation keeps
every message of its history for as long as it is in memory, and each middle or full collection
would walk them all again. They hold text and JSON data: no cycle can run through them. (The
message itself stays tracked: msgspec does not let a weak-referenceable Struct go untracked.)"""
from __future__ import annotations

import gc

import msgspec

from cursor_byok.providers import Message
from cursor_byok.providers.types import ImagePart, TextPart, ThinkingPart, ToolCallPart, ToolResultPart


def test_a_history_messages_parts_are_not_tracked() -> None:
    parts = [TextPart("hi"), ImagePart("image/png", "AAAA"), ThinkingPart("hm", {"anthropic": {"signature": "s"}}),
             ToolCallPart("c1", "Read", "{}"), ToolResultPart("c1", "Read", "text", images=[ImagePart("image/png", "AAAA")])]
    message = Message("assistant", parts)
    decoded = msgspec.json.decode(msgspec.json.encode(message), type=Message)
    assert decoded == message
    assert [gc.is_tracked(p) for p in (*message.parts, *decoded.parts)] == [False] * 10
