"""The provider request's share of a turn start, and of each streamed delta: the event loop thread's
CPU per model request and per delta read, ours against a plain aiohttp post of a prebuilt body and
against a candidate client, each layer apart.

A real local provider (`support/stamp_provider.py`, its own process: its CPU is not counted)
answers each request at once with one text chunk and its finish. Per request, in this process's
only thread (thread CPU, `time.thread_time`, around the whole exchange: the loop's I/O work for it
included):

- **floor**: a prebuilt body POSTed through a plain `aiohttp.ClientSession`, the answer read to its
  end and its events decoded (`support/bare_turn_app.py`'s own `forward`);
- **http**: the same prebuilt body through our client (`ProviderHttp.post`: aiohttp's pooled
  connection, the head h11 wrote once for the provider, aiohttp's protocol reading), the answer
  read to its end;
- **h11**: the same through a candidate client (`support/h11_client.py`: h11 on one kept-alive
  asyncio connection, without the TLS, proxy, timeout and pool handling a real one would add);
- **hybrid**: the same through the other candidate there: h11 writes the request, aiohttp's own
  connection protocol reads the answer (what `ProviderHttp` does, without its pool, TLS, proxies
  and timeouts);
- **new**: a new conversation's first request through the adapter (`stream()`: the body built from
  the compiled system prompt and tool schemas of agent mode and a 2,000-word user message, sent,
  its SSE parsed and translated);
- **follow-up**: a conversation's third turn (its first two turns' request sent before: the
  adapter's kept prefix), the same way.

The six alternate, request by request, so the machine's load falls on each alike. Each request
comes "cold-ish", as in the server, where a start touches much other code in between: before it,
unrelated work walks a few MiB of memory (`BENCH_PROVIDER_COLD=0` turns that off: hot).

Then the response side, per delta: a second provider answers each request with 100 one-word deltas
1 ms apart (each arrives alone in its read, as at a model's pace), and **floor**, **http**, **h11**,
**hybrid** and the adapter (**new**) read such answers in turn; CPU per answer / 100 = per delta, from the
socket read to the event the engine sees (for the adapter: SSE decoding and translation included).

    .venv/bin/python -m pytest -q benchmarks/test_provider_request.py -s
    # where the time goes: cProfile with a thread-CPU clock, per scenario, top entries (and each
    # scenario's stats saved as <prefix>-<request|stream>-<scenario>.prof for pstats)
    BENCH_PROVIDER_PROFILE=/tmp/pr .venv/bin/python -m pytest -q benchmarks/test_provider_request.py -s
    # another checkout's code (before/after in one sitting)
    PYTHONPATH=<other>/src .venv/bin/python -m pytest -q benchmarks/test_provider_request.py -s

Knobs: BENCH_PROVIDER_REQUESTS (per scenario, default 400), BENCH_PROVIDER_STREAMS (streamed answers
per scenario, default 40).
"""
from __future__ import annotations

import asyncio
import cProfile
import io
import os
import pstats
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Hashable

import aiohttp
import msgspec
import uvloop

import cursor_byok
from benchmarks.support.bare_turn_app import BODY, forward, turn_text
from benchmarks.support.h11_client import H11Connection, HybridConnection
from benchmarks.test_gateway import ROOT
from cursor_byok import prompting
from cursor_byok.config import ProviderKind
from cursor_byok.http_client import ProviderHttp
from cursor_byok.providers import KeyedMessages, Message, ModelRequest, Provider, RetryPolicy, TextPart, make_provider
from tests.fakes import fake_model
from tests.harness.server import free_port

REQUESTS = int(os.environ.get("BENCH_PROVIDER_REQUESTS", "400"))
STREAMS = int(os.environ.get("BENCH_PROVIDER_STREAMS", "40"))
DELTAS = 100  # per streamed answer, 1 ms apart
COLD = os.environ.get("BENCH_PROVIDER_COLD", "1") != "0"
PROFILE = os.environ.get("BENCH_PROVIDER_PROFILE", "")
_POLLUTE = bytearray(8 * 1024 * 1024)


