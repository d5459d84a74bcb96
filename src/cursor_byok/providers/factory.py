"""Provider construction from a model's configuration, and ordered failover."""
from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Protocol

import msgspec

from ..config import ModelConfig, ProviderKind
from ..http_client import ProviderHttp
from .errors import AuthError, ProviderError
from .transport import HttpStreamProvider, RetryPolicy, Sleep
from .types import ModelRequest, ProviderCall, StreamEvent


class Provider(Protocol):
    """Streams one model response. Implementations are async generator methods: iterate
    `provider.stream(request, call, ready)`; closing the iterator early closes the HTTP response.
    `call` (optional) is filled in with what the exchange did, for observers. With `ready`, the
    request is built at once but sent only once `ready` is done (raising what it raises)."""

    def stream(
        self, request: ModelRequest, call: ProviderCall | None = None, ready: Awaitable[object] | None = None
    ) -> AsyncIterator[StreamEvent]: ...


# Each kind's adapter module, imported when a model of that kind is first made: a server imports
# only the formats its config uses.
_ADAPTERS: dict[ProviderKind, tuple[str, str]] = {
    ProviderKind.OPENAI_CHAT: ("openai_chat", "OpenAIChatProvider"),
    ProviderKind.OPENAI_RESPONSES: ("openai_responses", "OpenAIResponsesProvider"),
    ProviderKind.ANTHROPIC: ("anthropic", "AnthropicProvider"),
}


def _adapter_class(kind: ProviderKind) -> type[HttpStreamProvider]:
    module, name = _ADAPTERS[kind]
    adapter: type[HttpStreamProvider] = getattr(importlib.import_module(f"{__package__}.{module}"), name)
    return adapter


def make_provider(
    model: ModelConfig,
    api_key: str,
    client: ProviderHttp,
    *,
    retry: RetryPolicy | None = None,
    sleep: Sleep = asyncio.sleep,
) -> HttpStreamProvider:
    """The adapter for `model.provider`, sending with `client` (shared, owned by the caller)."""
    return _adapter_class(ProviderKind(model.provider))(model, api_key, client, retry=retry, sleep=sleep)


class FailoverProvider:
    """Tries adapters in order. Moves on only when an adapter failed before streaming anything
    with a retryable or authentication error (its own retries already spent); each adapter gets
    the request with its own configured model id."""

    def __init__(self, providers: Sequence[HttpStreamProvider]) -> None:
        if not providers:
            raise ValueError("FailoverProvider needs at least one provider")
        self._providers = list(providers)

    def __repr__(self) -> str:
        return f"FailoverProvider({self._providers!r})"

    async def stream(
        self, request: ModelRequest, call: ProviderCall | None = None, ready: Awaitable[object] | None = None
    ) -> AsyncIterator[StreamEvent]:
        last = len(self._providers) - 1
        for position, provider in enumerate(self._providers):
            emitted = False
            try:
                # Only the first provider waits for `ready`: a fallback's call starts when it is tried.
                waits = ready if position == 0 else None
                async for event in provider.stream(msgspec.structs.replace(request, model=provider.model.model), call, waits):
                    emitted = True
                    yield event
                return
            except ProviderError as err:
                if emitted or position == last or not (err.retryable or isinstance(err, AuthError)):
                    raise
