"""Work a turn does that must not grow with the conversation's history (issue 13: a turn starts in
well under a millisecond at 5 turns and at 200), counted, not timed: the messages the context
estimate sizes, and the lines of the server's own Python a follow-up turn runs (its start, its
tool round, its checkpoints): a loop over the history shows as one line or more per message."""
from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

import cursor_byok

from cursor_byok.conversation.history import RootBlobs, message_json, root_ids
from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, RecordedRequest, Reply, UsageSpec
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.inprocess import MODEL, Rig
from tests.harness.synthetic_history import build, conversation_id


class Conversation:
    """One conversation driven as Cursor drives it: each turn sends back the last checkpoint."""

    def __init__(self, rig: Rig, ide: ScriptedIDE, conversation: str, workspace: Path | None = None) -> None:
        self.rig, self.ide, self.id, self.workspace = rig, ide, conversation, workspace
        self.state: pb.ConversationStateStructure | None = None

    async def turn(self, text: str, mode: int = pb.AGENT_MODE_AGENT) -> None:
        workspace = str(self.workspace) if self.workspace else None
        request = run_request(text, model=MODEL, conversation_id=self.id, workspace=workspace, mode=mode)
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
        return runtime.data.history.context_size.sized


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


async def test_a_follow_up_pushes_the_new_messages_roots_and_a_new_system_prompts_only(rig: Rig, provider: FakeProviderServer) -> None:
    """The roots the client's checkpoint names are not looked at one by one (nor pushed again):
    what a turn pushes is its own messages' roots, and the system prompt's when the mode changed it."""
    provider.respond_with(lambda _: OPENAI_CHAT.text(["an answer"]))
    ide = rig.ide()
    conversation = Conversation(rig, ide, uuid.uuid4().hex)
    for turn in range(6):
        await conversation.turn(f"question {turn}")
    for mode, new_system in ((pb.AGENT_MODE_AGENT, False), (pb.AGENT_MODE_ASK, True), (pb.AGENT_MODE_ASK, False)):
        assert conversation.state is not None
        held = list(conversation.state.root_prompt_messages_json)
        ide.kv_log.clear()
        await conversation.turn("one more", mode)
        roots = list(conversation.state.root_prompt_messages_json)
        pushed = [kv.set_blob_args.blob_id for kv in ide.kv_log if kv.WhichOneof("message") == "set_blob_args"]
        assert roots[1 : len(held)] == held[1:] and (roots[0] != held[0]) is new_system
        assert [b for b in pushed if b in roots] == [roots[0]] * new_system + roots[len(held) :]  # the question and its answer
        assert all(root in ide.blobs for root in roots)


async def test_a_client_that_returns_no_checkpoint_is_sent_each_root_once(rig: Rig, provider: FakeProviderServer) -> None:
    """A client that does not send its checkpoint back holds what it acked on the conversation's
    earlier streams all the same (its blob store keeps them): a turn pushes its own messages' roots
    and its turn blobs, as many at turn 30 as at turn 3, not the whole history again each turn."""
    provider.respond_with(lambda _: OPENAI_CHAT.text(["an answer"]))
    ide = rig.ide()
    conversation = Conversation(rig, ide, uuid.uuid4().hex)
    pushed: dict[int, int] = {}
    for turn in range(30):
        conversation.state = None  # never sent back
        ide.kv_log.clear()
        await conversation.turn(f"question {turn}")
        pushed[turn] = sum(kv.WhichOneof("message") == "set_blob_args" for kv in ide.kv_log)
        assert conversation.state is not None and all(root in ide.blobs for root in conversation.state.root_prompt_messages_json)
    assert pushed[29] == pushed[2], pushed


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


class Calls:
    """Calls of one of our functions while installed (`sys.setprofile`, this thread)."""

    def __init__(self, function: Any) -> None:
        self.code, self.count = function.__code__, 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is self.code:
            self.count += 1


async def test_a_reloaded_conversation_encodes_only_its_new_messages_root_blobs(tmp_path: Path, provider: FakeProviderServer) -> None:
    """After a restart, the first checkpoint's root blob ids come from the server's own last stored
    checkpoint (the roots it names, with what they were built from: the model, the first and last
    message's keys, how many), not from every message encoded and hashed again; the ids are those
    a build from scratch gives."""
    provider.respond_with(lambda _: OPENAI_CHAT.text(["an answer"]))
    rig = await Rig(tmp_path, provider).start()
    try:
        encoded: dict[int, int] = {}
        for turns in (5, 40):
            conversation = Conversation(rig, rig.ide(), uuid.uuid4().hex)
            for turn in range(turns):
                await conversation.turn(f"question {turn}")
            await rig.restart()
            conversation.ide = rig.ide()
            counter = Calls(message_json)
            sys.setprofile(counter)
            try:
                await conversation.turn("the first question since the restart")
            finally:
                sys.setprofile(None)
            encoded[turns] = counter.count
            assert conversation.state is not None
            runtime = rig.runtime(conversation.id)
            assert runtime is not None
            fresh = RootBlobs().build(runtime.data.checkpoints.root_blobs.blob(0).source, runtime.data.history.project(), MODEL)  # type: ignore[arg-type]
            assert list(conversation.state.root_prompt_messages_json) == root_ids(fresh)
        assert encoded[40] == encoded[5] <= 6, encoded  # the question and the answer: for their ids, and for the push
    finally:
        await rig.close()


OURS = str(Path(cursor_byok.__file__).parent)


class OurLines:
    """Lines of the server's own modules run while installed (`sys.settrace`, this thread)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        return self._line if frame.f_code.co_filename.startswith(OURS) else None

    def _line(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.count += 1
        return self._line


def read_then_answer(request: RecordedRequest) -> Reply:
    """A turn asking for `tools` gets a Read first, then its answer; any other turn its answer."""
    messages = request.json()["messages"]
    if messages[-1]["role"] == "user" and "tools" in json.dumps(messages[-1]["content"]):
        return OPENAI_CHAT.tool_calls([CallSpec(f"call_{len(messages)}", "Read", [json.dumps({"path": "notes.txt"})])],
                                      usage=UsageSpec(input=2_000))
    return OPENAI_CHAT.text(["an answer"], UsageSpec(input=2_000))


async def test_a_follow_up_turn_runs_no_more_of_our_code_at_170_turns_than_at_20(rig: Rig, provider: FakeProviderServer,
                                                                                 tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("the notes\n")
    provider.respond_with(read_then_answer)
    conversation = Conversation(rig, rig.ide(tmp_path), uuid.uuid4().hex, tmp_path)
    lines: dict[int, int] = {}
    for turns in (20, 170):
        while len(await rig.history(conversation.id)) < 4 * turns:
            await conversation.turn("more tools please")  # 4 entries: the question, a Read, its result, the answer
        counts = []
        for _ in range(3):  # the least of three: whether the store commits on the loop varies with timing
            counter = OurLines()
            sys.settrace(counter)
            try:
                await conversation.turn("and tools once more")
            finally:
                sys.settrace(None)
            counts.append(counter.count)
        lines[turns] = min(counts)
    # 600 more history entries: a walk over them would add 600 lines or more (a line per entry and
    # walk; the walks this replaced ran 28 lines per entry in all). What varies with timing (the
    # store committing on the loop or on its thread, the loop's passes) is ~200 either way.
    assert lines[170] - lines[20] < 300, f"a follow-up turn runs {lines[20]} lines of ours at 20 turns, {lines[170]} at 170"
