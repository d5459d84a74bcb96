"""A client that leaves, as Cursor's SDK does, timed against the real `serve` with its default
settings (RunSSE + BidiAppend on raw connections; the fake provider streams OpenAI chat):

- turn end: from the turn's last checkpoint frame to the stream's end-stream frame (the SDK holds a
  run finished only then), over sequential turns of one conversation;
- next prompt after a close: the SDK cancels by closing RunSSE mid answer and sends its next prompt
  (a new request id, same conversation) at once: from that prompt's append to its first text delta.
  The abandoned turn's provider stream has BENCH_ABANDONED_SECONDS left when the client leaves.

    .venv/bin/python -m pytest -q benchmarks/test_client_leaves.py -s -p no:randomly    (BENCH_TURNS=20, BENCH_CLOSES=3)

BENCH_SRC runs the server from another checkout's `src` (a before/after pair, one run each).
"""
from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from benchmarks.support.rawhttp import Connection
from benchmarks.test_tool_roundtrip import blob_ack, pct
from cursor_byok import hotpath
from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import BIDI_APPEND, RUN_SSE, append_body, envelope, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

TURNS = int(os.environ.get("BENCH_TURNS", "20"))
CLOSES = int(os.environ.get("BENCH_CLOSES", "3"))
ABANDONED_SECONDS = float(os.environ.get("BENCH_ABANDONED_SECONDS", "4"))
SRC = os.environ.get("BENCH_SRC")  # the cursor_byok source tree the server runs (default: this one)
CHUNK_DELAY = 0.1


class Reader:
    """One request id's RunSSE on its own connection, acking each set_blob as it is read (as Cursor
    does); `marks` holds the arrival (perf_counter ns) of the first text delta, the last checkpoint
    and the end-stream frame."""

    def __init__(self, port: int, rid: str) -> None:
        self.port, self.rid = port, rid
        self.marks: dict[str, int] = {}
        self.first_text = asyncio.Event()
        self.seqno = 0
        self.streamer: Connection | None = None
        self.appender: Connection | None = None
        self.appending = asyncio.Lock()  # one request at a time on the appender's connection

    async def open(self) -> None:
        self.streamer = await Connection.open("127.0.0.1", self.port)
        self.appender = await Connection.open("127.0.0.1", self.port)

    async def append(self, message: pb.AgentClientMessage) -> None:
        assert self.appender is not None
        async with self.appending:
            body = append_body(self.rid, self.seqno, message)
            self.seqno += 1
            try:
                status, body = await self.appender.post(BIDI_APPEND, body)
            except (asyncio.IncompleteReadError, ConnectionError):  # the server closed it, idle: as a client does, again
                self.appender.close()
                self.appender = await Connection.open("127.0.0.1", self.port)
                status, body = await self.appender.post(BIDI_APPEND, body)
        assert status == 200, (status, body)

    async def frames(self) -> AsyncIterator[tuple[int, pb.AgentServerMessage | None]]:
        assert self.streamer is not None
        decoder = hotpath.FrameDecoder()
        async for chunk in self.streamer.stream(RUN_SSE, envelope(pb.BidiRequestId(request_id=self.rid).SerializeToString())):
            arrived = time.perf_counter_ns()
            for flags, payload in decoder.feed(chunk):
                if flags & hotpath.FLAG_END_STREAM:
                    yield arrived, None
                    return
                yield arrived, pb.AgentServerMessage.FromString(payload)

    async def read(self, state: pb.ConversationStateStructure | None = None) -> None:
        async for arrived, msg in self.frames():
            if msg is None:
                self.marks["end"] = arrived
                return
            kind = msg.WhichOneof("message")
            if kind == "interaction_update" and msg.interaction_update.WhichOneof("message") == "text_delta":
                self.marks.setdefault("text", arrived)
                self.first_text.set()
            elif kind == "conversation_checkpoint_update":
                self.marks["checkpoint"] = arrived
                if state is not None:
                    state.CopyFrom(msg.conversation_checkpoint_update)
            elif kind == "kv_server_message" and msg.kv_server_message.WhichOneof("message") == "set_blob_args":
                await self.append(blob_ack(msg.kv_server_message))

    def close(self) -> None:
        for connection in (self.streamer, self.appender):
            if connection is not None:
                connection.close()


