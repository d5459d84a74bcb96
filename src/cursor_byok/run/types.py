"""Tool-call shapes shared by the engine, its events and its ports."""
from __future__ import annotations

from typing import Any

import msgspec

from ..providers import ImagePart

INTERRUPTED_RESULT = "Tool execution was interrupted by a newer user message."


class ToolCallRequest(msgspec.Struct, frozen=True):
    call_id: str
    name: str
    arguments: str  # raw JSON text exactly as the model produced it
    parsed: dict[str, Any] | None  # None when the arguments are not a JSON object
    error: str | None = None  # why `parsed` is None


class ToolOutcome(msgspec.Struct, frozen=True):
    call_id: str
    name: str
    content: str
    is_error: bool = False
    images: list[ImagePart] = []
