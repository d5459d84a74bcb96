"""A client that leaves ends its run (issue #31 items 2 and 3, #32 "an abandoned run ends"),
against the real `serve`.

Closing RunSSE is how Cursor's SDK cancels over HTTP/1.1; over HTTP/2 it resets its `Run` stream
(RST_STREAM CANCEL). A stream gone and not read again within the reattach grace ends its run as
cancelled (what it did stays in the history), without waiting for acks nobody will send; a new run
request for the conversation while its stream is gone takes over at once; a reader back inside
the grace still gets the whole run. A finished turn's stream ends right after its settled
checkpoint (no continuation window by default).
"""
from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

import httpx
import pytest

from cursor_byok.h2_client import H2Client
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, Reply
from tests.harness.ide import RUN, ScriptedIDE, StreamLog, cancel_message, envelope, run_request
from tests.harness.server import ServerConfig, ServerProcess, one_model_config

from .conftest import direct_transports
from .test_lifecycle import user_message_action, wait_until

MODEL = "byok-life"
GRACE = 0.5  # the reattach grace of the tests where it runs out
LONG = 60.0  # a grace or an ack timeout no test waits out: what ends a run there is something else
BOUND = 20.0  # how long a test waits for the event it expects (far below LONG)


def config_with(tmp_path: Path, provider: FakeProviderServer, grace: float) -> ServerConfig:
    extra = {"reattach_grace_seconds": grace, "blob_ack_timeout_seconds": LONG}
    return one_model_config(tmp_path / "data", provider.url, MODEL, extra_server=extra)


def held_text(*pieces: str) -> Reply:
    """A provider stream that sends `pieces` and then holds, never ending by itself."""
    reply = OPENAI_CHAT.text([*pieces, "never sent"])
    reply.stall_after = len(pieces) + 1  # the role chunk, then the pieces
    return reply


def runs(server: ServerProcess, outcome: str) -> int:
    """The server's count of finished runs with `outcome` (its /metrics)."""
    page = httpx.get(server.base_url + "/metrics").text
    found = re.search(rf'cursor_byok_runs_total\{{model="{MODEL}",outcome="{outcome}"\}} (\S+)', page)
    return int(float(found.group(1))) if found else 0


async def ended(server: ServerProcess, outcome: str) -> None:
    try:
        await wait_until(lambda: runs(server, outcome) >= 1, BOUND)
    except TimeoutError:
        metrics = [line for line in httpx.get(server.base_url + "/metrics").text.splitlines() if line.startswith("cursor_byok_")]
        raise AssertionError(f"no run ended {outcome} within {BOUND}s\n" + "\n".join(metrics[:60]) + "\n" + server.log()[-4000:]) from None


async def left_mid_stream(ide: ScriptedIDE, rid: str, conv: str, log: StreamLog) -> None:
    """A run whose client read its first delta and then closed its stream."""
    stop = asyncio.Event()
    reader = asyncio.create_task(ide.stream(rid, log, stop=stop))
    assert (await ide.append(rid, run_request("long one", model=MODEL, conversation_id=conv))).status_code == 200
    await wait_until(lambda: bool(log.text), BOUND)
    stop.set()
    await asyncio.wait_for(reader, BOUND)
    assert log.terminals == 0


def finishing_text(*pieces: str) -> Reply:
    """A provider stream that ends a moment after the client left (at its first delta)."""
    reply = OPENAI_CHAT.text(list(pieces))
    reply.chunk_delay = 0.05
    return reply


@direct_transports
@pytest.mark.parametrize("model", ["still streaming", "finishing"])
async def test_a_stream_closed_mid_answer_ends_its_run_cancelled_after_the_grace(
    tmp_path: Path, provider: FakeProviderServer, workspace: Path, transport: str, model: str
) -> None:
    """RunSSE closed (or the Run stream reset) mid answer. The model still streaming: once the
    grace is out the provider stream is cut and the run is recorded cancelled. The model finishing
    after the client left: the turn's checkpoint blobs are never acked, and the run ends after the
    grace, not after the (long) ack timeout."""
    provider.enqueue(held_text("first ") if model == "still streaming" else finishing_text("first ", "second"))
    with ServerProcess(config_with(tmp_path, provider, GRACE)) as server:
        ide = ScriptedIDE(server.base_url, workspace, transport=transport)
        try:
            await left_mid_stream(ide, uuid.uuid4().hex, uuid.uuid4().hex, StreamLog())
            await ended(server, "canceled")
            if model == "still streaming":
                await wait_until(provider.requests[0].disconnected.is_set, BOUND)
        finally:
            await ide.close()


