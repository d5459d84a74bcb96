"""Stream translation cost of each adapter against the floor of only parsing the SSE lines.

Both variants read the same in-memory SSE bytes, one chunk per SSE event as a live stream delivers
them, each chunk handed over by an await. "floor" runs them through httpx-sse's decoders and does
nothing with the events; "translate" runs the adapter's full path (`provider.stream`: request
encoding, per-event idle bound, SSE parse, msgspec decode, neutral events). The network is not in
it: the adapter's HTTP client is a stand-in that answers every request with the chunks. Run:

    .venv/bin/python -m pytest benchmarks/test_providers.py --benchmark-columns=min,median,mean,ops
"""
from __future__ import annotations

import asyncio

import httpx
import pytest
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

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


class _Answer:
    """The chunks as a response of the adapter's HTTP client: a 200 event stream."""

    status = 200
    headers = httpx.Headers({"content-type": "text/event-stream"})

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = iter(chunks)

    async def next_chunk(self) -> bytes:
        return next(self._chunks, b"")

    async def aclose(self) -> None:
        pass


class _InMemoryHttp:
    """In place of the provider HTTP client: every request is answered with the same chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    @staticmethod
    def headers(headers: dict[str, str]) -> dict[str, str]:
        return headers

    async def post(self, url: str, body: bytes, headers: object, *, connect_timeout: float) -> _Answer:
        return _Answer(self.chunks)


async def floor(chunks: list[bytes]) -> int:
    answer = _Answer(chunks)
    lines, events = SSELineDecoder(), SSEDecoder()
    count = 0
    while chunk := await answer.next_chunk():
        for line in lines.decode(chunk.decode()):
            if events.decode(line) is not None:
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
    model = fake_model(kind, "http://bench.invalid")
    provider = make_provider(model, "bench-key-0000", _InMemoryHttp(chunks), retry=RetryPolicy(max_retries=0))

    def once() -> int:
        if variant == "floor":
            return loop.run_until_complete(floor(chunks))
        return loop.run_until_complete(translate(provider))

    try:
        produced = benchmark.pedantic(once, rounds=15, warmup_rounds=2, iterations=1)
    finally:
        loop.close()
    sse_events = len(chunks)
    benchmark.extra_info.update(sse_events=sse_events, produced=produced,
                                sse_events_per_s=round(sse_events / benchmark.stats.stats.mean))
    assert produced > 0
