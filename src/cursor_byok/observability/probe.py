"""A model's speed, measured with one short prompt: time to first token and tokens per second (the
dashboard's "test" button and `cursor-byok models test`)."""
from __future__ import annotations

import time

import msgspec

from ..config import ModelConfig
from ..providers import CallError, Finish, Message, ModelRequest, Provider, ProviderCall, TextDelta, TextPart, ThinkingDelta, Usage

DEFAULT_PROMPT = "Say hello in five words."


class ModelTestResult(msgspec.Struct, frozen=True):
    text: str
    ttft_ms: float | None
    total_ms: float
    output_tokens: int | None
    tokens_per_second: float | None


async def measure_model(provider: Provider, model: ModelConfig, call: ProviderCall, *, prompt: str = DEFAULT_PROMPT, max_tokens: int = 256) -> ModelTestResult:
    """Stream one answer; `call` is filled in with what the call did (ProviderError propagates)."""
    request = ModelRequest(
        model=model.model,
        system="You are a helpful assistant. Answer briefly.",
        messages=[Message(role="user", parts=[TextPart(text=prompt)])],
        max_tokens=min(max_tokens, model.max_output_tokens),
        effort=model.default_effort or None,
        thinking_budget=model.thinking_budget_tokens or None,
    )
    text: list[str] = []
    call.started_ns = time.monotonic_ns()
    try:
        async for event in provider.stream(request, call):
            if not call.first_event_ns:
                call.first_event_ns = time.monotonic_ns()
            if isinstance(event, (TextDelta, ThinkingDelta)) and event.text and not call.first_token_ns:
                call.first_token_ns = time.monotonic_ns()
            if isinstance(event, TextDelta):
                text.append(event.text)
            elif isinstance(event, Usage):
                call.usage = event
            elif isinstance(event, Finish):
                call.stop_reason = event.stop_reason
    except BaseException as exc:
        call.error = CallError.of(exc)
        raise
    finally:
        call.ended_ns = time.monotonic_ns()
    first, ended = call.first_token_ns, call.ended_ns
    output = call.usage.output_tokens if call.usage is not None else None
    rate = output / ((ended - first) / 1e9) if output and first and ended > first else None
    return ModelTestResult(
        "".join(text),
        (first - call.started_ns) / 1e6 if first else None,
        (ended - call.started_ns) / 1e6,
        output,
        rate,
    )
