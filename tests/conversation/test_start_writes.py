"""What a turn start writes before the model is called, counted with a trace callback on the real
store: one transaction holding the append's journal row and the turn's input (the input's only
durable write before the model sees it), for a new conversation as for a follow-up. The run's
records (its run row, its request's binding, the conversation's row when it exists already) are not
in it: they commit after the request has gone, and are stored when the turn is over."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.fakes.server import RecordedRequest, Reply
from tests.harness.ide import run_request
from tests.harness.inprocess import MODEL, InProcessIDE, Reply as AppendReply, Rig


class JournalingIDE(InProcessIDE):
    """As the gateway hands an append over: its journal row queued first, in the same step."""

    async def append(self, request_id: str, message: pb.AgentClientMessage, **kw: object) -> AppendReply:  # type: ignore[override]
        assert self.rig.store is not None
        await self.rig.service.resolve(request_id)
        self.rig.store.record_append(request_id, "", self.seqnos.get(request_id, 0), message.SerializeToString())
        return await super().append(request_id, message, **kw)


def write_transactions(statements: list[str]) -> list[list[str]]:
    """The write transactions in `statements` (each its statements between BEGIN IMMEDIATE and COMMIT)."""
    out: list[list[str]] = []
    current: list[str] | None = None
    for sql in statements:
        if sql == "BEGIN IMMEDIATE":
            current = []
        elif sql == "COMMIT" and current is not None:
            out.append(current)
            current = None
        elif current is not None:
            current.append(" ".join(sql.split()[:3]))
    return out


@pytest.fixture
async def traced(tmp_path: Path, provider: FakeProviderServer) -> tuple[Rig, list[str]]:
    statements: list[str] = []
    rig = await Rig(tmp_path, provider, store_options={"trace": statements.append}).start()
    yield rig, statements
    await rig.close()


async def start(rig: Rig, provider: FakeProviderServer, statements: list[str], conv: str) -> list[list[str]]:
    """One turn; the write transactions traced before the provider had its request."""
    seen: list[list[str]] = []

    def answer(request: RecordedRequest) -> Reply:
        seen.append(write_transactions(list(statements)))
        return OPENAI_CHAT.text(["an answer"])

    provider.respond_with(answer)
    assert rig.store is not None
    await rig.store.flush()  # the turn before is all stored
    del statements[:]
    log = await JournalingIDE(rig).turn(run_request("a question " * 500, model=MODEL, conversation_id=conv))
    assert log.terminal is None and log.text == "an answer"
    return seen[0]


async def before_the_model(rig: Rig, provider: FakeProviderServer, statements: list[str], follow_up: bool) -> list[list[str]]:
    conv = uuid.uuid4().hex
    if follow_up:
        await start(rig, provider, statements, conv)
    return await start(rig, provider, statements, conv)


@pytest.mark.parametrize("follow_up", [False, True], ids=["new conversation", "follow-up"])
async def test_a_start_is_one_transaction_before_the_model_is_called(
    traced: tuple[Rig, list[str]], provider: FakeProviderServer, follow_up: bool
) -> None:
    before_model = await before_the_model(traced[0], provider, traced[1], follow_up)
    assert len(before_model) == 1, before_model
    assert {"INSERT INTO inbound_appends", "INSERT INTO history_events"} <= set(before_model[0])


@pytest.mark.parametrize("follow_up", [False, True], ids=["new conversation", "follow-up"])
async def test_the_run_records_are_not_written_before_the_model_is_called(
    traced: tuple[Rig, list[str]], provider: FakeProviderServer, follow_up: bool
) -> None:
    written = {sql for transaction in await before_the_model(traced[0], provider, traced[1], follow_up) for sql in transaction}
    assert not {"INSERT INTO runs", "INSERT INTO request_bindings"} & written, written
    # A new conversation's row is: its input refers to it. A follow-up's update is not needed.
    assert ("INSERT INTO conversations" in written) is not follow_up


async def test_the_run_records_are_stored_when_the_turn_is_over(
    traced: tuple[Rig, list[str]], provider: FakeProviderServer
) -> None:
    rig, statements = traced
    assert rig.store is not None
    conv = uuid.uuid4().hex
    await start(rig, provider, statements, conv)
    await start(rig, provider, statements, conv)
    await rig.store.flush()
    runs = await rig.store.list_runs(conv)
    assert [r.outcome for r in runs] == ["succeeded", "succeeded"]
    for run in runs:
        assert run.request_id is not None and await rig.store.lookup_conversation(run.request_id) == conv
    record = await rig.store.get_conversation(conv)
    assert record is not None and record.last_cursor_run_id == runs[-1].cursor_run_id
