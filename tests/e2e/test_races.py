"""The runtime under races (issue 20), through the real server and the scripted IDE: a follow-up sent
while the final checkpoint is in flight, a retried turn after a failure, and actions that arrive on
a stream whose run has ended."""
from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, Reply
from tests.harness.ide import ScriptedIDE, StreamLog, cancel_message, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

from .conftest import MODEL
from .test_lifecycle import slow_text, user_message_action, wait_until
from .test_tools import completion_request


def inject_user_context(text: str, injection_id: str, expected_run_id: str) -> pb.AgentClientMessage:
    """How Cursor 3.16 sends a follow-up the user queued while the agent was busy (PROTOCOL.md 2.1)."""
    msg = pb.AgentClientMessage()
    ica = msg.conversation_action.inject_context_action
    ica.injection_id = injection_id
    ica.expected_run_id = expected_run_id
    ica.user_context.user_message.text = text
    ica.user_context.user_message.message_id = f"msg-{injection_id}"
    return msg


def background_completion(conv: str) -> pb.AgentClientMessage:
    msg = pb.AgentClientMessage()
    msg.conversation_action.CopyFrom(completion_request(conv, "task-late", "call-late").run_request.action)
    return msg


def injection_states(log: StreamLog) -> list[tuple[str, str]]:
    return [(u.injection_id, u.state.WhichOneof("state")) for u in log.updates("context_injection_state")]  # type: ignore[attr-defined]


def user_turns_sent(provider: FakeProviderServer, index: int, needle: str) -> int:
    return sum(needle in str(m.get("content")) for m in provider.requests[index].json()["messages"] if m["role"] == "user")


# -- 2. a follow-up while the final checkpoint is in flight --------------------------------------------
@pytest.mark.parametrize("kind", ["user_message", "inject_context", "background_completion"])
async def test_a_follow_up_during_the_final_checkpoint_becomes_the_next_run(ide: ScriptedIDE, provider: FakeProviderServer, kind: str) -> None:
    conv = uuid.uuid4().hex
    provider.enqueue(OPENAI_CHAT.text(["first answer"]), OPENAI_CHAT.text(["second answer"]))
    first = run_request("first", model=MODEL, conversation_id=conv)
    follow_up = {
        "user_message": lambda: user_message_action("and one more thing", "msg-follow"),
        "inject_context": lambda: inject_user_context("and one more thing", "inj-1", first.run_request.run_id),
        "background_completion": lambda: background_completion(conv),
    }[kind]()
    needle = "Indexed 42 files." if kind == "background_completion" else "and one more thing"
    ide.hold_kv = True  # the turn's end waits for the IDE's acks of the final checkpoint's blobs: CHECKPOINTING

    async def during(rid: str, log: StreamLog) -> None:
        await wait_until(lambda: "step_completed" in log.kinds() and bool(ide.held_kv))
        assert (await ide.append(rid, follow_up)).status_code == 200
        await asyncio.sleep(0.1)
        await ide.release_kv()

    log = await ide.turn(first, during=during)
    assert log.terminals == 1 and log.terminal is None
    assert log.text == "first answersecond answer"
    assert log.kinds().count("turn_ended") == 2 and log.kinds().count("conversation_checkpoint_update") == 6  # 3 a turn
    assert len(provider.requests) == 2 and user_turns_sent(provider, 1, needle) == 1
    assert "queued" not in [state for _, state in injection_states(log)]  # never "queued" into a finished run
    if kind == "inject_context":  # the IDE follows its injection: queued for the next turn, then delivered
        assert injection_states(log) == [("inj-1", "queued_for_next_turn"), ("inj-1", "delivered")]
        assert len(log.updates("user_message_appended")) == 1
    provider.enqueue(OPENAI_CHAT.text(["third answer"]))
    after = run_request("third", model=MODEL, conversation_id=conv)
    after.run_request.conversation_state.CopyFrom(log.messages[-1].conversation_checkpoint_update)
    assert (await ide.turn(after)).text == "third answer"
    assert user_turns_sent(provider, 2, needle) == 1  # in the history once