@direct_transports
async def test_a_client_gone_while_an_exec_is_pending_ends_its_run(
    tmp_path: Path, provider: FakeProviderServer, workspace: Path, transport: str
) -> None:
    """#32: the client drops its stream while a Read waits on it and never comes back: the run
    ends cancelled after the grace (it does not wait for the exec until shutdown)."""
    (workspace / "a.txt").write_text("ALPHA\n")
    provider.enqueue(OPENAI_CHAT.tool_calls([CallSpec("call_a", "Read", [f'{{"path": "{workspace / "a.txt"}"}}'])]))
    with ServerProcess(config_with(tmp_path, provider, GRACE)) as server:
        ide = ScriptedIDE(server.base_url, workspace, transport=transport)
        ide.hold_execs = True
        rid, log, stop = uuid.uuid4().hex, StreamLog(), asyncio.Event()
        try:
            reader = asyncio.create_task(ide.stream(rid, log, stop=stop))
            assert (await ide.append(rid, run_request("read it", model=MODEL, conversation_id=uuid.uuid4().hex))).status_code == 200
            await wait_until(lambda: len(ide.held) == 1, BOUND)
            stop.set()
            await asyncio.wait_for(reader, BOUND)
            await ended(server, "canceled")
        finally:
            await ide.close()
    assert len(provider.requests) == 1  # the model was not called again with a result


@direct_transports
async def test_a_reader_back_inside_the_grace_gets_the_whole_run(
    tmp_path: Path, provider: FakeProviderServer, workspace: Path, transport: str
) -> None:
    """Detach is not cancel within the grace: a reconnect replays from the start and follows live."""
    provider.enqueue(finishing_text("one ", "two ", "three"))
    with ServerProcess(config_with(tmp_path, provider, LONG)) as server:
        ide = ScriptedIDE(server.base_url, workspace, transport=transport)
        rid = uuid.uuid4().hex
        try:
            await left_mid_stream(ide, rid, uuid.uuid4().hex, StreamLog())
            again = await asyncio.wait_for(ide.stream(rid, StreamLog()), BOUND)
        finally:
            await ide.close()
        assert again.text == "one two three" and again.terminals == 1 and again.terminal is None
        assert runs(server, "succeeded") == 1 and runs(server, "canceled") == 0


@direct_transports
async def test_a_new_run_request_takes_over_a_run_whose_stream_is_gone(
    tmp_path: Path, provider: FakeProviderServer, workspace: Path, transport: str
) -> None:
    """The SDK's next prompt after it closed the stream: its run starts at once (the provider sees
    it while the abandoned stream still holds), the abandoned run ends cancelled, and what it had
    said is in the new run's history."""
    provider.enqueue(held_text("partial answer"), OPENAI_CHAT.text(["second answer"]))
    conv = uuid.uuid4().hex
    with ServerProcess(config_with(tmp_path, provider, LONG)) as server:
        ide = ScriptedIDE(server.base_url, workspace, transport=transport)
        try:
            await left_mid_stream(ide, uuid.uuid4().hex, conv, StreamLog())
            second = await ide.turn(run_request("next prompt", model=MODEL, conversation_id=conv), timeout=BOUND)
            await ended(server, "canceled")
            await wait_until(provider.requests[0].disconnected.is_set, BOUND)
        finally:
            await ide.close()
        assert second.text == "second answer" and second.terminal is None
        assert "long one" in provider.requests[1].body.decode()


async def test_a_run_request_queued_behind_a_read_run_takes_over_when_its_reader_leaves(
    tmp_path: Path, provider: FakeProviderServer, workspace: Path
) -> None:
    """The SDK's next prompt may reach the server before its close of the last stream does: queued
    behind a run still read, it takes over as soon as that reader leaves, not a grace later."""
    provider.enqueue(held_text("partial answer"), OPENAI_CHAT.text(["second answer"]))
    conv = uuid.uuid4().hex
    with ServerProcess(config_with(tmp_path, provider, LONG)) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        try:
            stop, first_log, first_rid = asyncio.Event(), StreamLog(), uuid.uuid4().hex
            first = asyncio.create_task(ide.stream(first_rid, first_log, stop=stop))
            assert (await ide.append(first_rid, run_request("long one", model=MODEL, conversation_id=conv))).status_code == 200
            await wait_until(lambda: bool(first_log.text), BOUND)
            second_log, second_rid = StreamLog(), uuid.uuid4().hex
            second = asyncio.create_task(ide.stream(second_rid, second_log))
            assert (await ide.append(second_rid, run_request("next prompt", model=MODEL, conversation_id=conv))).status_code == 200
            stop.set()  # the first stream's close comes after the next prompt was queued
            await asyncio.wait_for(first, BOUND)
            await asyncio.wait_for(second, BOUND)
            await ended(server, "canceled")
        finally:
            await ide.close()
    assert second_log.text == "second answer" and second_log.terminal is None
    assert "long one" in provider.requests[1].body.decode()


