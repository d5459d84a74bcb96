"""The restart fuzz's driver: random appends, RunSSE drops and stops of the real server, checked
against its database after every stop and by a new turn after every start.

Each cycle holds a run open (its model reads a file; the IDE holds the exec), then does a seeded
random mix of: the next append (heartbeat), one held ahead of a gap, one far past the window, one
that reuses an acknowledged seqno with other content, a garbage body, the exec's result, a RunSSE
dropped and opened again, and an append still in flight when the stop comes. Then it stops the
server (SIGINT, SIGTERM or SIGKILL) and, with the server down, reads `state.db`: every append
answered 200 is durable (its journal row, under a settle mark, or its effect in the history) and
nothing refused was kept. The server must start again on the same data dir and serve a new turn.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, RecordedRequest, Reply
from tests.harness.ide import BIDI_APPEND, ScriptedIDE, StreamLog, append_body, heartbeat_message, run_request
from tests.harness.server import ServerConfig, ServerProcess
from tests.harness.stored import stored_rows

from .test_crash_recovery import wait_until

MODEL = "byok-crash"
WINDOW = 64
STOPS = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "sigkill": signal.SIGKILL}


@dataclass
class Figures:
    restarts: int = 0
    acknowledged: int = 0
    refused: int = 0
    lost: list[str] = field(default_factory=list)  # acknowledged appends not durable after a stop
    kept: list[str] = field(default_factory=list)  # refused appends found in the journal
    start_seconds: list[float] = field(default_factory=list)
    stops: dict[str, int] = field(default_factory=dict)
    last_stop: str = ""

    def summary(self) -> str:
        starts = sorted(self.start_seconds)
        p50 = statistics.median(starts)
        return (
            f"restart fuzz: {self.restarts} restarts ({', '.join(f'{k} {v}' for k, v in sorted(self.stops.items()))}), "
            f"appends acknowledged {self.acknowledged}, refused {self.refused}, lost {len(self.lost)}, "
            f"refused kept {len(self.kept)}; start p50 {p50:.3f} s, p95 {starts[int(len(starts) * 0.95)]:.3f} s, "
            f"max {starts[-1]:.3f} s, over 2x p50: {sum(s > 2 * p50 for s in starts)}"
        )


def model_replies(request: RecordedRequest) -> Reply:
    """A user turn that asks to read a file gets the Read; anything else (a tool result, a plain
    question) a short answer."""
    messages = request.json()["messages"]
    last = messages[-1]
    if last["role"] == "user" and "READ " in str(last["content"]):
        path = str(last["content"]).split("READ ", 1)[1].split()[0].strip("\"'")
        return OPENAI_CHAT.tool_calls([CallSpec(f"call_{uuid.uuid4().hex[:8]}", "Read", [f'{{"path": "{path}"}}'])])
    return OPENAI_CHAT.text(["served"])


@dataclass
class Stream:
    """One held run's stream. What was acknowledged is the IDE's record (`ScriptedIDE.acked`: its
    own acks of blobs and execs too); what was refused is kept here."""

    request_id: str
    conversation_id: str
    marker: str  # the file's content: found in the history once the result had its effect
    refused: dict[int, bytes] = field(default_factory=dict)  # seqno → message bytes refused
    answered: bool = False  # the exec's result was acknowledged: the run may have ended since

    def acked(self, ide: ScriptedIDE) -> dict[int, bytes]:
        return {seqno: m.SerializeToString() for rid, seqno, m in ide.acked if rid == self.request_id}

    def next_expected(self, ide: ScriptedIDE) -> int:
        """The seqno the server takes next: the first one not acknowledged."""
        acked, seqno = self.acked(ide), 0
        while seqno in acked:
            seqno += 1
        return seqno


async def open_held_run(ide: ScriptedIDE, workspace: Path, cycle: int) -> tuple[Stream, pb.ExecServerMessage, asyncio.Task[StreamLog]]:
    """A run whose model reads a file, the IDE holding the exec, its RunSSE open."""
    marker = f"ALPHA-{cycle}-{uuid.uuid4().hex[:6]}"
    path = workspace / f"file-{cycle}.txt"
    path.write_text(marker + "\n")
    stream = Stream(uuid.uuid4().hex, uuid.uuid4().hex, marker)
    ide.held.clear()
    reader = asyncio.create_task(ide.stream(stream.request_id, StreamLog()))
    first = run_request(f"READ {path} please", model=MODEL, conversation_id=stream.conversation_id)
    ok = await ide.append(stream.request_id, first)
    assert ok.status_code == 200, ok.text
    await wait_until(lambda: bool(ide.held), timeout=20)
    return stream, ide.held[0][1], reader


async def post_raw(ide: ScriptedIDE, stream: Stream, seqno: int, message: pb.AgentClientMessage) -> httpx.Response:
    """An append the IDE's own seqno counter knows nothing of (one the server must refuse)."""
    body = append_body(stream.request_id, seqno, message)
    return await ide.client.post(BIDI_APPEND, content=body, headers={"content-type": "application/proto"})


