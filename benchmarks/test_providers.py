"""Stream translation cost of each adapter against the floor of only parsing the SSE lines.

Both variants read the same in-memory SSE bytes through httpx (MockTransport, one chunk per SSE
event as a live stream delivers them) and httpx-sse. "floor" iterates the parsed SSE events and does
nothing else; "translate" runs the adapter's full path (request encoding, per-event idle bound,
msgspec decode, neutral events). Run:

    .venv/bin/python -m pytest benchmarks/test_providers.py --benchmark-columns=min,median,mean,ops
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from httpx_sse import EventSource

from cursor_byok.config import ProviderKind
from cursor_byok.providers import Message, ModelRequest, RetryPolicy, TextPart, ToolSchema, make_provider
from tests.fakes import DIALECTS, CallSpec, fake_model

try:
    import uvloop

    _new_loop = uvloop.new_event_loop
except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
    _new_loop = asyncio.new_event_loop

TEXT_TOKENS = 20_000
TOOL_CALLS = 200
ARG_PIECES = ['{"path": ', '"src/module_', '42.py", ', '"offset": 10', '}']


def text_stream(kind: ProviderKind) -> list[bytes]:
    return DIALECTS[kind].text([f" tok{i % 97}" for i in range(TEXT_TOKENS)]).chunks


def tool_stream(kind: ProviderKind) -> list[bytes]:
    calls = [CallSpec(f"call_{i:04d}", "Read", ARG_PIECES) for i in range(TOOL_CALLS)]
    return DIALECTS[kind].tool_calls(calls).chunks


STREAMS = {"text20k": text_stream, "tools200": tool_stream}
REQUEST = ModelRequest(
    model="bench-model",
    system="bench",
    messages=[Message("user", [TextPart("go")])],
    tools=[ToolSchema("Read", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})],
    max_tokens=32_000,
)


def transport(chunks: list[bytes]) -> httpx.MockTransport:
    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    return httpx.MockTransport(handler)


async def floor(client: httpx.AsyncClient, url: str) -> int:
    count = 0
    async with client.stream("POST", url, content=b"{}") as response:
        async for _ in EventSource(response).aiter_sse():
            count += 1
    return count


async def translate(provider) -> int:
    count = 0
    async for _ in provider.stream(REQUEST):
        count += 1
    return count


@pytest.mark.parametrize("variant", ["floor", "translate"])
@pytest.mark.parametrize("stream", list(STREAMS))
@pytest.mark.parametrize("kind", list(ProviderKind), ids=lambda k: k.value)
def test_stream_translation(benchmark, kind: ProviderKind, stream: str, variant: str) -> None:
    chunks = STREAMS[stream](kind)
    loop = _new_loop()
    client = httpx.AsyncClient(transport=transport(chunks))
    model = fake_model(kind, "http://bench.invalid")
    provider = make_provider(model, "bench-key-0000", client, retry=RetryPolicy(max_retries=0))

    def once() -> int:
        if variant == "floor":
            return loop.run_until_complete(floor(client, provider.url))
        return loop.run_until_complete(translate(provider))

    try:
        produced = benchmark.pedantic(once, rounds=15, warmup_rounds=2, iterations=1)
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()
    sse_events = len(chunks)
    benchmark.extra_info.update(sse_events=sse_events, produced=produced,
                                sse_events_per_s=round(sse_events / benchmark.stats.stats.mean))
    assert produced > 0