async def test_a_run_request_behind_an_attached_run_still_waits_for_it(
    tmp_path: Path, provider: FakeProviderServer, workspace: Path
) -> None:
    """Today's rule stays while the first run's stream is read: the new run is queued, the first
    one runs to its end."""
    first_reply = OPENAI_CHAT.text(["first ", "answer"])
    first_reply.chunk_delay = 0.1
    provider.enqueue(first_reply, OPENAI_CHAT.text(["second answer"]))
    conv = uuid.uuid4().hex
    with ServerProcess(config_with(tmp_path, provider, GRACE)) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        try:
            first_log, rid = StreamLog(), uuid.uuid4().hex
            first = asyncio.create_task(ide.stream(rid, first_log))
            assert (await ide.append(rid, run_request("first", model=MODEL, conversation_id=conv))).status_code == 200
            await wait_until(lambda: bool(first_log.text), BOUND)
            second = await ide.turn(run_request("second", model=MODEL, conversation_id=conv), timeout=BOUND)
            await asyncio.wait_for(first, BOUND)
        finally:
            await ide.close()
        assert first_log.text == "first answer" and first_log.terminal is None
        assert second.text == "second answer" and runs(server, "canceled") == 0


async def test_the_stream_ends_with_the_settled_checkpoint(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    """No continuation window by default: once the settled checkpoint is sent the stream has its
    terminal, so a message sent on seeing it is for a stream that ended (a new run's, not this
    one's), and the IDE's stream ends with one turn."""
    provider.enqueue(OPENAI_CHAT.text(["only answer"]), OPENAI_CHAT.text(["not this one"]))
    config = one_model_config(tmp_path / "data", provider.url, MODEL)  # the window left at its default
    answers: list[httpx.Response] = []
    with ServerProcess(config) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        try:

            async def follow_up(rid: str, log: StreamLog) -> None:
                await wait_until(lambda: log.kinds().count("conversation_checkpoint_update") == 3, BOUND)  # the settled one, twice
                answers.append(await ide.append(rid, user_message_action("and one more thing", "msg-late")))

            log = await ide.turn(run_request("first", model=MODEL, conversation_id=uuid.uuid4().hex), during=follow_up, timeout=BOUND)
        finally:
            await ide.close()
    assert log.text == "only answer" and log.kinds().count("turn_ended") == 1 and log.terminals == 1 and log.terminal is None
    assert answers[0].status_code != 200 and answers[0].json()["code"] == "failed_precondition", answers[0].text
    assert len(provider.requests) == 1


async def test_run_response_headers_come_before_any_output(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    """A Run queued behind an attached run writes nothing until it starts: its response HEADERS are
    sent at once all the same, not with its first DATA frame."""
    provider.enqueue(held_text("busy "), OPENAI_CHAT.text(["queued answer"]))  # the queued run's, once it starts
    conv = uuid.uuid4().hex
    with ServerProcess(config_with(tmp_path, provider, LONG)) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        client = await H2Client.connect("127.0.0.1", server.port)
        try:
            busy_log, busy_rid = StreamLog(), uuid.uuid4().hex
            busy = asyncio.create_task(ide.stream(busy_rid, busy_log))
            assert (await ide.append(busy_rid, run_request("busy", model=MODEL, conversation_id=conv))).status_code == 200
            await wait_until(lambda: bool(busy_log.text), BOUND)
            head = [(":method", "POST"), (":scheme", "http"), (":authority", f"127.0.0.1:{server.port}"), (":path", RUN)]
            head += [("content-type", "application/connect+proto"), ("x-request-id", uuid.uuid4().hex)]
            stream = await client.request(head)
            await stream.send(envelope(run_request("queued", model=MODEL, conversation_id=conv).SerializeToString()))
            status, _ = await asyncio.wait_for(stream.response(), BOUND)
            assert status == 200
            assert len(provider.requests) == 1  # the queued run has not started: nothing was written for it
            stream.reset()
            await ide.append(busy_rid, cancel_message())
            await asyncio.wait_for(busy, BOUND)
        finally:
            await client.close()
            await ide.close()


@pytest.mark.parametrize("key", ["reattach_grace_seconds", "continuation_window_seconds"])
def test_the_settings_are_documented(key: str) -> None:
    assert f"server.{key}" in (Path(__file__).parents[2] / "README.md").read_text()
