"""CPU per streamed delta from the provider's bytes to the run's event sink, each delta arriving
alone (as at 50 words/s: one SSE event per read, one wake of the reading task per event).

"floor" is what any server must do per delta: wake the reading task, parse the SSE lines
(httpx-sse's decoders), decode the event's JSON and take its text. "engine" is ours: the adapter's
`provider.stream` (SSE, msgspec decode, the dialect's translation, the per-read joining), the run
engine's drain and the cycle's `apply`, into a sink that counts. The network and the presenter are
not in either. Each chunk is handed over by a future resolved in a later pass of the loop, so both
pay a task step per delta as the server does. Each engine round follows a floor round; the printed
result is the ratio of their CPU times (the machine is shared) and both sides' Python calls per
delta (cProfile's count: deterministic, so a before/after pair needs no quiet machine):

    .venv/bin/python -m pytest -q -s -p no:randomly benchmarks/test_run_events.py
"""
from __future__ import annotations

import asyncio
import cProfile
import pstats
import statistics
import time
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
ROUNDS = 10


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


def _calls_per_delta(run: Callable[[], int]) -> float:
    """Python calls (functions and builtins, as cProfile counts them) per delta of one run."""
    profile = cProfile.Profile()
    profile.enable()
    try:
        produced = run()
    finally:
        profile.disable()
    return pstats.Stats(profile).total_calls / produced  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", list(ProviderKind), ids=lambda k: k.value)
def test_delta_to_sink(benchmark, kind: ProviderKind) -> None:
    """The engine's rounds are the benchmark's figures; a floor round runs before each, and the
    ratio of their CPU time (medians) is the result, as are both sides' Python calls per delta."""
    chunks = DIALECTS[kind].text([f" tok{i % 97}" for i in range(DELTAS)]).chunks
    loop = _new_loop()
    model = fake_model(kind, "http://bench.invalid")
    provider = make_provider(model, "bench-key-0000", _OneByOneHttp(chunks), retry=RetryPolicy(max_retries=0))
    text_of = _text_of(kind)
    cpu: dict[str, list[float]] = {"floor": [], "engine": []}

    def run_floor() -> int:
        return loop.run_until_complete(floor(chunks, text_of))

    def run_engine() -> int:
        return loop.run_until_complete(engine(provider, model))

    def timed(name: str, run: Callable[[], int]) -> int:
        started = time.process_time()
        produced = run()
        cpu[name].append(time.process_time() - started)
        return produced

    def setup() -> tuple[tuple[()], dict[str, object]]:
        timed("floor", run_floor)
        return (), {}

    try:
        produced = benchmark.pedantic(lambda: timed("engine", run_engine), setup=setup, rounds=ROUNDS, warmup_rounds=1, iterations=1)
        calls = {"floor": _calls_per_delta(run_floor), "engine": _calls_per_delta(run_engine)}
    finally:
        loop.close()
    engine_us, floor_us = (statistics.median(cpu[name]) / produced * 1e6 for name in ("engine", "floor"))
    benchmark.extra_info.update(
        per_delta_us=round(engine_us, 2), floor_per_delta_us=round(floor_us, 2), ratio=round(engine_us / floor_us, 2),
        calls_per_delta=round(calls["engine"], 1), floor_calls_per_delta=round(calls["floor"], 1),
    )
    print(f"\n{kind.value}: {engine_us:.2f} µs per delta vs floor {floor_us:.2f} ({engine_us / floor_us:.2f}×);"
          f" Python calls per delta {calls['engine']:.1f} vs {calls['floor']:.1f}")
    assert produced >= DELTAS