async def test_injected_context_in_the_continuation_window_becomes_the_next_run(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    """After the final checkpoint the stream stays open for a moment (FINALIZING). Cursor 3.16 sends
    a queued follow-up then, as inject_context_action: it continues the same stream, and a stale one
    is visibly rejected."""
    config = ServerConfig(
        data_dir=tmp_path / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
        continuation_window_seconds=3.0,
    )
    provider.enqueue(OPENAI_CHAT.text(["first answer"]), OPENAI_CHAT.text(["second answer"]))
    first = run_request("first", model=MODEL, conversation_id=uuid.uuid4().hex)
    with ServerProcess(config) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        try:

            async def follow_up(rid: str, log: StreamLog) -> None:
                await wait_until(lambda: log.kinds().count("conversation_checkpoint_update") == 3)  # the turn's last
                stale = inject_user_context("from another run", "inj-stale", "some-other-run")
                assert (await ide.append(rid, stale)).status_code == 200
                fresh = inject_user_context("and one more thing", "inj-2", first.run_request.run_id)
                assert (await ide.append(rid, fresh)).status_code == 200

            log = await ide.turn(first, during=follow_up)
        finally:
            await ide.close()
    assert log.terminals == 1 and log.terminal is None
    assert log.text == "first answersecond answer" and log.kinds().count("turn_ended") == 2
    states = injection_states(log)
    assert ("inj-stale", "rejected") in states and ("inj-2", "delivered") in states
    assert user_turns_sent(provider, 1, "and one more thing") == 1
    assert user_turns_sent(provider, 1, "from another run") == 0


# -- 3. retrying a failed turn calls the model -----------------------------------------------------------
def rate_limited() -> list[Reply]:
    return [OPENAI_CHAT.rate_limited({"retry-after": "0"}) for _ in range(3)]  # the adapter's retries too


def overloaded() -> list[Reply]:
    return [OPENAI_CHAT.overloaded() for _ in range(3)]


def cut_mid_stream() -> list[Reply]:
    reply = OPENAI_CHAT.text(["partial ", "never ", "finished"])
    reply.cut_after = 2  # after the first text: too late for the adapter to retry
    return [reply]


@pytest.mark.parametrize("failure", ["rate_limited", "overloaded", "network_error", "cancel"])
async def test_retrying_a_failed_turn_calls_the_model(ide: ScriptedIDE, provider: FakeProviderServer, failure: str) -> None:
    conv = uuid.uuid4().hex
    message = run_request("golf question", model=MODEL, conversation_id=conv, message_id="m-golf")
    if failure == "cancel":
        provider.enqueue(slow_text(["slow "] * 60))

        async def stop(rid: str, log: StreamLog) -> None:
            await wait_until(lambda: "slow" in log.text)
            await ide.append(rid, cancel_message())

        failed = await ide.turn(message, during=stop)
    else:
        provider.enqueue(*{"rate_limited": rate_limited, "overloaded": overloaded, "network_error": cut_mid_stream}[failure]())
        failed = await ide.turn(message)
    assert failed.terminals == 1 and failed.terminal is not None
    calls = len(provider.requests)
    provider.enqueue(OPENAI_CHAT.text(["hotel answer"]))
    retry = run_request("golf question", model=MODEL, conversation_id=conv, message_id="m-golf")
    log = await ide.turn(retry)
    assert log.terminal is None and log.text == "hotel answer"
    assert len(provider.requests) == calls + 1
    assert user_turns_sent(provider, -1, "golf question") == 1  # the retry is not stored twice
    # Answered now: the same message once more does not wake the model.
    again = await ide.turn(run_request("golf question", model=MODEL, conversation_id=conv, message_id="m-golf"))
    assert again.terminal is None and len(provider.requests) == calls + 1


async def test_retrying_a_turn_cut_by_a_crash_calls_the_model(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")])
    conv = uuid.uuid4().hex
    server = ServerProcess(config).start()
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        provider.enqueue(slow_text(["zulu "] * 60))

        async def crash(rid: str, log: StreamLog) -> None:
            await wait_until(lambda: "zulu" in log.text)
            server.kill()

        cut = await ide.turn(run_request("golf question", model=MODEL, conversation_id=conv, message_id="m-crash"), during=crash)
        assert cut.terminals == 0  # the stream died with the server
    finally:
        await ide.close()
    server.start()
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        provider.enqueue(OPENAI_CHAT.text(["hotel answer"]))
        calls = len(provider.requests)
        log = await ide.turn(run_request("golf question", model=MODEL, conversation_id=conv, message_id="m-crash"))
    finally:
        await ide.close()
        server.stop()
    assert log.terminal is None and log.text == "hotel answer" and len(provider.requests) == calls + 1
    assert user_turns_sent(provider, -1, "golf question") == 1


# -- 4. actions belong to the stream they came on -------------------------------------------------------
async def finished_stream(ide: ScriptedIDE, provider: FakeProviderServer, conv: str) -> str:
    provider.enqueue(OPENAI_CHAT.text(["stream A done"]))
    rid = uuid.uuid4().hex
    log = await ide.turn(run_request("on stream A", model=MODEL, conversation_id=conv), request_id=rid)
    assert log.terminal is None
    return rid


@pytest.mark.parametrize("late", ["cancel", "user_message", "cancel_subagent"])
async def test_a_late_action_on_a_finished_stream_never_touches_the_next_run(ide: ScriptedIDE, provider: FakeProviderServer, late: str) -> None:
    conv = uuid.uuid4().hex
    stream_a = await finished_stream(ide, provider, conv)
    provider.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec("c_task", "Task", ['{"description": "job", "prompt": "Do it."}'])]),
        slow_text(["run B "] * 10),
    )
    ide.hold_execs = True
    action = {
        "cancel": cancel_message,
        "user_message": lambda: user_message_action("meant for A", "msg-late"),
        "cancel_subagent": lambda: _cancel_subagent("c_task"),
    }[late]()

    replies = []

    async def late_on_a(rid: str, log: StreamLog) -> None:
        await wait_until(lambda: bool(ide.held))
        replies.append(await ide.append(stream_a, action))
        await asyncio.sleep(0.2)
        ide.hold_execs = False
        await ide.release_held()

    log = await ide.turn(run_request("on stream B", model=MODEL, conversation_id=conv), during=late_on_a)
    assert log.terminals == 1 and log.terminal is None and log.text.endswith("run B ")
    assert "exec_server_control_message" not in log.kinds()  # the Task of B was not aborted
    assert "user_message_appended" not in log.kinds() and injection_states(log) == []
    assert "meant for A" not in provider.requests[-1].body.decode()
    assert replies[0].status_code != 200 and "ended" in replies[0].text  # refused, visibly


def _cancel_subagent(subagent_id: str) -> pb.AgentClientMessage:
    msg = pb.AgentClientMessage()
    msg.conversation_action.cancel_subagent_action.subagent_id = subagent_id
    return msg
