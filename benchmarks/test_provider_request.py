"""The provider request's share of a turn start: the event loop thread's CPU per model request, ours
against a plain aiohttp post of a prebuilt body, each layer apart.

A real local provider (`support/stamp_provider.py`, its own process: its CPU is not counted)
answers each request at once with one text chunk and its finish. Per request, in this process's
only thread (thread CPU, `time.thread_time`, around the whole exchange: the loop's I/O work for it
included):

- **floor**: a prebuilt body POSTed through a plain `aiohttp.ClientSession`, the answer read to its
  end and its events decoded (`support/bare_turn_app.py`'s own `forward`);
- **http**: the same prebuilt body through our client (`ProviderHttp.post`: an `httpx.Request`
  handed to the httpx-aiohttp transport), the answer read to its end;
- **new**: a new conversation's first request through the adapter (`stream()`: the body built from
  the compiled system prompt and tool schemas of agent mode and a 2,000-word user message, sent,
  its SSE parsed and translated);
- **follow-up**: a conversation's third turn (its first two turns' request sent before: the
  adapter's kept prefix), the same way.

The four alternate, request by request, so the machine's load falls on each alike. Each request
comes "cold-ish", as in the server, where a start touches much other code in between: before it,
unrelated work walks a few MiB of memory (`BENCH_PROVIDER_COLD=0` turns that off: hot).

    .venv/bin/python -m pytest -q benchmarks/test_provider_request.py -s
    # where the time goes: cProfile with a thread-CPU clock, per scenario, top entries (and each
    # scenario's stats saved as <prefix>-<scenario>.prof for pstats)
    BENCH_PROVIDER_PROFILE=/tmp/pr .venv/bin/python -m pytest -q benchmarks/test_provider_request.py -s
    # another checkout's code (before/after in one sitting)
    PYTHONPATH=<other>/src .venv/bin/python -m pytest -q benchmarks/test_provider_request.py -s

Knobs: BENCH_PROVIDER_REQUESTS (per scenario, default 400).
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
from benchmarks.test_gateway import ROOT
from cursor_byok import prompting
from cursor_byok.config import ProviderKind
from cursor_byok.http_client import ProviderHttp
from cursor_byok.providers import KeyedMessages, Message, ModelRequest, RetryPolicy, TextPart, make_provider
from tests.fakes import fake_model
from tests.harness.server import free_port

REQUESTS = int(os.environ.get("BENCH_PROVIDER_REQUESTS", "400"))
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


async def _run(port: int) -> dict[str, list[float]]:
    base = f"http://127.0.0.1:{port}/v1"
    url = base + "/chat/completions"
    model = fake_model(ProviderKind.OPENAI_CHAT, base, request_timeout_seconds=30.0, idle_timeout_seconds=30.0)
    client = ProviderHttp(trust_env=False)
    adapter = make_provider(model, "bench-key-0000", client, retry=RetryPolicy(max_retries=0))
    compiled = prompting.compile_request(prompting.Mode.AGENT, model, sorted(prompting.FIXED_TOOLS))
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4096, keepalive_timeout=30))
    text = turn_text()
    headers = {"authorization": "Bearer bench-key-0000", "content-type": "application/json", "accept": "text/event-stream"}

    def request(messages: KeyedMessages) -> ModelRequest:
        return ModelRequest(model=model.model, system=compiled.system, messages=messages, tools=compiled.tools,
                            max_tokens=model.max_output_tokens)

    async def floor() -> None:
        await forward(session, url, lambda content: None)

    async def http() -> None:
        response = await client.post(url, BODY, headers, connect_timeout=30.0)
        try:
            while await response.next_chunk():
                pass
        finally:
            await response.aclose()

    async def consume(req: ModelRequest) -> None:
        async for _ in adapter.stream(req):
            pass

    def new() -> Awaitable[None]:
        return consume(request(_History(uuid.uuid4().hex, [_user(text)])))

    def follow_up() -> Awaitable[None]:
        source = uuid.uuid4().hex
        first = [_user(text), Message("assistant", [TextPart("done")])]
        adapter.encode_request(request(_History(source, first)))  # the earlier turn's request: the kept prefix
        return consume(request(_History(source, [*first, _user(text), Message("assistant", [TextPart("done")]), _user(text)])))

    scenarios: dict[str, Callable[[], Awaitable[None]]] = {"floor": floor, "http": http, "new": new, "follow-up": follow_up}
    times: dict[str, list[float]] = {name: [] for name in scenarios}
    profiles: dict[str, cProfile.Profile] = {name: cProfile.Profile(time.thread_time) for name in scenarios}
    try:
        for name, make in scenarios.items():  # warm: a connection each, imports, first-use caches
            for _ in range(5):
                await make()
        for _ in range(REQUESTS):
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
    finally:
        await session.close()
        await client.aclose()
    if PROFILE:
        for name, profile in profiles.items():
            profile.dump_stats(f"{PROFILE}-{name}.prof")
            out = io.StringIO()
            stats = pstats.Stats(profile, stream=out)
            stats.sort_stats("tottime").print_stats(25)
            stats.sort_stats("cumulative").print_stats(40)
            print(f"\n==== {name}: cProfile (thread CPU), {REQUESTS} requests ====\n{out.getvalue()}")
    return times


def test_provider_request_cpu() -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)}
    provider = subprocess.Popen([sys.executable, "-m", "benchmarks.support.stamp_provider", str(port), "0", "0"], env=env, cwd=ROOT)
    try:
        times = uvloop.run(_main(port))
    finally:
        provider.terminate()
        provider.wait(10)
    floor = statistics.median(times["floor"])
    print(f"\nprovider request, loop thread CPU per request (µs), {REQUESTS} each, "
          f"{'cold-ish' if COLD else 'hot'}, load {os.getloadavg()[0]:.1f}, code {cursor_byok.__file__}")
    print(f"{'':<10} {'median':>8} {'mean':>8} {'p90':>8}  × floor median")
    for name, values in times.items():
        us = sorted(v * 1e6 for v in values)
        median = statistics.median(us)
        print(f"{name:<10} {median:8.1f} {statistics.fmean(us):8.1f} {us[int(len(us) * 0.9)]:8.1f}  {median / (floor * 1e6):.2f}")
    assert all(len(values) == REQUESTS for values in times.values())


async def _main(port: int) -> dict[str, list[float]]:
    await _wait_listening(port)
    return await _run(port)