def prompt(text: str, conversation: str, state: pb.ConversationStateStructure | None = None) -> pb.AgentClientMessage:
    message = run_request(text, model="bench", conversation_id=conversation)
    if state is not None:
        message.run_request.conversation_state.CopyFrom(state)  # as Cursor does
    return message


async def turn_ends(port: int) -> list[int]:
    """Last checkpoint → end-stream frame, ns, of each of TURNS sequential turns."""
    conversation, state, gaps = uuid.uuid4().hex, pb.ConversationStateStructure(), []
    for turn in range(TURNS):
        reader = Reader(port, uuid.uuid4().hex)
        await reader.open()
        reading = asyncio.create_task(reader.read(state))
        await reader.append(prompt(f"question {turn}", conversation, state))
        await reading
        reader.close()
        gaps.append(reader.marks["end"] - reader.marks["checkpoint"])
    return gaps


async def next_prompts(port: int) -> list[int]:
    """The next prompt's append → its first text delta, ns, after the client closed its stream."""
    times = []
    for close in range(CLOSES):
        conversation = uuid.uuid4().hex
        left = Reader(port, uuid.uuid4().hex)
        await left.open()
        reading = asyncio.create_task(left.read())
        await left.append(prompt(f"long question {close}", conversation))
        await left.first_text.wait()
        reading.cancel()
        left.close()  # the SDK's cancel: its RunSSE connection closes
        nxt = Reader(port, uuid.uuid4().hex)
        await nxt.open()
        reading = asyncio.create_task(nxt.read())
        sent = time.perf_counter_ns()
        await nxt.append(prompt(f"next question {close}", conversation))
        await reading
        nxt.close()
        times.append(nxt.marks["text"] - sent)
    return times


@pytest.mark.timeout(1800)
@pytest.mark.benchmark(group="client-leaves")
def test_turn_end_and_next_prompt_after_a_close(benchmark, tmp_path: Path) -> None:
    with FakeProviderServer(keep_alive=True) as provider:
        config = ServerConfig(
            data_dir=tmp_path / "data", models=[ModelSpec(id="bench", provider="openai-chat", base_url=provider.url + "/v1")]
        )  # the server's defaults: no window, ack timeout, grace
        server = ServerProcess(config, env={"PYTHONPATH": SRC} if SRC else None)
        ends: list[int] = []
        firsts: list[int] = []
        try:
            server.start()
            provider.respond_with(lambda _: OPENAI_CHAT.text(["an ", "answer"]))
            ends += asyncio.run(turn_ends(server.port))
            abandoned = OPENAI_CHAT.text(["w "] * int(ABANDONED_SECONDS / CHUNK_DELAY))
            abandoned.chunk_delay = CHUNK_DELAY
            for _ in range(CLOSES):
                provider.enqueue(abandoned, OPENAI_CHAT.text(["next ", "answer"]))

            def closes() -> None:
                firsts.extend(asyncio.run(next_prompts(server.port)))

            benchmark.pedantic(closes, rounds=1, iterations=1)
        finally:
            server.stop()
    info = {
        "turn_end_p50_ms": pct(ends, 0.5), "turn_end_max_ms": pct(ends, 1.0),
        "next_prompt_first_token_p50_ms": pct(firsts, 0.5), "next_prompt_first_token_max_ms": pct(firsts, 1.0),
    }
    benchmark.extra_info.update(info)
    print(f"\n({SRC or 'this tree'}); load {Path('/proc/loadavg').read_text().split()[:3]}")
    print(f"last checkpoint → end of stream, {TURNS} turns: p50 {info['turn_end_p50_ms']:.1f} ms  max {info['turn_end_max_ms']:.1f} ms")
    print(
        f"next prompt after a close → first token, {CLOSES} closes ({ABANDONED_SECONDS:g} s of the abandoned stream left): "
        f"p50 {info['next_prompt_first_token_p50_ms']:.1f} ms  max {info['next_prompt_first_token_max_ms']:.1f} ms"
    )
