"""A turn of a conversation whose runtime was let go (idle, or a restart) reads its history again:
what that turn builds must not grow with the history (issue 12's soak: every such turn decoded the
whole history into small objects, encoded and hashed every message again, and the heap kept the
room that peak took).

Counted, not timed: the most memory blocks the process holds at once during the turn (sampled at
every call and return), above what it held before the turn, at two history lengths. Each stored
entry may cost its own record (a few blocks: the entry, its ids, its stored bytes, its digests),
not its decoded message, its provider encoding and its checkpoint blob.
"""
from __future__ import annotations

import gc
import json
import sys
import uuid
from pathlib import Path

from cursor_byok.conversation.history import EntryKind, HistoryEntry, canonical, encode_entry
from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.run import ImagePart, Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, RecordedRequest, Reply
from tests.harness.ide import StreamLog, run_request
from tests.harness.inprocess import MODEL, InProcessIDE, Rig

BLOCKS_PER_ENTRY = 8  # what one stored entry may hold at a reloaded turn's peak


def answer(request: RecordedRequest) -> Reply:
    """`turn N tools` gets a Read of a file, then (with the result) `answer N`; others `answer N`."""
    messages = request.json()["messages"]
    text = json.dumps([m["content"] for m in messages if m["role"] == "user"][-1])
    n = text.split("turn ")[-1].split(" ")[0]
    if messages[-1]["role"] == "user" and "tools" in text:
        return OPENAI_CHAT.tool_calls([CallSpec(f"c{n}_{uuid.uuid4().hex[:6]}", "Read", [json.dumps({"path": "notes.txt"})])])
    return OPENAI_CHAT.text([f"answer {n}"])


class Conversation:
    """The IDE's side of one conversation: like Cursor, it sends its last checkpoint back."""

    def __init__(self, ide: InProcessIDE, workspace: Path) -> None:
        self.ide, self.workspace = ide, workspace
        self.conv = uuid.uuid4().hex
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
    for length in (10, 40):
        while conversation.turns < length:
            await conversation.turn()
        peaks[len(await rig.history(conversation.conv))] = await reloaded_turn_peak(rig, conversation)
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
