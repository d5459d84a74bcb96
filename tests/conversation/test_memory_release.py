"""What a finished turn holds in memory goes when the turn is over, and a conversation's state when
its idle runtime is evicted: at once, by reference counting, not whenever the cycle collector next
makes a full pass (issue 12's soak: resident memory grew with the conversations' length).

A full pass is rare in a busy server (it waits until the long-lived objects have grown by a
quarter), so what is left to it piles up meanwhile: each evicted conversation's whole history, each
finished run with its run request, each provider request with its body (the history again). The
heap then grows to hold it all and keeps that size after the collector has freed it."""
from __future__ import annotations

import asyncio
import gc
import time
import uuid
import weakref
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conversation.test_tool_state import call
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import StreamLog, cancel_message, run_request
from tests.harness.inprocess import MODEL, Rig

# Whose objects count: ours, the HTTP client's (a provider request holds its whole body), and
# futures (a checkpoint's blob acks).
WATCHED = ("cursor_byok.", "httpx.")


@contextmanager
def no_cycle_collector() -> Iterator[list[object]]:
    """The collector off; on leaving, what it would have freed is collected into the list."""
    gc.collect()
    gc.disable()
    garbage: list[object] = []
    try:
        yield garbage
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        garbage += gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def kinds(objects: list[object]) -> Counter[str]:
    return Counter(
        f"{type(o).__module__}.{type(o).__qualname__}" for o in objects if type(o).__module__.startswith(WATCHED) or isinstance(o, asyncio.Future)
    )


async def test_finished_turns_and_an_evicted_conversation_leave_nothing_for_the_cycle_collector(rig: Rig, provider: FakeProviderServer, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("the notes\n")
    slow = OPENAI_CHAT.text(["tick "] * 50)
    slow.chunk_delay = 0.05
    provider.enqueue(
        OPENAI_CHAT.tool_calls([call("c1", "Read", path=str(tmp_path / "notes.txt"))]),
        OPENAI_CHAT.text(["read it"]),
        slow,
        OPENAI_CHAT.text(["and again"]),
    )
    ide = rig.ide(tmp_path)
    conv = uuid.uuid4().hex
    rig.service.services.blob_ack_timeout = 0.2

    async def cancel_once_streaming(request_id: str, log: StreamLog) -> None:
        while not log.text:
            await asyncio.sleep(0.005)
        await ide.append(request_id, cancel_message())

    with no_cycle_collector() as garbage:
        first = await ide.turn(run_request("read the notes", model=MODEL, conversation_id=conv, workspace=str(tmp_path)))
        cut = await ide.turn(run_request("count", model=MODEL, conversation_id=conv), during=cancel_once_streaming)
        ide.hold_kv = True  # the IDE does not ack this turn's checkpoint blobs in time
        last = await ide.turn(run_request("once more", model=MODEL, conversation_id=conv, workspace=str(tmp_path)))
        assert (first.text, last.text) == ("read it", "and again")
        assert cut.terminal is not None and cut.terminal.code == "canceled"
        assert "conversation_checkpoint_update" in first.kinds()
        assert "conversation_checkpoint_update" not in last.kinds()  # not sent: its blobs were not acked
        runtime = rig.runtime(conv)
        assert runtime is not None
        left = {"runtime": weakref.ref(runtime), "history": weakref.ref(runtime.data.history)}
        del runtime
        rig.service.hub.sweep(time.monotonic() + 1)  # the finished streams' retention is over
        assert rig.service.evict_idle(0.0) == 1
        for _ in range(3):
            await asyncio.sleep(0)  # the evicted runtime's task ends
        alive = [name for name, ref in left.items() if ref() is not None]
    assert not kinds(garbage), kinds(garbage)
    assert not alive


async def test_a_finished_stream_holds_the_turn_once_and_replays_it_whole(rig: Rig, provider: FakeProviderServer) -> None:
    """A finished stream is retained for a RunSSE that reads it again. Its checkpoint's root blobs
    are the history's own messages encoded: the stream keeps those messages to encode them again,
    not their bytes a second time (issue 13: a 2,000-word turn was held five times over)."""
    words = " ".join(f"word{n}" for n in range(4000))
    provider.enqueue(OPENAI_CHAT.text(["noted"]))
    ide = rig.ide()
    request_id = uuid.uuid4().hex
    first = await ide.turn(run_request(words, model=MODEL, conversation_id=uuid.uuid4().hex), request_id=request_id)
    assert first.text == "noted" and first.terminal is None
    output = rig.service.hub.get(request_id)
    assert output is not None and output.closed and output.packed is not None
    kept = output.packed.data  # a finished stream's frames held as bytes (its rebuilt ones not among them)
    # Once: the turn's user message blob (a protobuf only the run request held). Not again as the
    # root blob of the history's user message.
    assert kept.count(words.encode()) == 1
    again = await ide.stream(request_id, StreamLog())
    assert again.raw == first.raw


async def test_idle_conversations_keep_their_histories_in_memory_within_a_budget(rig: Rig, provider: FakeProviderServer) -> None:
    """However many conversations were seen, the idle ones in memory hold at most the budget's
    worth of history text (the least recently active leave first); a conversation that left takes
    its next turn with its whole history, read again from the database."""
    turn_text = "lorem ipsum " * 4_000  # 48 KB
    conversations = [uuid.uuid4().hex for _ in range(4)]
    ide = rig.ide()
    for n, conv in enumerate(conversations):
        provider.enqueue(OPENAI_CHAT.text([f"answer {n}"]))
        assert (await ide.turn(run_request(f"{n}: {turn_text}", model=MODEL, conversation_id=conv))).text == f"answer {n}"
    assert all(rig.runtime(conv) is not None for conv in conversations)
    assert rig.service.evict_idle(600.0, history_bytes=2 * len(turn_text) + 1_000) == 2  # nothing is idle that long
    assert [rig.runtime(conv) is not None for conv in conversations] == [False, False, True, True]
    provider.enqueue(OPENAI_CHAT.text(["again"]))
    assert (await ide.turn(run_request("go on", model=MODEL, conversation_id=conversations[0]))).text == "again"
    sent = [m["content"] for m in provider.requests[-1].json()["messages"] if m["role"] in ("user", "assistant")]
    assert turn_text.strip() in sent[0] and sent[1] == "answer 0" and "go on" in sent[2]


async def test_the_conversation_in_use_keeps_its_history_however_long(rig: Rig, provider: FakeProviderServer) -> None:
    """A conversation longer than the whole budget stays in memory while it is the most recently
    active: otherwise every turn of the user's one long conversation would read its whole history
    from the database again."""
    long_text = "lorem ipsum " * 4_000  # 48 KB
    conv = uuid.uuid4().hex
    ide = rig.ide()
    provider.enqueue(OPENAI_CHAT.text(["noted"]))
    assert (await ide.turn(run_request(long_text, model=MODEL, conversation_id=conv))).text == "noted"
    assert rig.service.evict_idle(600.0, history_bytes=1_000) == 0
    assert rig.runtime(conv) is not None
