"""Work a run start does that must not grow with the conversation's history (issue 13: a turn
starts in well under a millisecond at 5 turns and at 200), counted, not timed: the messages the
context estimate sizes."""
from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, FakeProviderServer, UsageSpec
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.inprocess import MODEL, Rig
from tests.harness.synthetic_history import build, conversation_id


class Conversation:
    """One conversation driven as Cursor drives it: each turn sends back the last checkpoint."""

    def __init__(self, rig: Rig, ide: ScriptedIDE, conversation: str) -> None:
        self.rig, self.ide, self.id = rig, ide, conversation
        self.state: pb.ConversationStateStructure | None = None

    async def turn(self, text: str) -> None:
        request = run_request(text, model=MODEL, conversation_id=self.id)
        if self.state is not None:
            request.run_request.conversation_state.CopyFrom(self.state)
        log = await self.ide.turn(request)
        assert log.terminal is None, log.terminal
        self.state = [m.conversation_checkpoint_update for m in log.messages
                      if m.WhichOneof("message") == "conversation_checkpoint_update"][-1]

    def sized(self) -> int:
        """Messages the conversation's context estimate has sized so far."""
        runtime = self.rig.runtime(self.id)
        assert runtime is not None
        return runtime.data.history.context.sized


async def test_a_follow_up_sizes_only_its_new_messages_however_long_the_conversation(rig: Rig, provider: FakeProviderServer) -> None:
    provider.respond_with(lambda _: OPENAI_CHAT.text(["an answer"], UsageSpec(input=2_000)))
    conversation = Conversation(rig, rig.ide(), uuid.uuid4().hex)
    added = []
    for turn in range(40):
        before = conversation.sized() if turn else 0
        await conversation.turn(f"question {turn}")
        added.append(conversation.sized() - before)
    # Each turn sizes its own question and the answer before it: 2 messages, at turn 2 and turn 40.
    assert added[1:] == [2] * 39


async def test_a_reloaded_conversation_is_sized_once(tmp_path: Path, provider: FakeProviderServer) -> None:
    await asyncio.to_thread(build, tmp_path / "state.db", 1, 200, 6)  # 1,200 stored messages
    provider.respond_with(lambda _: OPENAI_CHAT.text(["an answer"], UsageSpec(input=2_000)))
    rig = await Rig(tmp_path, provider).start()
    try:
        conversation = Conversation(rig, rig.ide(), conversation_id(0))
        await conversation.turn("the first question since the restart")
        assert conversation.sized() == 1_200 + 1  # read again: every message sized once
        await conversation.turn("a follow-up")
        assert conversation.sized() == 1_200 + 1 + 2
    finally:
        await rig.close()
