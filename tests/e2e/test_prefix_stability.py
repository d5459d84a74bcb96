"""Provider prompt-cache stability: every provider request of a conversation starts with the exact
bytes of the previous request's messages (until an explicit compaction)."""
from __future__ import annotations

import asyncio
import uuid

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, run_request

from .conftest import MODEL
from .test_tools import completion_request


def with_context(msg: pb.AgentClientMessage, rules: str) -> pb.AgentClientMessage:
    ctx = msg.run_request.action.user_message_action.request_context
    rule = ctx.rules.add()
    rule.full_path = ".cursor/rules/style.mdc"
    rule.content = rules
    return msg


def assert_each_extends_the_previous(raw_requests: list[list[bytes]]) -> None:
    for i in range(1, len(raw_requests)):
        before, after = raw_requests[i - 1], raw_requests[i]
        assert len(after) > len(before), f"request {i} does not add messages"
        assert after[: len(before)] == before, f"request {i} rewrote an earlier message"


async def test_ten_turns_with_tools_context_changes_and_an_injection(ide: ScriptedIDE, provider: FakeProviderServer, workspace) -> None:
    (workspace / "notes.txt").write_text("line\n")
    conv = uuid.uuid4().hex
    contexts = ["A", "A", "B", "B", "A", "A", "A", "A", "A", "A"]  # A → B → A: three context events
    for turn in range(10):
        provider.enqueue(
            OPENAI_CHAT.tool_calls([CallSpec(f"call_{turn}", "Read", [f'{{"path": "{workspace}/notes.txt"}}'])]),
            OPENAI_CHAT.text([f"answer {turn}"]),
        )
        if turn == 6:
            ide.hold_execs = True
        rid = uuid.uuid4().hex
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(rid, log))
        msg = with_context(run_request(f"question {turn}", model=MODEL, conversation_id=conv, workspace=str(workspace)), f"rules {contexts[turn]}")
        await ide.append(rid, msg)
        if turn == 6:
            while not ide.held:
                await asyncio.sleep(0.02)
            inject = pb.AgentClientMessage()
            ica = inject.conversation_action.inject_context_action
            ica.injection_id = "inj-6"
            ica.expected_run_id = msg.run_request.run_id
            ica.system_context.producer = "test"
            ica.system_context.content = "an injected note"
            await ide.append(rid, inject)
            ide.hold_execs = False
            await ide.release_held()
        await asyncio.wait_for(reader, 20)
        assert log.terminals == 1 and log.terminal is None, (turn, log.terminal)
        if turn == 8:  # a background task finished between turns: a simulated user turn
            provider.enqueue(OPENAI_CHAT.text(["noted the background result"]))
            done = await ide.turn(completion_request(conv, "bg-1", "call_bg", MODEL))
            assert done.terminal is None

    raw = [r.raw_items("messages") for r in provider.requests]
    assert len(raw) == 21  # two calls per turn (the injection joins turn 6's), one background follow-up
    assert_each_extends_the_previous(raw)
    final = b"".join(raw[-1]).decode()
    assert final.count("rules A") == 2 and final.count("rules B") == 1  # A → B → A
    assert final.count("an injected note") == 1
    assert final.count("Indexed 42 files.") == 1
    assert final.count("question 0") == 1
