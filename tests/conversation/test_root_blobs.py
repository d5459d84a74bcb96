"""RootBlobs: checkpoint blobs built once per message, identical to building them afresh."""
from __future__ import annotations

import hashlib
import json
import tracemalloc

import msgspec

from cursor_byok.conversation.history import ROOT_SIZE, EntryKind, HistoryEntry, Projection, RootBlobs, Window, encode_entry, root_ids
from cursor_byok.run import Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart

KINDS = {"user": EntryKind.USER, "assistant": EntryKind.ASSISTANT, "tool": EntryKind.TOOL_RESULTS}


def projection(messages: list[Message], *, stored: bool = False) -> Projection:
    """The messages as a history's projection: live entries, or entries read from the store."""
    entries = []
    for i, m in enumerate(messages):
        kind = KINDS[m.role]
        entries.append(HistoryEntry(i + 1, f"e{i}", kind, "r", payload=encode_entry(kind, m)) if stored else HistoryEntry(i + 1, f"e{i}", kind, "r", m))
    return Projection("c", entries)


def history(n: int, *, stored: bool = False) -> Projection:
    out: list[Message] = [Message("user", [TextPart("start")])]
    for i in range(n):
        out.append(Message("assistant", [ThinkingPart("hmm", None), ToolCallPart(f"c{i}", "Read", '{"path": "a.py"}')]))
        out.append(Message("tool", [ToolResultPart(f"c{i}", "Read", f"content {i}", False)]))
    return projection(out, stored=stored)


def build_blobs(blobs: RootBlobs, system: str, messages: Projection, model: str) -> list[tuple[bytes, bytes]]:
    return [(bid, blobs.blob(i).data()) for i, bid in enumerate(root_ids(blobs.build(system, messages, model)))]


def test_blobs_match_a_fresh_build_and_ids_are_their_sha256() -> None:
    messages = history(3)
    built = build_blobs(RootBlobs(), "system prompt", messages, "model-a")
    assert built == build_blobs(RootBlobs(), "system prompt", history(3, stored=True), "model-a")  # read from the store: the same
    assert len(built) == 1 + len(messages)
    for bid, data in built:
        assert bid == hashlib.sha256(data).digest()
    roles = [json.loads(data)["role"] for _, data in built]
    assert roles == ["system", "user"] + ["assistant", "tool"] * 3


def test_an_appended_history_reuses_every_earlier_blob() -> None:
    blobs = RootBlobs()
    messages = history(2)
    first = blobs.build("sys", messages, "m")
    appended = messages.entries.added  # the history's entries, one more appended to them
    appended.append(HistoryEntry(9, "more", EntryKind.USER, "r", Message("user", [TextPart("more")])))
    grown = Projection("c", Window(appended))
    fresh = RootBlobs().build("sys", Projection("c", list(grown.entries)), "m")
    for entry in messages.entries:  # read again, the earlier entries would give other blobs now
        entry._message = Message("user", [TextPart("not what was built")])
    second = blobs.build("sys", grown, "m")
    assert second.startswith(first) and len(root_ids(second)) == len(root_ids(first)) + 1  # the same blobs: not rebuilt
    assert blobs.kept == len(root_ids(first)) - 1  # every message's
    assert second == fresh


def test_a_new_model_name_or_a_compacted_history_is_rebuilt() -> None:
    blobs = RootBlobs()
    messages = history(1)
    blobs.build("sys", messages, "m1")
    assert blobs.build("sys", messages, "m2") == RootBlobs().build("sys", messages, "m2")  # reasoning names the model
    compacted = Projection("c", [HistoryEntry(9, "summary", EntryKind.COMPACTION, "r", Message("user", [TextPart("summary")])), *messages.entries[2:]])  # other entries at each position
    assert blobs.build("sys", compacted, "m2") == RootBlobs().build("sys", compacted, "m2")


def test_a_conversation_keeps_ids_not_a_second_copy_of_its_history() -> None:
    """Between checkpoints the blobs' bytes are not kept: the history holds the messages already,
    and a client that lacks a blob gets it encoded again."""
    plain = [Message("user" if i % 2 == 0 else "assistant", [TextPart(f"{i} " + "word " * 4_000)]) for i in range(50)]
    history_bytes = sum(len(m.parts[0].text) for m in plain)  # type: ignore[union-attr]
    messages = projection(plain)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        blobs = RootBlobs()
        built = blobs.build("sys", messages, "m")
        del built
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < history_bytes // 20, f"{held} bytes held for a history of {history_bytes}"


def test_a_seeded_first_build_takes_the_stored_ids_only_for_the_messages_they_are_of() -> None:
    """A stored checkpoint's roots and their `RootSeed` serve a reloaded history's first build for
    the messages it still starts with, on the same model; otherwise every root is built afresh.
    Either way the roots are a fresh build's."""
    before = RootBlobs()
    stored = before.build("sys", history(3), "m")
    seed = before.last_seed()
    assert (seed.count, seed.first, seed.last, seed.system) == (7, "e0", "e6", True)
    poisoned = stored[:-ROOT_SIZE] + stored[-ROOT_SIZE:-1] + b"X"  # a seeded id is taken as stored, never rebuilt
    compacted = Projection("c", [HistoryEntry(9, "summary", EntryKind.COMPACTION, "r", Message("user", [TextPart("summary")])), *history(3).entries[1:]])
    cases = [  # (messages read again, model, how many roots the seed serves)
        (history(5, stored=True), "m", 7), (history(3, stored=True), "m", 7),
        (history(5, stored=True), "other model", 0), (history(2, stored=True), "m", 0), (compacted, "m", 0),
    ]
    for messages, model, served in cases:
        seeded = RootBlobs()
        seeded.seed(seed, poisoned)
        roots = seeded.build("sys", messages, model)
        fresh = RootBlobs().build("sys", messages, model)
        assert seeded.kept == served
        assert roots == (poisoned + fresh[len(poisoned):] if served else fresh), (model, served)
    late = RootBlobs()
    late.build("sys", history(3), "m")
    late.seed(seed, poisoned)  # after a build: ignored (the build is the newer)
    assert late.build("sys", history(4), "m") == RootBlobs().build("sys", history(4), "m")


def test_a_seed_from_another_root_encoding_is_not_taken() -> None:
    """Roots stored by a build that encoded messages differently name other bytes: such a seed is
    never taken, the roots are built afresh."""
    before = RootBlobs()
    stored = before.build("sys", history(3), "m")
    older = msgspec.structs.replace(before.last_seed(), encoding=before.last_seed().encoding - 1)
    seeded = RootBlobs()
    seeded.seed(older, stored)
    assert seeded.build("sys", history(4, stored=True), "m") == RootBlobs().build("sys", history(4, stored=True), "m")
    assert seeded.kept == 0