class _History(KeyedMessages):
    """A conversation's messages, keyed by position (they never change in this benchmark)."""

    __slots__ = ("_source", "_messages")

    def __init__(self, source: Hashable, messages: list[Message]) -> None:
        self._source, self._messages = source, messages

    def source(self) -> Hashable:
        return self._source

    def key(self, index: int) -> str:
        return f"m{index}"

    def __len__(self) -> int:
        return len(self._messages)

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        return self._messages[index]


def _pollute() -> None:
    """Work unrelated to the request, touching memory and code a start does not share with it."""
    _POLLUTE[:] = bytes(len(_POLLUTE))
    msgspec.json.decode(msgspec.json.encode([{"k": i, "v": str(i)} for i in range(2_000)]))


async def _wait_listening(port: int) -> None:
    for _ in range(200):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.02)
            continue
        writer.close()
        return
    raise RuntimeError("the stamp provider did not start")


def _user(text: str) -> Message:
    return Message("user", [TextPart(text)])


async def _run(port: int, stream_port: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    base = f"http://127.0.0.1:{port}/v1"
    url = base + "/chat/completions"
    model = fake_model(ProviderKind.OPENAI_CHAT, base, request_timeout_seconds=30.0, idle_timeout_seconds=30.0)
    stream_base = f"http://127.0.0.1:{stream_port}/v1"
    stream_model = fake_model(ProviderKind.OPENAI_CHAT, stream_base, request_timeout_seconds=30.0, idle_timeout_seconds=30.0)
    client = ProviderHttp(trust_env=False)
    adapter = make_provider(model, "bench-key-0000", client, retry=RetryPolicy(max_retries=0))
    stream_adapter = make_provider(stream_model, "bench-key-0000", client, retry=RetryPolicy(max_retries=0))
    compiled = prompting.compile_request(prompting.Mode.AGENT, model, sorted(prompting.FIXED_TOOLS))
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4096, keepalive_timeout=30))
    text = turn_text()
    fields = {"authorization": "Bearer bench-key-0000", "content-type": "application/json", "accept": "text/event-stream"}
    headers = client.headers(fields)
    h11_connections = {p: await H11Connection.open("127.0.0.1", p) for p in (port, stream_port)}
    hybrid_connections = {p: await HybridConnection.open("127.0.0.1", p) for p in (port, stream_port)}

    def request(messages: KeyedMessages) -> ModelRequest:
        return ModelRequest(model=model.model, system=compiled.system, messages=messages, tools=compiled.tools,
                            max_tokens=model.max_output_tokens)

    def floor(url: str) -> Callable[[], Awaitable[None]]:
        return lambda: forward(session, url, lambda content: None)

    def http(url: str) -> Callable[[], Awaitable[None]]:
        async def exchange() -> None:
            response = await client.post(url, BODY, headers, connect_timeout=30.0)
            try:
                while await response.next_chunk():
                    pass
            finally:
                await response.aclose()
        return exchange

    def candidate(connections: dict[int, H11Connection] | dict[int, HybridConnection], port: int) -> Callable[[], Awaitable[None]]:
        connection, head = connections[port], [("host", f"127.0.0.1:{port}"), *fields.items()]

        async def exchange() -> None:
            await connection.post("/v1/chat/completions", head, BODY)
            while await connection.read():
                pass
        return exchange

    async def consume(provider: Provider, req: ModelRequest) -> None:
        async for _ in provider.stream(req):
            pass

    def new(provider: Provider) -> Callable[[], Awaitable[None]]:
        return lambda: consume(provider, request(_History(uuid.uuid4().hex, [_user(text)])))

    def follow_up() -> Awaitable[None]:
        source = uuid.uuid4().hex
        first = [_user(text), Message("assistant", [TextPart("done")])]
        adapter.encode_request(request(_History(source, first)))  # the earlier turn's request: the kept prefix
        return consume(adapter, request(_History(source, [*first, _user(text), Message("assistant", [TextPart("done")]), _user(text)])))

    requests = {"floor": floor(url), "http": http(url), "h11": candidate(h11_connections, port),
                "hybrid": candidate(hybrid_connections, port), "new": new(adapter), "follow-up": follow_up}
    stream_url = stream_base + "/chat/completions"
    streams = {"floor": floor(stream_url), "http": http(stream_url), "h11": candidate(h11_connections, stream_port),
               "hybrid": candidate(hybrid_connections, stream_port), "new": new(stream_adapter)}
    try:
        per_request = await _measure(requests, REQUESTS, "request")
        per_answer = await _measure(streams, STREAMS, "stream")
    finally:
        await session.close()
        await client.aclose()
        for connection in [*h11_connections.values(), *hybrid_connections.values()]:
            connection.close()
    return per_request, {name: [t / DELTAS for t in values] for name, values in per_answer.items()}


