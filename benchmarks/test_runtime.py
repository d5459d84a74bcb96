"""Conversation runtime benchmarks: history projection of a long conversation, and memory left per
conversation once its runtime was evicted to the database.

    .venv/bin/python -m pytest -q benchmarks/test_runtime.py -s
Checkpoint persistence throughput (1,000 conversations × 20 steps) is benchmarks/test_store.py.
"""
from __future__ import annotations

import asyncio
import gc
import tracemalloc
import uuid
from pathlib import Path

import httpx
import pytest

from cursor_byok import config as cfg
from cursor_byok.conversation import ConversationService, OutputHub, RuntimeServices
from cursor_byok.conversation.history import ConversationHistory, EntryKind
from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.run import Message, RunEngine, TextPart, ToolCallPart, ToolResultPart, make_provider
from cursor_byok.store import Store
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import run_request

CONVERSATIONS = 300


def long_history(events: int) -> ConversationHistory:
    history = ConversationHistory("bench", strict_prefix=True)
    filler = "x" * 1024
    for i in range(0, events, 4):
        history.append(EntryKind.USER, f"u{i}", Message(role="user", parts=[TextPart(text=f"question {i} {filler}")]), "r")
        call = ToolCallPart(id=f"c{i}", name="Read", arguments='{"path": "/tmp/a"}')
        history.append(EntryKind.ASSISTANT, f"a{i}", Message(role="assistant", parts=[TextPart(text=filler), call]), "r")
        result = ToolResultPart(call_id=f"c{i}", name="Read", content=filler)
        history.append(EntryKind.TOOL_RESULTS, f"t{i}", Message(role="tool", parts=[result]), "r")
        history.append(EntryKind.ASSISTANT, f"b{i}", Message(role="assistant", parts=[TextPart(text=f"answer {i}")]), "r")
    return history


@pytest.mark.benchmark(group="runtime")
def test_history_projection_of_2000_events(benchmark) -> None:
    history = long_history(2000)
    history.project()  # the first projection records the chain; later ones are checked against it
    messages = benchmark(history.project)
    assert len(messages) == 2000


async def drive_conversations(service: ConversationService, model_id: str, count: int) -> None:
    """Run `count` one-turn conversations the way the IDE would, acking checkpoint blobs."""

    async def one() -> None:
        rid = uuid.uuid4().hex
        msg = run_request("hello", model=model_id, conversation_id=uuid.uuid4().hex)
        opened = service.open_run(rid, msg.run_request)
        position = 0
        while True:
            result = await opened.output.read(position)
            position = result.position
            for m in _messages(result.data):
                if m.WhichOneof("message") == "kv_server_message":
                    ack = pb.AgentClientMessage()
                    ack.kv_client_message.id = m.kv_server_message.id
                    ack.kv_client_message.set_blob_result.SetInParent()
                    service.deliver(rid, ack)
            if result.finished:
                return

    for start in range(0, count, 50):
        await asyncio.gather(*(one() for _ in range(min(50, count - start))))


def _messages(data: bytes) -> list[pb.AgentServerMessage]:
    from cursor_byok import hotpath

    return [pb.AgentServerMessage.FromString(p) for f, p in hotpath.FrameDecoder().feed(data) if not f & hotpath.FLAG_END_STREAM]


@pytest.mark.benchmark(group="runtime")
def test_memory_per_idle_conversation_after_eviction(benchmark, tmp_path: Path) -> None:
    provider = FakeProviderServer().start()
    provider.respond_with(lambda request: OPENAI_CHAT.text(["fine"]))
    model = cfg.ModelConfig(id="bench", provider=cfg.ProviderKind.OPENAI_CHAT, model="m", base_url=provider.url + "/v1")
    config = cfg.Config(models=[model])
    per_conversation: dict[str, float] = {}

    async def scenario() -> None:
        store = await Store.open(tmp_path / f"state-{uuid.uuid4().hex}.db")
        async with httpx.AsyncClient() as http:
            services = RuntimeServices(
                config=config, make_engine=lambda m: RunEngine(make_provider(m, "k", http)), store=store, continuation_window=0.0
            )
            service = ConversationService(services, OutputHub(retention_seconds=0.0))
            await drive_conversations(service, "bench", 20)  # warm up imports, pools and caches
            service.evict_idle(-1)
            service.hub.sweep(now=float("inf"))
            await asyncio.sleep(0.05)
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
            await drive_conversations(service, "bench", CONVERSATIONS)
            live = tracemalloc.get_traced_memory()[0]
            assert len(service.registry) == CONVERSATIONS + 0  # the warm-up ones were evicted
            service.evict_idle(-1)
            service.hub.sweep(now=float("inf"))
            await asyncio.sleep(0.05)
            gc.collect()
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
            per_conversation["live_kib"] = live / CONVERSATIONS / 1024
            per_conversation["evicted_kib"] = grown / CONVERSATIONS / 1024
            await store.close()

    try:
        benchmark.pedantic(lambda: asyncio.run(scenario()), rounds=1, iterations=1)
    finally:
        provider.close()
    benchmark.extra_info.update({k: round(v, 2) for k, v in per_conversation.items()})
    print(f"\nper conversation: {per_conversation['live_kib']:.1f} KiB traced while live, "
          f"{per_conversation['evicted_kib']:.2f} KiB retained after eviction (target < 50 KiB)")
