"""The inbox's append path: admit → journal → hand over. What admission refuses, or what could not be
journaled, leaves nothing behind (no row, no change to the order), so a resend is taken afresh and
no later start replays it."""
from __future__ import annotations

import asyncio
import sqlite3
import uuid

import pytest

from cursor_byok import hotpath
from cursor_byok.conversation import AppendOrder
from cursor_byok.protocol import ConnectError, client_message
from cursor_byok.store import StoreClosedError
from tests.fakes import OPENAI_CHAT
from tests.harness.ide import heartbeat_message, run_request
from tests.harness.inprocess import MODEL, Rig


def appended(request_id: str, seqno: int, message) -> object:  # noqa: ANN001 - a protobuf message
    return client_message(request_id, seqno, message.SerializeToString())


async def test_a_seqno0_whose_journal_write_failed_is_taken_afresh_when_sent_again(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store refused the first try (it was closing): the IDE got unavailable and sends it again.
    The resend must open the run, not be answered as a duplicate of an append nothing took."""
    assert rig.store is not None
    record = rig.store.record_append
    failures = [StoreClosedError("the store is closing")]

    def flaky(*args: object) -> object:
        if failures:
            raise failures.pop()
        return record(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(rig.store, "record_append", flaky)
    rig.provider.enqueue(OPENAI_CHAT.text(["opened"]))
    rid = uuid.uuid4().hex
    first = appended(rid, 0, run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
    order = AppendOrder(rid)
    intake = rig.service.appends
    await rig.service.resolve(rid)
    with pytest.raises(ConnectError) as refused:
        intake.take(order, first, None)
    assert refused.value.code == "unavailable"
    assert rig.service.hub.get(rid) is None and order.seqno0 is None  # nothing of it was kept
    await intake.stored(intake.take(order, first, None))
    assert rig.service.hub.get(rid) is not None  # the run opened


def test_admission_refuses_without_changing_the_order() -> None:
    order = AppendOrder("r", window=8)
    seqno0 = appended("r", 0, run_request("hi", model=MODEL, conversation_id="c"))
    order.take(seqno0, *order.admit(seqno0))
    beat = appended("r", 1, heartbeat_message())
    assert len(order.take(beat, *order.admit(beat))) == 1
    far = appended("r", 10, heartbeat_message())  # next is 2: [2, 10) is the window
    with pytest.raises(hotpath.SeqnoOutOfWindow):
        order.admit(far)
    other = run_request("other", model=MODEL, conversation_id="c")
    with pytest.raises(ConnectError) as reused:
        order.admit(appended("r", 1, other))
    assert reused.value.code == "invalid_argument" and "seqno 1" in reused.value.message
    assert order.next_seqno == 2 and order.buffer.held == 0
    assert order.admit(appended("r", 1, heartbeat_message()))[0].value == "resend"


async def test_a_resumed_runs_recovery_clock_starts_when_the_server_serves(tmp_path, provider, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001 - fixtures
    """While a start still resumes other streams no IDE can come back: a resumed run's recovery
    wait (here: none at all) runs out only once the server serves, not while it starts."""
    monkeypatch.setenv("CURSOR_BYOK_STRICT_PREFIX", "1")
    rig = await Rig(tmp_path, provider, recovery_wait=0.0).start()
    try:
        slow = OPENAI_CHAT.text(["zulu "] * 40)
        slow.chunk_delay = 0.05  # still answering when the server stops
        provider.enqueue(slow)
        rid, conversation = uuid.uuid4().hex, uuid.uuid4().hex
        await rig.service.resolve(rid)
        order = AppendOrder(rid)
        await rig.service.appends.stored(rig.service.appends.take(order, appended(rid, 0, run_request("hi", model=MODEL, conversation_id=conversation)), None))
        await rig.restart()  # the stream was cut: its run request stays journaled
        rig.service.services.serving = False  # as a server's start: not serving until it says so
        [resumed] = await rig.service.appends.resume_journaled(lambda _: True)
        runtime = rig.runtime(conversation)
        assert resumed.request_id == rid and runtime is not None and runtime.run is not None
        claim = runtime.run.claim
        assert claim is not None
        for _ in range(20):  # let every ready callback run: a clock already started would fire now
            await asyncio.sleep(0)
        assert not claim.done()
        rig.service.services.begin_serving()
        assert await asyncio.wait_for(claim, 5) is False  # then it runs: nobody came back
    finally:
        await rig.close()


async def test_a_journal_that_cannot_be_read_resumes_nothing_and_the_start_goes_on(rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    assert rig.store is not None

    async def unreadable() -> list[object]:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(rig.store, "inbound_streams", unreadable)
    assert await rig.service.appends.resume_journaled(lambda _: True) == []
    assert [r.levelname for r in caplog.records if "journal" in r.getMessage()] == ["WARNING"]
