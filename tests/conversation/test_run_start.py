"""A run request starts its run on the caller's path: when nothing is queued ahead of it in its
conversation, the run is modeling and its model request waits only for the input's commit by the
time the append's hand-over returns; with a command queued ahead, it waits behind it, in order."""
from __future__ import annotations

import asyncio
import re
import uuid

import pytest

from cursor_byok.conversation import OutputStream
from cursor_byok.conversation.commands import Reader
from cursor_byok.conversation.state import Phase
from cursor_byok.run import start_now
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import StreamLog, run_request
from tests.harness.inprocess import MODEL, Rig
from tests.harness.stored_ids import snapshots_cannot_tell


async def answered_turn(rig: Rig, provider: FakeProviderServer, conv: str, text: str) -> StreamLog:
    provider.enqueue(OPENAI_CHAT.text([f"answer to {text}"]))
    log = await rig.ide().turn(run_request(text, model=MODEL, conversation_id=conv))
    assert log.terminal is None and log.text == f"answer to {text}"
    return log


async def test_a_run_request_starts_its_run_in_the_callers_step(rig: Rig, provider: FakeProviderServer) -> None:
    conv = uuid.uuid4().hex
    await answered_turn(rig, provider, conv, "first")  # the history is loaded now
    provider.enqueue(OPENAI_CHAT.text(["second answer"]))
    rid = uuid.uuid4().hex
    await rig.service.resolve(rid)
    rig.service.open_run(rid, run_request("second", model=MODEL, conversation_id=conv).run_request)
    runtime = rig.runtime(conv)
    assert runtime is not None and runtime.run is not None
    # No pass of the event loop since: prepared, and the engine has taken the input's pending write
    # (its request is built and waits for that commit).
    assert runtime.phase is Phase.MODELING and runtime.run.input_stored is None
    log = await rig.ide().stream(rid, StreamLog())
    assert log.terminal is None and log.text == "second answer"
    assert "second" in provider.requests[-1].body.decode()


async def test_a_run_request_waits_behind_a_command_queued_before_it(rig: Rig, provider: FakeProviderServer) -> None:
    conv = uuid.uuid4().hex
    await answered_turn(rig, provider, conv, "first")
    runtime = rig.runtime(conv)
    assert runtime is not None
    provider.enqueue(OPENAI_CHAT.text(["second answer"]))
    rid = uuid.uuid4().hex
    await rig.service.resolve(rid)
    runtime.post(Reader("someone-else", False, OutputStream("someone-else", 0)))  # any command, not yet taken
    rig.service.open_run(rid, run_request("second", model=MODEL, conversation_id=conv).run_request)
    assert runtime.phase is Phase.IDLE and runtime.run is None  # queued behind it, not taken first
    log = await asyncio.wait_for(rig.ide().stream(rid, StreamLog()), 10)
    assert log.terminal is None and log.text == "second answer"


async def test_a_reader_attaching_is_taken_in_the_callers_step(rig: Rig, provider: FakeProviderServer) -> None:
    """A RunSSE that comes for its stream is a command the runtime takes at once when it is free,
    not one more wake-up of its task per run start (here: the resumed run waiting for its IDE
    hears of it before any pass of the event loop)."""
    conv = uuid.uuid4().hex
    await answered_turn(rig, provider, conv, "first")
    provider.enqueue(OPENAI_CHAT.text(["second answer"]))
    rid = uuid.uuid4().hex
    await rig.service.resolve(rid)
    rig.service.open_run(rid, run_request("second", model=MODEL, conversation_id=conv).run_request, resumed=True)
    runtime = rig.runtime(conv)
    assert runtime is not None and runtime.run is not None
    claim = runtime.run.claim
    assert claim is not None and not claim.done()
    rig.service.attach(rid, rig.service.hub.get(rid))
    assert claim.done() and claim.result() is True
    log = await asyncio.wait_for(rig.ide().stream(rid, StreamLog()), 10)
    assert log.terminal is None and log.text == "second answer"


async def test_a_new_conversations_turn_needs_no_task_of_its_runtime(rig: Rig, provider: FakeProviderServer) -> None:
    """Its run request, the end of its prepare (after the history read), its RunSSE, the end of
    its engine and of its finalize window are each taken in the step they come in: no task of the
    runtime is made or woken for them. One is made once a command has to wait in its queue."""
    loop = asyncio.get_running_loop()
    made: list[str] = []
    factory = loop.get_task_factory()

    def recording(loop: asyncio.AbstractEventLoop, coro, **kwargs):  # type: ignore[no-untyped-def]
        made.append(getattr(coro, "__qualname__", ""))
        return asyncio.Task(coro, loop=loop, **kwargs)

    conv = uuid.uuid4().hex
    loop.set_task_factory(recording)
    try:
        await answered_turn(rig, provider, conv, "first")
        await answered_turn(rig, provider, conv, "second")  # its prepare ends while its request is taken
        await asyncio.sleep(0.05)  # past the finalize window
    finally:
        loop.set_task_factory(factory)
    runtime = rig.runtime(conv)
    assert runtime is not None and runtime.running and runtime.phase is Phase.IDLE
    assert made and "ConversationRuntime._loop" not in made
    runtime.post(Reader("someone-else", False, OutputStream("someone-else", 0)))  # a command that waits in the queue gets its task
    await asyncio.sleep(0)
    await answered_turn(rig, provider, conv, "third")


def test_run_ids_are_128_random_bits_in_hex() -> None:
    """Every run start makes one: `run-` and 32 lowercase hex digits, never the same twice."""
    from cursor_byok.conversation import new_run_id

    ids = {new_run_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(re.fullmatch(r"run-[0-9a-f]{32}", run_id) for run_id in ids)


async def test_a_new_conversations_history_read_is_asked_for_in_the_run_requests_step(
    rig: Rig, provider: FakeProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a store thread is busy and the snapshot of stored ids cannot tell (as before it is
    taken, on a thread after the store opens: held so here, not raced), the loop cannot tell a new
    conversation has nothing stored: the read goes to the reader thread, and it is asked for at
    once, not from a task a pass later."""
    store = rig.store
    assert store is not None
    snapshots_cannot_tell(monkeypatch)
    asked: list[str] = []
    load = store.load_conversation

    def recording(conversation_id: str, *args: object) -> object:
        asked.append(conversation_id)
        return load(conversation_id, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "load_conversation", recording)
    conv, rid = uuid.uuid4().hex, uuid.uuid4().hex
    await rig.service.resolve(rid)
    reading = start_now(store.latest_checkpoint(conv))  # a store thread is busy
    provider.enqueue(OPENAI_CHAT.text(["an answer"]))
    rig.service.open_run(rid, run_request("a question", model=MODEL, conversation_id=conv).run_request)
    assert asked == [conv]
    log = await asyncio.wait_for(rig.ide().stream(rid, StreamLog()), 10)
    await reading
    assert log.terminal is None and log.text == "an answer"
