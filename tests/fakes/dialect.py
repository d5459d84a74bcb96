"""What every fake provider dialect offers, so contract tests can run the same scenario on all three."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from cursor_byok.config import ProviderKind
from cursor_byok.providers import Usage

from .server import Reply


def sse(data: Any, event: str | None = None) -> bytes:
    """One SSE event as the providers frame it (`event:` line optional, JSON data, blank line)."""
    payload = data if isinstance(data, str) else msgspec.json.encode(data).decode()
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


@dataclass(frozen=True)
class UsageSpec:
    """Token counts a fake reports; `input` is the uncached part of the prompt."""

    input: int = 100
    output: int = 20
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0


@dataclass(frozen=True)
class CallSpec:
    id: str
    name: str
    arg_pieces: list[str] = field(default_factory=list)


class Dialect(Protocol):
    kind: ProviderKind
    messages_key: str  # top-level request array holding the conversation

    def text(self, pieces: list[str], usage: UsageSpec = ...) -> Reply: ...

    def thinking(self, thoughts: list[str], pieces: list[str], usage: UsageSpec = ...) -> Reply: ...

    def tool_calls(self, calls: list[CallSpec], pieces: list[str] = ..., usage: UsageSpec = ...) -> Reply: ...

    def expected_usage(self, usage: UsageSpec) -> Usage: ...

    def auth_error(self, echo: str = "") -> Reply: ...

    def rate_limited(self, headers: dict[str, str]) -> Reply: ...

    def overloaded(self) -> Reply: ...

    def context_length(self) -> Reply: ...

    def refusal(self) -> Reply: ...

    def overloaded_in_stream(self) -> Reply: ...
