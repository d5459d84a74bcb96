"""Conversation runtime benchmarks: history projection of a long conversation, memory left per
conversation once its runtime was evicted to the database, and the memory of one conversation over
500 turns with tools (flat per turn; nothing kept per request id).

    .venv/bin/python -m pytest -q benchmarks/test_runtime.py -s -p no:timeout
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
from cursor_byok.conversation.history import ConversationHistory, EntryKind, encode_entry
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


# --------------------------------------------------------------------------------------------------
# One conversation, 500 turns with a tool call each: what the runtime holds must grow with the
# conversation's content only, not with the number of turns or requests it has seen; and what is
# left once it is evicted must not grow with its length.
# --------------------------------------------------------------------------------------------------
LONG_TURNS = 500
SHORT_TURNS = 50
SAMPLE_EVERY = 100


def _tool_then_answer(workspace: Path):  # type: ignore[no-untyped-def]
    from tests.fakes import CallSpec

    def respond(request):  # type: ignore[no-untyped-def]
        if request.json()["messages"][-1]["role"] == "tool":
            return OPENAI_CHAT.text(["read it, all fine"])
        return OPENAI_CHAT.tool_calls([CallSpec(f"c{uuid.uuid4().hex[:8]}", "Read", [f'{{"path": "{workspace}/notes.txt"}}'])])

    return respond


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


class _Conversation:
    """One conversation driven the way the IDE does: each turn on a new request id with the last
    checkpoint sent back, its Read executed, then the gateway's periodic sweep."""

    def __init__(self, rig, provider: FakeProviderServer) -> None:  # type: ignore[no-untyped-def]
        self.rig = rig
        self.provider = provider
        self.ide = rig.ide(rig.path.parent)
        self.conversation_id = uuid.uuid4().hex
        self.request_ids: list[str] = []
        self.state: pb.ConversationStateStructure | None = None

    async def turn(self, model: str) -> None:
        msg = run_request(f"question {len(self.request_ids)}: look at the notes", model=model, conversation_id=self.conversation_id)
        if self.state is not None:
            msg.run_request.conversation_state.CopyFrom(self.state)
        self.request_ids.append(uuid.uuid4().hex)
        log = await self.ide.turn(msg, request_id=self.request_ids[-1])
        assert log.terminal is None, log.terminal
        self.state = log.messages[-1].conversation_checkpoint_update
        for kept in (self.ide.exec_log, self.ide.kv_log, self.ide.blobs, self.ide.seqnos):
            kept.clear()  # the scripted IDE's and the fake provider's records are not the server's memory
        with self.provider._lock:
            self.provider.requests.clear()
        self.rig.service.hub.sweep()

    def history_bytes(self) -> int:
        runtime = self.rig.runtime(self.conversation_id)
        return sum(len(encode_entry(e.kind, e.message)) for e in runtime.data.history.entries)

    def per_request_state(self) -> tuple[int, int, int]:
        """(request ids with blob-sync state, bindings in the registry, streams in the hub)"""
        runtime = self.rig.runtime(self.conversation_id)
        registry = self.rig.service.registry
        return len(runtime.data.blobs.request_ids()), sum(registry.binding(r) is not None for r in self.request_ids), len(self.rig.service.hub)


@pytest.mark.benchmark(group="runtime")
def test_memory_of_one_conversation_over_500_turns_with_tools(benchmark, tmp_path: Path) -> None:
    from tests.harness.inprocess import MODEL as IN_PROCESS_MODEL, Rig

    (tmp_path / "notes.txt").write_text("some notes\n" * 20)
    provider = FakeProviderServer().start()
    provider.respond_with(_tool_then_answer(tmp_path))
    samples: list[tuple[int, int, int]] = []  # (turns, traced bytes, history content bytes)
    figures: dict[str, float] = {}

    async def evicted_after(rig, turns: int, sample: bool) -> float:  # type: ignore[no-untyped-def]
        """Traced bytes a conversation of `turns` turns leaves behind once evicted."""
        before = _traced()
        conversation = _Conversation(rig, provider)
        for done in range(1, turns + 1):
            await conversation.turn(IN_PROCESS_MODEL)
            if sample and done % SAMPLE_EVERY == 0:
                samples.append((done, _traced() - before, conversation.history_bytes()))
        figures["held_request_ids"], figures["bound_request_ids"], figures["hub_streams"] = conversation.per_request_state()
        rig.service.evict_idle(-1)
        await asyncio.sleep(0.05)
        return _traced() - before

    async def scenario() -> None:
        rig = await Rig(tmp_path, provider).start()
        warm_up = _Conversation(rig, provider)
        for _ in range(10):  # imports, pools and caches
            await warm_up.turn(IN_PROCESS_MODEL)
        rig.service.evict_idle(-1)
        tracemalloc.start()
        figures["evicted_short_kib"] = await evicted_after(rig, SHORT_TURNS, sample=False) / 1024
        figures["evicted_long_kib"] = await evicted_after(rig, LONG_TURNS, sample=True) / 1024
        tracemalloc.stop()
        await rig.close()

    try:
        benchmark.pedantic(lambda: asyncio.run(scenario()), rounds=1, iterations=1)
    finally:
        provider.close()
    rows = [
        (t0, t1, (m1 - m0) / (t1 - t0) / 1024, (c1 - c0) / (t1 - t0) / 1024)
        for (t0, m0, c0), (t1, m1, c1) in zip(samples, samples[1:])
    ]
    evicted_per_turn = (figures["evicted_long_kib"] - figures["evicted_short_kib"]) / (LONG_TURNS - SHORT_TURNS) * 1024
    print(f"\none conversation, {LONG_TURNS} turns with a Read each (traced Python memory):")
    for t0, t1, per_turn, content in rows:
        print(f"  turns {t0:>3}-{t1:<3}: {per_turn:6.2f} KiB/turn held while live, of which history content {content:5.2f} KiB/turn")
    print(f"  after {LONG_TURNS} turns: {figures['held_request_ids']:.0f} request ids with blob-sync state, "
          f"{figures['bound_request_ids']:.0f} bindings in the registry, {figures['hub_streams']:.0f} streams in the hub")
    print(f"  left once evicted: {figures['evicted_short_kib']:.1f} KiB after {SHORT_TURNS} turns, "
          f"{figures['evicted_long_kib']:.1f} KiB after {LONG_TURNS} turns ({evicted_per_turn:.0f} B per turn)")
    benchmark.extra_info.update(figures)
    benchmark.extra_info["kib_per_turn_live"] = [round(r[2], 2) for r in rows]
    assert figures["held_request_ids"] == figures["bound_request_ids"] == figures["hub_streams"] == 0
