"""CPU per streamed delta from the provider's bytes to the run's event sink, each delta arriving
alone (as at 50 words/s: one SSE event per read, one wake of the reading task per event).

"floor" is what any server must do per delta: wake the reading task, parse the SSE lines
(httpx-sse's decoders), decode the event's JSON and take its text. "engine" is ours: the adapter's
`provider.stream` (SSE, msgspec decode, the dialect's translation, the per-read joining), the run
engine's drain and the cycle's `apply`, into a sink that counts. The network and the presenter are
not in either. Each chunk is handed over by a future resolved in a later pass of the loop, so both
pay a task step per delta as the server does. Run (the ratio is `extra_info.per_delta_us` of the two):

    .venv/bin/python -m pytest -q -p no:randomly benchmarks/test_run_events.py --benchmark-columns=min,median,mean
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec
import pytest
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from benchmarks.test_providers import REQUEST, _InMemoryHttp, _new_loop
from cursor_byok.config import ProviderKind
from cursor_byok.providers import RetryPolicy, make_provider
from cursor_byok.run import ContextEstimator, RunEngine, RunSpec
from tests.fakes import DIALECTS, fake_model

DELTAS = 5_000


class _OneByOne:
    """The chunks as a response whose every read waits for a later pass of the loop."""

    status = 200

    def __init__(self, chunks: list[bytes], headers: object) -> None:
        self._chunks = iter(chunks)
        self.headers = headers

    async def next_chunk(self) -> bytes:
        loop = asyncio.get_running_loop()
        arrived = loop.create_future()
        loop.call_soon(arrived.set_result, next(self._chunks, b""))
        return await arrived

    async def aclose(self) -> None:
        pass


class _OneByOneHttp(_InMemoryHttp):
    async def post(self, url: str, body: bytes, headers: object, *, connect_timeout: float) -> _OneByOne:  # type: ignore[override]
        answer = await super().post(url, body, headers, connect_timeout=connect_timeout)
        return _OneByOne(self.chunks, answer.headers)


class _History:
    """One user message; commits are dropped."""

    def __init__(self) -> None:
        self.context_size = ContextEstimator()

    def messages(self) -> list:
        return list(REQUEST.messages)

    def estimator(self) -> ContextEstimator:
        return self.context_size

    def stored(self) -> None:
        return None

    def commit_assistant(self, *args: object, **kwargs: object) -> None:
        pass

    def commit_tool_results(self, message: object) -> None:
        pass

    def take_injections(self) -> list:
        return []

    def commit_injected(self, messages: object) -> None:
        pass

    def compact(self, summary: str) -> None:
        pass


class _CountingSink:
    def __init__(self) -> None:
        self.count = 0

    def emit(self, event: object) -> None:
        self.count += 1

    def provider_call(self, call: object) -> None:
        pass


def _text_of(kind: ProviderKind) -> Callable[[object], str | None]:
    """The floor's one look into an event: where its dialect keeps a text delta."""
    if kind is ProviderKind.OPENAI_CHAT:
        return lambda e: e["choices"][0]["delta"].get("content") if e.get("choices") else None  # type: ignore[index,union-attr]
    if kind is ProviderKind.ANTHROPIC:
        return lambda e: e.get("delta", {}).get("text")  # type: ignore[union-attr]
    return lambda e: e.get("delta")  # type: ignore[union-attr]


async def floor(chunks: list[bytes], text_of: Callable[[object], str | None]) -> int:
    answer = _OneByOne(chunks, None)
    lines, events = SSELineDecoder(), SSEDecoder()
    decode = msgspec.json.decode
    texts: list[str] = []
    while chunk := await answer.next_chunk():
        for line in lines.decode(chunk.decode()):
            sse = events.decode(line)
            if sse is not None and sse.data.startswith("{") and (text := text_of(decode(sse.data))):
                texts.append(text)
    return len(texts)


async def engine(provider: object, model: object) -> int:
    sink = _CountingSink()
    spec = RunSpec(model=model, system=REQUEST.system, tools=REQUEST.tools)  # type: ignore[arg-type]
    await RunEngine(provider).run(spec, _History(), None, sink)  # type: ignore[arg-type]
    return sink.count


@pytest.mark.parametrize("variant", ["floor", "engine"])
@pytest.mark.parametrize("kind", list(ProviderKind), ids=lambda k: k.value)
def test_delta_to_sink(benchmark, kind: ProviderKind, variant: str) -> None:
    chunks = DIALECTS[kind].text([f" tok{i % 97}" for i in range(DELTAS)]).chunks
    loop = _new_loop()
    model = fake_model(kind, "http://bench.invalid")
    provider = make_provider(model, "bench-key-0000", _OneByOneHttp(chunks), retry=RetryPolicy(max_retries=0))
    text_of = _text_of(kind)

    def once() -> int:
        if variant == "floor":
            return loop.run_until_complete(floor(chunks, text_of))
        return loop.run_until_complete(engine(provider, model))

    try:
        produced = benchmark.pedantic(once, rounds=8, warmup_rounds=1, iterations=1)
    finally:
        loop.close()
    benchmark.extra_info.update(produced=produced, per_delta_us=round(benchmark.stats.stats.mean / DELTAS * 1e6, 2))
    assert produced >= DELTAS
