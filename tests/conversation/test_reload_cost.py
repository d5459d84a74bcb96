"""A turn of a conversation whose runtime was let go (idle, or a restart) reads its history again:
what that turn builds must not grow with the history (issue 12's soak: every such turn decoded the
whole history into small objects, encoded and hashed every message again, and the heap kept the
room that peak took).

Counted, not timed: the most memory blocks the process holds at once during the turn (sampled at
every call and return), above what it held before the turn, at two history lengths. A stored entry
is no object of its own any more (the history is a few buffers, its digests and blob ids one bytes
object each, the adapter's kept encodings one per conversation): what still grows with the history
is per message and transient (~2 blocks until the checkpoint's root ids were one bytes object
instead of an object each: ~0 since), not its decoded message, its provider encoding and its
checkpoint blob; the two tests at the end count what a reload and the kept encodings hold.
"""
from __future__ import annotations

import gc
import json
import sys
import uuid
from pathlib import Path

from cursor_byok.config import ModelConfig, ProviderKind
from cursor_byok.conversation.history import ConversationHistory, EntryKind, HistoryEntry, Projection, canonical, encode_entry
from cursor_byok.conversation.persistence import ConversationRecords
from cursor_byok.http_client import streaming_client
from cursor_byok.providers import ModelRequest, make_provider
from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.run import ImagePart, Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from cursor_byok.store import ConversationRecord, NewEvent, Store
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, RecordedRequest, Reply
from tests.harness.ide import StreamLog, run_request
from tests.harness.inprocess import MODEL, InProcessIDE, Rig

BLOCKS_PER_ENTRY = 1  # what one stored entry may hold at a reloaded turn's peak (~0 measured; 2.2 with a root id object each, 6.5 before the buffers)


def answer(request: RecordedRequest) -> Reply:
    """`turn N tools` gets a Read of a file, then (with the result) `answer N`; others `answer N`."""
    messages = request.json()["messages"]
    text = json.dumps([m["content"] for m in messages if m["role"] == "user"][-1])
    n = text.split("turn ")[-1].split(" ")[0]
    if messages[-1]["role"] == "user" and "tools" in text:
        return OPENAI_CHAT.tool_calls([CallSpec(f"c{n}_{len(messages)}", "Read", [json.dumps({"path": "notes.txt"})])])
    return OPENAI_CHAT.text([f"answer {n}"])


class Conversation:
    """The IDE's side of one conversation: like Cursor, it sends its last checkpoint back."""

    def __init__(self, ide: InProcessIDE, workspace: Path, conv: str | None = None) -> None:
        self.ide, self.workspace = ide, workspace
        self.conv = conv or uuid.uuid4().hex
        self.state: pb.ConversationStateStructure | None = None
        self.turns = 0

    async def turn(self) -> StreamLog:
        n = self.turns
        self.turns += 1
        msg = run_request(f"turn {n} {'tools' if n % 2 else 'text'}", model=MODEL, conversation_id=self.conv,
                          message_id=f"m{n}", workspace=str(self.workspace))
        if self.state is not None:
            msg.run_request.conversation_state.CopyFrom(self.state)
        log = await self.ide.turn(msg)
        assert log.terminal is None and log.text.endswith(f"answer {n}"), (log.terminal, log.text)
        for m in log.messages:
            if m.WhichOneof("message") == "conversation_checkpoint_update":
                self.state = m.conversation_checkpoint_update
        return log


class PeakBlocks:
    """The most blocks allocated at once while it is installed, sampled at every call and return."""

    def __init__(self) -> None:
        self.peak = sys.getallocatedblocks()

    def __call__(self, frame: object, event: str, arg: object) -> None:
        blocks = sys.getallocatedblocks()
        if blocks > self.peak:
            self.peak = blocks


