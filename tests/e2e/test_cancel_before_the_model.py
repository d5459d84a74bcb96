"""A cancel the server has with its run request, before the model request left, wins: the
provider is never called, the IDE gets the cancelled end (PROTOCOL.md 2.7: no turn_ended,
end-stream `canceled`), and what the user typed stays in the conversation, as it does for a turn
cancelled later: the next turn carries it. For a new conversation, one whose history is in
memory, and one loaded from the store after a restart; both appends in flight before the server
reads the run request (the cancel waiting for it, or both in one write of a Run stream).

Two appends sent back to back without waiting are two requests the server reads one after the
other: read after the model request left, the cancel ends a running model call (its stream is
closed). Either way the end is the cancelled one and nothing the user typed is lost.
Real server, scripted IDE, fake provider."""
from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import BIDI_APPEND, ScriptedIDE, StreamLog, append_body, appends_waiting, cancel_message, run_request
from tests.harness.server import ServerConfig, ServerProcess, one_model_config

from .conftest import MODEL

# How the run request and the cancel reach the server, and over which transport.
DELIVERIES = [
    ("sse", "cancel first"),  # the cancel (seqno 1) waits for its run request (seqno 0): both handed over at once
    ("run", "one write"),  # a Run stream whose first write holds both messages
    ("sse", "back to back"),  # two BidiAppends, the second sent without waiting for the first's answer
]
# Read by the server only after the run request: the model may have been called already.
MAY_REACH_THE_MODEL = {"back to back"}
CANCELLED_TEXT = "a question the user cancelled at once"


async def run_and_cancel(ide: ScriptedIDE, conv: str, delivery: str) -> StreamLog:
    """A run request with a cancel right behind it, delivered as `delivery` says; its stream read to the end."""
    rid = uuid.uuid4().hex
    log = StreamLog()
    first = run_request(CANCELLED_TEXT, model=MODEL, conversation_id=conv)
    if delivery == "one write":  # queued before the stream opens: its first write carries both
        await ide.append(rid, first)
        await ide.append(rid, cancel_message())
        await asyncio.wait_for(ide.stream(rid, log), 15)
        return log
    reader = asyncio.create_task(ide.stream(rid, log))
    async with httpx.AsyncClient(base_url=ide.base_url, headers={"content-type": "application/proto"}) as client:

        def post(seqno: int, message: object) -> asyncio.Task[httpx.Response]:
            return asyncio.create_task(client.post(BIDI_APPEND, content=append_body(rid, seqno, message)))  # type: ignore[arg-type]

        if delivery == "cancel first":
            cancel = post(1, cancel_message())
            await appends_waiting(client, 1)  # seqno 1 waits (bounded) for the route that seqno 0 sets
            run = post(0, first)
        else:
            run, cancel = post(0, first), post(1, cancel_message())
        assert [(await run).status_code, (await cancel).status_code] == [200, 200]
    ide.seqnos[rid] = 2
    await asyncio.wait_for(reader, 15)
    return log


def assert_cancelled(log: StreamLog, delivery: str) -> None:
    """The cancelled end; before the model was called, nothing of a step either."""
    assert log.terminals == 1 and log.terminal is not None and log.terminal.code == "canceled", log.terminal
    kinds = log.kinds()
    assert "turn_ended" not in kinds, kinds
    if delivery not in MAY_REACH_THE_MODEL:
        assert "step_started" not in kinds and "text_delta" not in kinds, kinds


def model_calls(delivery: str, before: int, after: int) -> int:
    """The model requests made by the cancelled run (0 for a cancel the server had in time)."""
    return 0 if delivery in MAY_REACH_THE_MODEL else after - before


async def next_turn_carries_the_cancelled_input(ide: ScriptedIDE, provider: FakeProviderServer, conv: str) -> None:
    """The next turn on the conversation completes, and its model request holds the cancelled input
    before its own, each once."""
    provider.enqueue(OPENAI_CHAT.text(["after"]))
    log = await ide.turn(run_request("the next question", model=MODEL, conversation_id=conv))
    assert log.terminal is None and log.text == "after"
    users = [str(m["content"]) for m in provider.requests[-1].json()["messages"] if m["role"] == "user"]
    cancelled = [i for i, text in enumerate(users) if CANCELLED_TEXT in text]
    asked = [i for i, text in enumerate(users) if "the next question" in text]
    assert len(cancelled) == 1 and asked == [len(users) - 1] and cancelled[0] < asked[0], users


async def first_turn(ide: ScriptedIDE, provider: FakeProviderServer, conv: str) -> None:
    provider.enqueue(OPENAI_CHAT.text(["first answer"]))
    log = await ide.turn(run_request("the first question", model=MODEL, conversation_id=conv))
    assert log.terminal is None and log.text == "first answer"


@pytest.mark.parametrize("transport, delivery", DELIVERIES, indirect=["transport"])
@pytest.mark.parametrize("history", ["new conversation", "in memory"])
async def test_a_cancel_right_behind_the_run_request_stops_it_before_the_model(
    ide: ScriptedIDE, provider: FakeProviderServer, transport: str, delivery: str, history: str
) -> None:
    conv = uuid.uuid4().hex
    if history == "in memory":
        await first_turn(ide, provider, conv)
    called = len(provider.requests)
    log = await run_and_cancel(ide, conv, delivery)
    assert_cancelled(log, delivery)
    await next_turn_carries_the_cancelled_input(ide, provider, conv)
    assert model_calls(delivery, called + 1, len(provider.requests)) == 0  # the next turn's request only


@pytest.fixture
def restart_config(tmp_path: Path, provider: FakeProviderServer) -> ServerConfig:
    return one_model_config(tmp_path / "data", provider.url, MODEL)


@pytest.mark.parametrize("transport, delivery", DELIVERIES)
async def test_after_a_restart_a_cancel_right_behind_the_run_request_stops_it_before_the_model(
    restart_config: ServerConfig, provider: FakeProviderServer, workspace: Path, transport: str, delivery: str
) -> None:
    """The conversation's history is loaded from the store by the run the cancel follows."""
    conv = uuid.uuid4().hex
    with ServerProcess(restart_config) as server:
        ide = ScriptedIDE(server.base_url, workspace, transport=transport)
        try:
            await first_turn(ide, provider, conv)
        finally:
            await ide.close()
    with ServerProcess(restart_config) as server:
        ide = ScriptedIDE(server.base_url, workspace, transport=transport)
        try:
            log = await run_and_cancel(ide, conv, delivery)
            assert_cancelled(log, delivery)
            await next_turn_carries_the_cancelled_input(ide, provider, conv)
        finally:
            await ide.close()
    assert model_calls(delivery, 2, len(provider.requests)) == 0, "\n\n".join(r.body.decode()[-400:] for r in provider.requests)  # the first turn's and the next turn's
