"""Fake model-provider HTTP servers for tests: a real local server plus per-provider stream builders.

    with FakeProviderServer() as server:
        server.enqueue(ANTHROPIC.text(["Hello"]))
        ... point a ModelConfig(base_url=server.url) at it ...
        server.requests[0].json()

Fixtures (import them into a conftest.py): `fake_server`, `http_client`.
"""
from __future__ import annotations

from typing import Any

from cursor_byok.config import ModelConfig, ProviderKind

from .anthropic import AnthropicDialect
from .corporate_proxy import FakeCorporateProxy
from .dialect import CallSpec, Dialect, UsageSpec, sse
from .openai_chat import OpenAIChatDialect
from .openai_responses import OpenAIResponsesDialect
from .server import FakeProviderServer, RecordedRequest, Reply

OPENAI_CHAT = OpenAIChatDialect()
OPENAI_RESPONSES = OpenAIResponsesDialect()
ANTHROPIC = AnthropicDialect()
DIALECTS: dict[ProviderKind, Dialect] = {d.kind: d for d in (OPENAI_CHAT, OPENAI_RESPONSES, ANTHROPIC)}



def joined_deltas(events: list[Any]) -> list[Any]:
    """`events` with adjacent deltas of one part (text, thinking, one tool call's arguments) joined,
    as the provider driver joins those of one read: what a test may expect whichever reads its
    fake's chunks arrive in."""
    out: list[Any] = []
    for event in events:
        kind, last = type(event), out[-1] if out else None
        if kind.__name__ in ("TextDelta", "ThinkingDelta") and type(last) is kind:
            out[-1] = kind(last.text + event.text)
        elif kind.__name__ == "ToolCallArgsDelta" and type(last) is kind and (last.index, last.id) == (event.index, event.id):
            out[-1] = kind(last.index, last.id, last.delta + event.delta)
        else:
            out.append(event)
    return out


def fake_model(kind: ProviderKind, base_url: str, **overrides: Any) -> ModelConfig:
    """A model config pointing at a fake server, with short timeouts suitable for tests."""
    if kind is not ProviderKind.ANTHROPIC and not base_url.endswith("/v1"):
        base_url = base_url.rstrip("/") + "/v1"
    fields: dict[str, Any] = {
        "id": f"fake-{kind.value}", "provider": kind, "model": "fake-model", "base_url": base_url,
        "context_window": 200_000, "max_output_tokens": 4096,
        "request_timeout_seconds": 5.0, "idle_timeout_seconds": 5.0,
    }
    fields.update(overrides)
    return ModelConfig(**fields)


__all__ = [
    "ANTHROPIC",
    "DIALECTS",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "AnthropicDialect",
    "CallSpec",
    "Dialect",
    "FakeCorporateProxy",
    "FakeProviderServer",
    "OpenAIChatDialect",
    "OpenAIResponsesDialect",
    "RecordedRequest",
    "Reply",
    "UsageSpec",
    "fake_model",
    "sse",
]
