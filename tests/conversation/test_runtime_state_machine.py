"""One conversation driven through random interleavings (issue 20): new turns and retries, appends on
the active stream and on finished ones (user message, injected context, cancel, tool results,
heartbeat, background completion, cancel sub-agent), RunSSE detach and reattach, provider success,
failure and slowness, runtime eviction and server restart, with time passing in between.

After every step: no stream has more than one terminal; the stored history only grows (each state
a prefix of the next) and holds every input at most once; no invariant was logged as broken. Once
every stream has ended: every acknowledged input is in the history exactly once and answered, or
its stream visibly failed (an error terminal, or the injection was rejected); every run has one
outcome; nothing is kept for the finished request ids.

Bounded in `make test` (MAX_EXAMPLES × STEPS); `make soak` runs SOAK_EXAMPLES × SOAK_STEPS.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from cursor_byok.conversation.history import EntryKind, decode_entry
from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.run import ToolCallPart
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, RecordedRequest, Reply
from tests.harness.ide import StreamLog, cancel_message, heartbeat_message, run_request
from tests.harness.inprocess import MODEL, InProcessIDE, Rig

MAX_EXAMPLES, STEPS = 30, 16
SOAK_EXAMPLES, SOAK_STEPS = 500, 40
SETTLE_SECONDS = 20.0
BROKEN = ("illegal lifecycle transition", "runtime handler failed", "provider history is not an extension", "run failed with an unexpected error")


@dataclass
class Input:
    """A user input the server acknowledged (its append was answered 200)."""

    marker: str  # unique text: how it is found in the stored history
    stream: str  # the request id it came on
    injection_id: str = ""


@dataclass
class Stream:
    request_id: str
    cursor_run_id: str
    log: StreamLog
    reader: asyncio.Future[StreamLog]


class Broken(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if any(marker in record.getMessage() for marker in BROKEN):
            self.lines.append(record.getMessage())


class ConversationMachine(RuleBasedStateMachine):
    provider: FakeProviderServer  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix="runtime-sm-"))
        (self.dir / "notes.txt").write_text("notes\n")
        self.plan: collections.deque[str] = collections.deque()
        self.provider.respond_with(self._respond)
        self.rig = Rig(self.dir, self.provider, continuation_window=0.05, blob_ack_timeout=0.3)
        self.loop.run_until_complete(self.rig.start())
        self.ide = self._new_ide()
        self.conv = uuid.uuid4().hex
        self.streams: list[Stream] = []
        self.inputs: list[Input] = []
        self.messages: list[tuple[str, str]] = []  # (message id, text) of user messages sent: retried later
        self.history: list[str] = []
        self.count = 0
        self.broken = Broken()
        logging.getLogger("cursor_byok").addHandler(self.broken)

    def teardown(self) -> None:
        try:
            self.settle()  # every example ends with every stream ended: the full check runs
            self.checks()
        finally:
            logging.getLogger("cursor_byok").removeHandler(self.broken)
            self._close_all()

    def _close_all(self) -> None:
        try:
            self.loop.run_until_complete(self._close())
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    async def _close(self) -> None:
        await self.rig.close()
        for s in self.streams:
            s.reader.cancel()
        await asyncio.gather(*(s.reader for s in self.streams), return_exceptions=True)
        await self.ide.close()

    def _new_ide(self) -> InProcessIDE:
        return self.rig.ide(self.dir)

    # -- the provider ---------------------------------------------------------------------------------------------
    def _respond(self, request: RecordedRequest) -> Reply:
        behaviour = self.plan.popleft() if self.plan else "ok"
        if behaviour == "tool":
            return OPENAI_CHAT.tool_calls([CallSpec(f"c{uuid.uuid4().hex[:8]}", "Read", [f'{{"path": "{self.dir}/notes.txt"}}'])])
        if behaviour == "fail":  # the connection drops mid-answer
            reply = OPENAI_CHAT.text(["partial ", "lost"])
            reply.cut_after = 2  # after the first text: too late for the adapter to retry
            return reply
        reply = OPENAI_CHAT.text(["answer ", "done"] if behaviour == "ok" else ["slow "] * 12)
        reply.chunk_delay = 0.02 if behaviour == "slow" else 0.0
        return reply

    # -- helpers -------------------------------------------------------------------------------------------------
    def run(self, coro):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coro)

    def _marker(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}-{self.count}-{uuid.uuid4().hex[:6]}"

    def _open_streams(self) -> list[Stream]:
        return [s for s in self.streams if not s.log.finished]

    async def _open(self, msg: pb.AgentClientMessage) -> Stream:
        rid = uuid.uuid4().hex
        log = StreamLog()
        reader = asyncio.ensure_future(self.ide.stream(rid, log))
        reply = await self.ide.append(rid, msg)
        assert reply.status_code == 200, reply.text
        stream = Stream(rid, msg.run_request.run_id, log, reader)
        self.streams.append(stream)
        await asyncio.sleep(0.01)
        return stream

    async def _settle(self) -> None:
        open_readers = [s.reader for s in self.streams if not s.reader.done()]
        if open_readers:
            done, pending = await asyncio.wait(open_readers, timeout=SETTLE_SECONDS)
            assert not pending, "a stream never ended"
        assert self.rig.store is not None
        await self.rig.store.flush()

    async def _stored(self) -> list[tuple[str, EntryKind, str, bool]]:
        """(event id, kind, text, calls tools) of every stored history event."""
        assert self.rig.store is not None
        await self.rig.store.flush()
        out = []
        for row in await self.rig.store.load_events(self.conv):
            entry = decode_entry(row.payload)
            text = "".join(getattr(p, "text", "") or getattr(p, "content", "") or "" for p in entry.message.parts)
            out.append((row.event_id, entry.kind, text, any(isinstance(p, ToolCallPart) for p in entry.message.parts)))
        return out

    # -- rules ---------------------------------------------------------------------------------------------------
    BEHAVIOURS = st.sampled_from(["ok", "tool", "fail", "slow"])

    @initialize(behaviour=BEHAVIOURS)
    def first_turn(self, behaviour: str) -> None:
        self.start_turn(behaviour, "new")

    def start_turn(self, behaviour: str, kind: str) -> None:
        self.plan.append(behaviour)
        if kind == "retry" and self.messages:  # the IDE sends its latest message again
            message_id, text = self.messages[-1]
            msg = run_request(text, model=MODEL, conversation_id=self.conv, message_id=message_id)
            marker = text
        elif kind == "background":
            marker = self._marker("done")
            msg = run_request("x", model=MODEL, conversation_id=self.conv)
            msg.run_request.action.Clear()
            msg.run_request.action.background_task_completion_action.completions.add(task_id=marker, tool_call_id="t", detail=marker)
        else:
            marker = self._marker("ask")
            message_id = f"m{self.count}"
            msg = run_request(marker, model=MODEL, conversation_id=self.conv, message_id=message_id)
            self.messages.append((message_id, marker))
        stream = self.run(self._open(msg))
        self.inputs.append(Input(marker, stream.request_id))

    APPENDS = ["user_message", "inject", "inject_stale", "cancel", "background", "heartbeat", "cancel_subagent", "late_result"]
    OTHERS = ["wait", "wait", "detach_and_reattach", "slow_acks", "settle", "evict", "restart"]

    TURNS = ["new", "new", "retry", "retry", "background"]

    @rule(
        what=st.sampled_from(TURNS + APPENDS + OTHERS), behaviour=BEHAVIOURS, finished=st.booleans(), ms=st.sampled_from([0, 1, 5, 30, 120])
    )
    def step(self, what: str, behaviour: str, finished: bool, ms: int) -> None:
        """One thing happens (one rule, so no example leaves any of them out), then time passes."""
        if what in self.TURNS:
            self.start_turn(behaviour, what)
        elif what in self.APPENDS:
            self.append(what, finished)
        elif what != "wait":
            getattr(self, what)()
        self.run(self._wait(ms))

    async def _wait(self, ms: int) -> None:
        for _ in range(3):
            await asyncio.sleep(0)
        await asyncio.sleep(ms / 1000)

    def append(self, kind: str, finished: bool) -> None:
        """An append on the newest open stream, or on a finished one (a late action)."""
        candidates = [s for s in self.streams if s.log.finished == finished] or self.streams
        if not candidates:
            return
        stream = candidates[-1]
        msg = pb.AgentClientMessage()
        marker = self._marker(kind)
        injection_id = ""
        action = msg.conversation_action
        if kind == "user_message":
            um = action.user_message_action.user_message
            um.text, um.message_id = marker, f"m{self.count}"
            self.messages.append((um.message_id, marker))
        elif kind in ("inject", "inject_stale"):
            injection_id = f"inj-{self.count}"
            action.inject_context_action.injection_id = injection_id
            action.inject_context_action.expected_run_id = stream.cursor_run_id if kind == "inject" else "another-run"
            action.inject_context_action.user_context.user_message.text = marker
        elif kind == "cancel":
            msg = cancel_message()
        elif kind == "background":
            action.background_task_completion_action.completions.add(task_id=marker, tool_call_id="t", detail=marker)
        elif kind == "heartbeat":
            msg = heartbeat_message()
        elif kind == "cancel_subagent":
            action.cancel_subagent_action.subagent_id = "nobody"
        else:  # a tool result for an exec nobody waits for
            msg.exec_client_message.id = 10_000 + self.count
            msg.exec_client_message.read_result.file_not_found.SetInParent()
        reply = self.run(self.ide.append(stream.request_id, msg))
        if reply.status_code == 200 and kind in ("user_message", "inject", "inject_stale", "background"):
            self.inputs.append(Input(marker, stream.request_id, injection_id))

    def detach_and_reattach(self) -> None:
        """The RunSSE reader goes away and a new one replays the stream from its start."""
        readers = [s for s in self.streams if not s.reader.done()]
        if not readers:
            return
        stream = readers[-1]

        async def reattach() -> None:
            stream.reader.cancel()  # the client went away
            await asyncio.gather(stream.reader, return_exceptions=True)
            stream.log = StreamLog()
            stream.reader = asyncio.ensure_future(self.ide.stream(stream.request_id, stream.log))

        self.run(reattach())

    def slow_acks(self) -> None:
        """The IDE stops (or resumes) acking checkpoint blobs: a final checkpoint then waits for the
        ack timeout, and input arrives while the run is CHECKPOINTING."""
        self.ide.hold_kv = not self.ide.hold_kv

    def settle(self) -> None:
        self.run(self._settle())

    def evict(self) -> None:
        self.run(self._settle())
        self.rig.service.evict_idle(-1)

    def restart(self) -> None:
        """The server restarts (open streams end `unavailable`), the IDE reconnects to the new one."""

        async def restart() -> None:
            await self.rig.close()
            await self._settle_readers()
            await self.ide.close()
            await self.rig.start()
            self.ide = self._new_ide()

        self.run(restart())

    async def _settle_readers(self) -> None:
        open_readers = [s.reader for s in self.streams if not s.reader.done()]
        if open_readers:
            await asyncio.wait(open_readers, timeout=SETTLE_SECONDS)

    # -- invariants ----------------------------------------------------------------------------------------------
    @invariant()
    def checks(self) -> None:
        # Seen before the store is flushed: a stream's terminal follows its run's outcome write.
        settled = all(s.log.finished and s.reader.done() for s in self.streams)
        assert not self.broken.lines, self.broken.lines
        for s in self.streams:
            assert s.log.terminals <= 1, f"stream {s.request_id} has {s.log.terminals} terminals"
        stored = self.run(self._stored())
        ids = [event_id for event_id, *_ in stored]
        assert ids[: len(self.history)] == self.history, "the stored history was rewritten"
        self.history = ids
        inputs = [e for e in stored if e[1] in (EntryKind.USER, EntryKind.INJECTION, EntryKind.BACKGROUND_COMPLETION)]
        for marker in {i.marker for i in self.inputs}:
            holding = [e for e in inputs if marker in e[2]]
            assert len(holding) <= 1, f"{marker} is stored {len(holding)} times"
        if settled:
            self._check_settled(stored)

    def _check_settled(self, stored: list[tuple[str, EntryKind, str, bool]]) -> None:
        by_request = {s.request_id: s for s in self.streams}
        for item in self.inputs:
            stream = by_request[item.stream]
            position = next((i for i, e in enumerate(stored) if e[1] is not EntryKind.ASSISTANT and item.marker in e[2]), None)
            answered = position is not None and any(e[1] is EntryKind.ASSISTANT and not e[3] for e in stored[position + 1 :])
            rejected = item.injection_id and any(
                u.injection_id == item.injection_id and u.state.WhichOneof("state") == "rejected"  # type: ignore[attr-defined]
                for u in stream.log.updates("context_injection_state")
            )
            failed = stream.log.terminal is not None or stream.log.broken
            assert answered or rejected or failed, f"{item.marker} was acknowledged on a stream that ended well, but is not answered"
        assert self.run(self._unfinished_runs()) == []
        runtime = self.rig.runtime(self.conv)
        if runtime is not None:
            assert runtime.data.blobs.request_ids() == set()
        self.rig.service.hub.sweep(now=float("inf"))
        assert self.rig.service.registry.bound_streams() == 0

    async def _unfinished_runs(self) -> list[str]:
        assert self.rig.store is not None
        return [r.run_id for r in await self.rig.store.find_unfinished_runs()]


def run_machine(provider: FakeProviderServer, examples: int, steps: int) -> None:
    ConversationMachine.provider = provider
    run_state_machine_as_test(
        ConversationMachine,
        settings=settings(
            max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
            suppress_health_check=list(HealthCheck),
        ),
    )


@pytest.mark.timeout(300)
def test_one_conversation_under_random_interleavings(provider: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CURSOR_BYOK_STRICT_PREFIX", "1")
    run_machine(provider, MAX_EXAMPLES, STEPS)


@pytest.mark.soak
@pytest.mark.timeout(4 * 3600)
def test_one_conversation_under_random_interleavings_soak(provider: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CURSOR_BYOK_STRICT_PREFIX", "1")
    run_machine(provider, SOAK_EXAMPLES, SOAK_STEPS)