async def act(rng: random.Random, ide: ScriptedIDE, stream: Stream, exec_request: pb.ExecServerMessage, figures: Figures) -> None:
    """One random action on the held stream, its answer checked."""
    rid, beat = stream.request_id, heartbeat_message()
    expected, counter = stream.next_expected(ide), ide.seqnos[rid]
    gaps = [s for s in range(expected, counter) if s not in stream.acked(ide) and (rid, s) not in ide.unacked]  # the IDE's own may be in flight
    kind = rng.choice(["next", "next", "ahead", "fill", "far", "reuse", "garbage", "answer"])
    if kind == "answer" and stream.answered or kind == "fill" and not gaps:
        kind = "next"
    if kind == "ahead" and counter + WINDOW // 4 >= expected + WINDOW // 2:  # room for the IDE's own acks
        kind = "fill" if gaps else "next"
    if kind in ("next", "ahead", "fill"):
        seqno = {"next": counter, "ahead": counter + rng.randrange(1, WINDOW // 4), "fill": gaps[0] if gaps else counter}[kind]
        resp = await ide.append(rid, beat, seqno=seqno)
        assert resp.status_code == 200 or stream.answered, resp.text  # after the result the run may have ended
        figures.acknowledged += resp.status_code == 200
    elif kind == "far":
        seqno = expected + WINDOW + rng.randrange(0, 5000)
        resp = await post_raw(ide, stream, seqno, beat)
        assert resp.status_code == 429, resp.text
        stream.refused[seqno] = beat.SerializeToString()
        figures.refused += 1
    elif kind == "reuse":
        taken = sorted(s for s in stream.acked(ide) if s > 0)
        if not taken:
            return
        seqno = rng.choice(taken)
        other = pb.AgentClientMessage()
        other.conversation_action.cancel_action.SetInParent()
        resp = await post_raw(ide, stream, seqno, other)
        if stream.answered and resp.status_code == 200:
            return  # its stream ended: nothing appended to it has an effect, nor is kept
        assert resp.status_code == 400 and f"seqno {seqno}" in resp.text, resp.text
        stream.refused.setdefault(seqno, other.SerializeToString())
        figures.refused += 1
    elif kind == "garbage":
        body = rng.randbytes(rng.randrange(1, 200))
        resp = await ide.client.post(BIDI_APPEND, content=body, headers={"content-type": "application/proto"})
        assert 400 <= resp.status_code < 500, (resp.status_code, resp.text)
        figures.refused += 1
    else:  # the exec's result
        for reply in ide.execute(exec_request):
            resp = await ide.append(rid, reply)
            assert resp.status_code == 200, resp.text
            figures.acknowledged += 1
        stream.answered = True


def check_after_stop(config: ServerConfig, ide: ScriptedIDE, stream: Stream, figures: Figures) -> None:
    """With the server down: what was acknowledged is durable, nothing refused was kept."""
    rows = {seqno: bytes(message) if message is not None else None for seqno, message in stored_rows(
        config, "SELECT seqno, message FROM inbound_appends WHERE request_id = ?", (stream.request_id,))}
    payloads = b"".join(bytes(p) for (p,) in stored_rows(
        config, "SELECT payload FROM history_events WHERE conversation_id = ?", (stream.conversation_id,)))
    assert stored_rows(config, "SELECT COUNT(*) FROM quarantined_appends") == [(0,)]
    settled = max((s for s, m in rows.items() if m is None), default=0)
    if not (stream.answered and stream.marker.encode() in payloads):  # else its input had its effect
        for seqno, message in stream.acked(ide).items():
            if rows.get(seqno) != message and not 0 < seqno <= settled:
                kinds = {sq: m.WhichOneof("message") for rid, sq, m in ide.acked if rid == stream.request_id}
                figures.lost.append(f"{stream.request_id}#{seqno} (journal: {sorted(rows)}, acked {kinds}, answered {stream.answered}, stop {figures.last_stop})")
    for seqno, message in stream.refused.items():
        if rows.get(seqno) == message:
            figures.kept.append(f"{stream.request_id}#{seqno}")


def stop(server: ServerProcess, how: str) -> None:
    assert server.proc is not None
    if how == "sigkill":
        server.kill()
        return
    server.proc.send_signal(STOPS[how])
    server.proc.wait(20)


async def a_new_turn(server: ServerProcess, workspace: Path) -> None:
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        log = await ide.turn(run_request("just say something", model=MODEL, conversation_id=uuid.uuid4().hex))
    finally:
        await ide.close()
    assert log.terminal is None and log.text == "served", (log.terminal, log.text)


async def restart_fuzz(config: ServerConfig, provider: FakeProviderServer, workspace: Path, *, restarts: int, seed: int) -> Figures:
    rng = random.Random(seed)
    provider.respond_with(model_replies)
    figures = Figures()
    server = ServerProcess(config)
    began = time.monotonic()
    server.start()
    figures.start_seconds.append(time.monotonic() - began)
    try:
        for cycle in range(restarts):
            await a_new_turn(server, workspace)
            ide = ScriptedIDE(server.base_url, workspace)
            ide.hold_execs = True
            try:
                stream, exec_request, reader = await open_held_run(ide, workspace, cycle)
                for _ in range(rng.randrange(2, 12)):
                    if rng.random() < 0.15:  # the RunSSE drops and comes back
                        reader.cancel()
                        reader = asyncio.create_task(ide.stream(stream.request_id, StreamLog()))
                    await act(rng, ide, stream, exec_request, figures)
                in_flight = None
                if rng.random() < 0.3 and not stream.answered:  # an append the stop races (acked or not)
                    in_flight = asyncio.create_task(ide.append(stream.request_id, heartbeat_message()))
                    await asyncio.sleep(0)  # let it start sending: the stop below races its answer
                how = rng.choice(list(STOPS))
                figures.stops[how] = figures.stops.get(how, 0) + 1
                figures.last_stop = how
                await asyncio.get_running_loop().run_in_executor(None, stop, server, how)
                if in_flight is not None:
                    with contextlib.suppress(httpx.HTTPError):
                        figures.acknowledged += (await in_flight).status_code == 200
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                    await reader
            finally:
                await ide.close()
            check_after_stop(config, ide, stream, figures)
            began = time.monotonic()
            server.start()
            figures.start_seconds.append(time.monotonic() - began)
            figures.restarts += 1
        await a_new_turn(server, workspace)
    finally:
        server.stop()
        provider.respond_with(None)
    log = server.log_path.read_text(errors="replace") if server.log_path.exists() else ""
    assert "unexpected" not in log and "journaled append not taken again" not in log, log[-4000:]
    if os.environ.get("CURSOR_BYOK_FUZZ_FIGURES"):
        with open(os.environ["CURSOR_BYOK_FUZZ_FIGURES"], "a", encoding="utf-8") as out:
            out.write(figures.summary() + "\n")
    return figures
