"""RootBlobs: checkpoint blobs built once per message, identical to building them afresh."""
from __future__ import annotations

import hashlib
import json
import tracemalloc

from cursor_byok.conversation.history import RootBlobs
from cursor_byok.run import Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart


def history(n: int) -> list[Message]:
    out: list[Message] = [Message("user", [TextPart("start")])]
    for i in range(n):
        out.append(Message("assistant", [ThinkingPart("hmm", None), ToolCallPart(f"c{i}", "Read", '{"path": "a.py"}')]))
        out.append(Message("tool", [ToolResultPart(f"c{i}", "Read", f"content {i}", False)]))
    return out


def test_blobs_match_a_fresh_build_and_ids_are_their_sha256() -> None:
    messages = history(3)
    built = [(root.id, root.data()) for root in RootBlobs().build("system prompt", messages, "model-a")]
    assert len(built) == 1 + len(messages)
    for bid, data in built:
        assert bid == hashlib.sha256(data).digest()
    roles = [json.loads(data)["role"] for _, data in built]
    assert roles == ["system", "user"] + ["assistant", "tool"] * 3


def test_an_appended_history_reuses_every_earlier_blob() -> None:
    blobs = RootBlobs()
    messages = history(2)
    first = blobs.build("sys", messages, "m")
    grown = [*messages, Message("user", [TextPart("more")])]
    second = blobs.build("sys", grown, "m")
    assert all(a is b for a, b in zip(first, second))  # the same blobs: not rebuilt
    assert second[: len(first)] == first and len(second) == len(first) + 1
    assert second == RootBlobs().build("sys", grown, "m")


def test_a_new_model_name_or_a_compacted_history_is_rebuilt() -> None:
    blobs = RootBlobs()
    messages = history(1)
    blobs.build("sys", messages, "m1")
    assert blobs.build("sys", messages, "m2") == RootBlobs().build("sys", messages, "m2")  # reasoning names the model
    compacted = [Message("user", [TextPart("summary")]), *messages[2:]]  # other objects at each position
    assert blobs.build("sys", compacted, "m2") == RootBlobs().build("sys", compacted, "m2")


def test_a_conversation_keeps_ids_not_a_second_copy_of_its_history() -> None:
    """Between checkpoints the blobs' bytes are not kept: the history holds the messages already,
    and a client that lacks a blob gets it encoded again."""
    messages = [Message("user" if i % 2 == 0 else "assistant", [TextPart(f"{i} " + "word " * 4_000)]) for i in range(50)]
    history_bytes = sum(len(m.parts[0].text) for m in messages)  # type: ignore[union-attr]
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