async def _measure(scenarios: dict[str, Callable[[], Awaitable[None]]], rounds: int, label: str) -> dict[str, list[float]]:
    """Thread CPU of each scenario's exchanges, the scenarios taking turns; with BENCH_PROVIDER_PROFILE,
    each one's cProfile printed and saved."""
    times: dict[str, list[float]] = {name: [] for name in scenarios}
    profiles: dict[str, cProfile.Profile] = {name: cProfile.Profile(time.thread_time) for name in scenarios}
    for make in scenarios.values():  # warm: a connection each, imports, first-use caches
        for _ in range(5):
            await make()
    for _ in range(rounds):
        for name, make in scenarios.items():
            if COLD:
                _pollute()
            pending = make()
            profile = profiles[name] if PROFILE else None
            started = time.thread_time()
            if profile is not None:
                profile.enable()
            await pending
            if profile is not None:
                profile.disable()
            times[name].append(time.thread_time() - started)
    if PROFILE:
        for name, profile in profiles.items():
            profile.dump_stats(f"{PROFILE}-{label}-{name}.prof")
            out = io.StringIO()
            stats = pstats.Stats(profile, stream=out)
            stats.sort_stats("tottime").print_stats(25)
            stats.sort_stats("cumulative").print_stats(40)
            print(f"\n==== {label} {name}: cProfile (thread CPU), {rounds} exchanges ====\n{out.getvalue()}")
    return times


def _report(title: str, times: dict[str, list[float]]) -> None:
    floor = statistics.median(times["floor"])
    print(f"\n{title}, {'cold-ish' if COLD else 'hot'}, load {os.getloadavg()[0]:.1f}, code {cursor_byok.__file__}")
    print(f"{'':<10} {'median':>8} {'mean':>8} {'p90':>8}  × floor median")
    for name, values in times.items():
        us = sorted(v * 1e6 for v in values)
        median = statistics.median(us)
        print(f"{name:<10} {median:8.1f} {statistics.fmean(us):8.1f} {us[int(len(us) * 0.9)]:8.1f}  {median / (floor * 1e6):.2f}")


def test_provider_request_cpu() -> None:
    port, stream_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)}
    providers = [
        subprocess.Popen([sys.executable, "-m", "benchmarks.support.stamp_provider", str(port), "0", "0"], env=env, cwd=ROOT),
        subprocess.Popen([sys.executable, "-m", "benchmarks.support.stamp_provider", str(stream_port), str(DELTAS - 1), "1"], env=env, cwd=ROOT),
    ]
    try:
        per_request, per_delta = uvloop.run(_main(port, stream_port))
    finally:
        for provider in providers:
            provider.terminate()
            provider.wait(10)
    _report(f"provider request, loop thread CPU per request (µs), {REQUESTS} each", per_request)
    _report(f"streamed answer, loop thread CPU per delta (µs), {STREAMS} answers of {DELTAS} deltas each", per_delta)
    assert all(len(values) == REQUESTS for values in per_request.values())
    assert all(len(values) == STREAMS for values in per_delta.values())


async def _main(port: int, stream_port: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    await _wait_listening(port)
    await _wait_listening(stream_port)
    return await _run(port, stream_port)