async def reloaded_turn_peak(rig: Rig, conversation: Conversation) -> int:
    """The blocks a turn of the conversation, its runtime let go first, holds at its peak beyond
    what the process held before it."""
    rig.service.evict_idle(-1)
    assert rig.runtime(conversation.conv) is None
    gc.collect()
    gc.disable()  # a collection in the middle would hide what the turn holds
    try:
        before = sys.getallocatedblocks()
        sampler = PeakBlocks()
        sys.setprofile(sampler)
        try:
            await conversation.turn()
        finally:
            sys.setprofile(None)
    finally:
        gc.enable()
    return sampler.peak - before


async def test_a_reloaded_turn_builds_no_more_with_a_longer_history(rig: Rig, provider: FakeProviderServer, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("the notes\n")
    provider.respond_with(answer)
    ide = rig.ide(tmp_path)
    conversation = Conversation(ide, tmp_path)
    for _ in range(3):
        await conversation.turn()
    await reloaded_turn_peak(rig, conversation)  # first-use costs (imports, caches) out of the way
    peaks: dict[int, int] = {}
    for length in (10, 70):
        while conversation.turns < length:
            await conversation.turn()
        entries = len(await rig.history(conversation.conv))
        # The count is the whole process's (the store's threads allocate too): the lowest of a few
        # reloaded turns is the turn's own, and a wider gap between the lengths dilutes the rest.
        peaks[entries] = min([await reloaded_turn_peak(rig, conversation) for _ in range(3)])
    (short, short_peak), (long, long_peak) = sorted(peaks.items())
    per_entry = (long_peak - short_peak) / (long - short)
    assert per_entry <= BLOCKS_PER_ENTRY, (
        f"a reloaded turn holds {short_peak} blocks at its peak with {short} stored entries, {long_peak} with {long} "
        f"(×{long_peak / short_peak:.2f}): {per_entry:.1f} per entry"
    )


def test_a_stored_entry_gives_its_canonical_bytes_and_its_message_as_they_were() -> None:
    """The prefix chain hashes a stored entry's canonical bytes as its stored bytes hold them; they
    must be exactly the message's own, whatever its parts (escapes, unicode, replay data)."""
    messages = [
        (EntryKind.USER, Message("user", [TextPart('quote " backslash \\ tab \t émoji 🙂 <tag>')])),
        (EntryKind.ASSISTANT, Message("assistant", [ThinkingPart("hmm", {"anthropic": {"signature": "s"}, "z": [1, {"a": None}]}),
                                                    TextPart("done"), ToolCallPart("c1", "Read", '{"path": "a"}')])),
        (EntryKind.TOOL_RESULTS, Message("tool", [ToolResultPart("c1", "Read", "x" * 600, is_error=True,
                                                                 images=[ImagePart("image/png", "iVBORw0KGgo=")])])),
        (EntryKind.COMPACTION, Message("user", [TextPart("Summary")])),
    ]
    for kind, message in messages:
        stored = HistoryEntry(7, "e", kind, "r", payload=encode_entry(kind, message))
        assert stored.canonical() == canonical(message)
        assert stored.view() == message and stored.view() is not stored.view()  # decoded afresh, not kept
        assert stored.message is stored.message  # asked for as the entry's message: kept


async def test_a_reloaded_conversation_sends_the_bodies_a_never_evicted_one_sends(
    rig: Rig, provider: FakeProviderServer, tmp_path: Path
) -> None:
    """The same turns, once with the runtime kept (the adapter's kept prefix grows with each
    request) and once with the runtime let go before every turn (each turn reads its history from
    the store again): byte for byte the same provider requests."""
    (tmp_path / "notes.txt").write_text("the notes\n")
    provider.respond_with(answer)
    ide = rig.ide(tmp_path)
    bodies: dict[bool, list[bytes]] = {}
    for evicted in (False, True):
        conversation = Conversation(ide, tmp_path, conv=f"conversation-{evicted}")
        start = len(provider.requests)
        for _ in range(6):
            if evicted:
                rig.service.evict_idle(-1)
                assert rig.runtime(conversation.conv) is None
            await conversation.turn()
        bodies[evicted] = [r.body for r in provider.requests[start:]]
    assert len(bodies[True]) == len(bodies[False]) == 9  # 6 turns, 3 with a tool round
    assert bodies[True] == bodies[False]


class Stored(Projection):
    """A projection of `count` stored entries of a few words each (as a reloaded history reads)."""

    def __init__(self, conversation_id: str, count: int) -> None:
        kinds = (EntryKind.USER, EntryKind.ASSISTANT)
        super().__init__(conversation_id, [
            HistoryEntry(i + 1, f"assistant:run-{i // 2}:{i + 1}", kinds[i % 2], "run",
                         payload=encode_entry(kinds[i % 2], Message(("user", "assistant")[i % 2], [TextPart(f"word {i}")])))
            for i in range(count)
        ])


def test_the_encodings_kept_for_a_conversation_are_a_few_objects_whatever_its_length() -> None:
    """What an adapter keeps of a conversation's history between its requests (so that a follow-up,
    or a turn after a reload, sends its history without encoding it) holds a few blocks, not a few
    per message: per-message records interleave the heap with long-lived small objects at every
    reloaded turn (issue 12's soak)."""
    model = ModelConfig(id="m", provider=ProviderKind.OPENAI_CHAT, model="x", base_url="http://127.0.0.1:9/v1")
    kept: dict[int, int] = {}
    for count in (50, 500):
        adapter = make_provider(model, "", streaming_client())
        adapter.encode_request(ModelRequest(model="x", system="s", messages=Stored("warm-up", count)))  # first-use costs
        history = Stored("conversation", count)
        gc.collect()
        before = sys.getallocatedblocks()
        adapter.encode_request(ModelRequest(model="x", system="s", messages=history))
        gc.collect()
        kept[count] = sys.getallocatedblocks() - before  # give or take tens of blocks other tests left to free
    per_message = (kept[500] - kept[50]) / 450
    assert per_message < 0.5, f"the adapter keeps {kept[50]} blocks for 50 messages, {kept[500]} for 500"


async def test_a_history_read_again_holds_a_few_objects_whatever_its_length(tmp_path: Path) -> None:
    """A conversation's runtime let go and made again reads its history from the store: what it
    holds of it until its next projection is a few buffers, not an object or more per entry.

    Counted as what letting the history go frees, with no await in between: the block count is the
    whole process's, and a wait for the store let other tests' leftovers free ~1,500 blocks inside
    the window once. The median of three reads takes out a thread that frees in between."""
    store = await Store.open(tmp_path / "history.db")
    try:
        for count in (50, 500):
            store.upsert_conversation(ConversationRecord(f"c{count}", 1_000, 1_000))
            await store.append_events(f"c{count}", [
                NewEvent(event_id=f"assistant:run-{i // 4}:{i + 1}", kind=EntryKind.ASSISTANT.value, run_id=f"run-{i // 4}",
                         payload=encode_entry(EntryKind.ASSISTANT, Message("assistant", [TextPart(f"word {i}")])))
                for i in range(count)
            ])

        async def held_by_a_history_read_again(count: int) -> int:
            loaded = await ConversationRecords(f"c{count}", store).load()
            history = ConversationHistory(f"c{count}")
            history.restore(loaded.entries)
            assert len(history) == count and history.has("assistant:run-0:1") and history.next_seq == count + 1
            del loaded
            gc.collect()
            holding = sys.getallocatedblocks()
            del history
            gc.collect()
            return holding - sys.getallocatedblocks()

        held = {count: sorted([await held_by_a_history_read_again(count) for _ in range(3)])[1] for count in (50, 500)}
        per_entry = (held[500] - held[50]) / 450
        assert per_entry < 0.5, f"a history read again holds {held[50]} blocks with 50 entries, {held[500]} with 500"
    finally:
        await store.close()
