"""Loading a conversation's history (issue 20, scenario 1): a Stop or a failed read while the
history loads never leaves the runtime with an empty history it takes for the real one, and
hydrating from the client's checkpoint never writes a second copy of a conversation we hold."""
from __future__ import annotations

import asyncio
import sqlite3
import uuid

from cursor_byok.conversation.history import EntryKind
from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import StreamLog, cancel_message, run_request
from tests.harness.inprocess import MODEL, InProcessIDE, Rig


def checkpoint_of(log: StreamLog) -> pb.ConversationStateStructure:
    return [m.conversation_checkpoint_update for m in log.messages if m.WhichOneof("message") == "conversation_checkpoint_update"][-1]


async def first_turn(ide: InProcessIDE, provider: FakeProviderServer, conv: str) -> StreamLog:
    provider.enqueue(OPENAI_CHAT.text(["bravo answer"]))
    log = await ide.turn(run_request("alpha question", model=MODEL, conversation_id=conv, message_id="m-alpha"))
    assert log.terminal is None and log.text == "bravo answer"
    return log


async def stopped_early(ide: InProcessIDE, conv: str, text: str, ticks: int) -> StreamLog:
    """A turn whose Stop reaches the runtime `ticks` event-loop passes after the run request."""
    rid = uuid.uuid4().hex
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    assert (await ide.append(rid, run_request(text, model=MODEL, conversation_id=conv))).status_code == 200
    for _ in range(ticks):
        await asyncio.sleep(0)
    await ide.append(rid, cancel_message())
    await asyncio.wait_for(reader, 10)
    assert log.terminals == 1
    return log


async def rename_table(rig: Rig, old: str, new: str) -> None:
    """Change the schema from outside the server (off the event loop: the store may be writing)."""
    assert rig.store is not None
    await rig.store.flush()

    def rename() -> None:
        with sqlite3.connect(rig.path, timeout=30) as outside:
            outside.execute(f"ALTER TABLE {old} RENAME TO {new}")

    await asyncio.to_thread(rename)


def users(history: list[tuple[str, EntryKind, str]], needle: str) -> list[str]:
    return [event_id for event_id, kind, text in history if kind is EntryKind.USER and needle in text]


async def test_stop_while_the_history_loads_keeps_the_history(rig: Rig, provider: FakeProviderServer) -> None:
    """The first turn after an idle eviction (or a restart) reads the history; a Stop at any moment of
    that read must not leave the runtime believing the conversation is empty."""
    ide = rig.ide()
    conv = uuid.uuid4().hex
    first = await first_turn(ide, provider, conv)
    provider.respond_with(lambda request: OPENAI_CHAT.text(["fine"]))
    for ticks in range(8):
        rig.service.evict_idle(-1)  # a fresh runtime: its first run reads the history again
        await stopped_early(ide, conv, f"stopped {ticks}", ticks)
        check = run_request(f"check {ticks}", model=MODEL, conversation_id=conv)
        check.run_request.conversation_state.CopyFrom(checkpoint_of(first))  # what the IDE sends
        log = await ide.turn(check)
        assert log.terminal is None and log.text == "fine"
        sent = provider.requests[-1].body.decode()
        assert sent.count("alpha question") == 1 and sent.count("bravo answer") == 1, (ticks, sent)
    history = await rig.history(conv)
    assert users(history, "alpha question") == ["user:m-alpha"]  # never hydrated a second copy
    assert not [event_id for event_id, _, _ in history if event_id.startswith("hydrated:")]


async def test_a_failed_history_read_is_retried_by_the_next_turn(rig: Rig, provider: FakeProviderServer) -> None:
    ide = rig.ide()
    conv = uuid.uuid4().hex
    first = await first_turn(ide, provider, conv)
    rig.service.evict_idle(-1)
    await rename_table(rig, "history_events", "history_events_away")  # reads now fail
    failed = await ide.turn(run_request("during the fault", model=MODEL, conversation_id=conv))
    assert failed.terminals == 1 and failed.terminal is not None and failed.terminal.code == "unavailable"
    assert "history" in failed.terminal.message
    await rename_table(rig, "history_events_away", "history_events")
    provider.enqueue(OPENAI_CHAT.text(["after the fault"]))
    check = run_request("after it", model=MODEL, conversation_id=conv)
    check.run_request.conversation_state.CopyFrom(checkpoint_of(first))
    log = await ide.turn(check)
    assert log.terminal is None and log.text == "after the fault"
    sent = provider.requests[-1].body.decode()
    assert sent.count("alpha question") == 1 and sent.count("bravo answer") == 1
    assert users(await rig.history(conv), "alpha question") == ["user:m-alpha"]


async def test_hydration_from_the_client_checkpoint_is_all_or_nothing(rig: Rig, provider: FakeProviderServer, tmp_path) -> None:
    """A new database: the client's checkpoint rebuilds the history. A blob the client cannot give
    fails the run and leaves nothing behind, so the retry hydrates once, not on top of a half."""
    ide = rig.ide()
    conv = uuid.uuid4().hex
    first = await first_turn(ide, provider, conv)
    blobs = dict(ide.blobs)
    state = checkpoint_of(first)
    await rig.close()
    rig.path = tmp_path / "new.db"
    await rig.start()
    ide = rig.ide()
    missing = state.root_prompt_messages_json[-1]
    ide.blobs = {k: v for k, v in blobs.items() if k != missing}  # one root blob missing
    attempt = run_request("foxtrot question", model=MODEL, conversation_id=conv, message_id="m-fox")
    attempt.run_request.conversation_state.CopyFrom(state)
    failed = await ide.turn(attempt)
    assert failed.terminal is not None and failed.terminal.code == "not_found"
    assert await rig.history(conv) == []
    ide.blobs = dict(blobs)
    provider.enqueue(OPENAI_CHAT.text(["hydrated answer"]))
    log = await ide.turn(attempt)
    assert log.terminal is None and log.text == "hydrated answer"
    history = await rig.history(conv)
    assert len(users(history, "alpha question")) == 1 and len(users(history, "foxtrot question")) == 1
