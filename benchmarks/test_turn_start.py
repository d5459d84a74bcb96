"""Turn start: from the IDE's first BidiAppend of a turn to the provider holding the model request.

One run, one command, every figure next to its floor:

    .venv/bin/python -m pytest -q benchmarks/test_turn_start.py -s

- **ours**: the real `cursor-byok serve`; **floor**: `benchmarks/support/bare_turn_app.py`, a bare
  granian app that decodes the append and forwards one prebuilt provider request (no history, no
  persistence, no prompt work); **durable**: `benchmarks/support/bare_durable_app.py`, the floor
  plus the one commit every correct start makes before the model is called (the run request's
  bytes, one SQLite row, on the loop), and its commit's own loop CPU per start, timed inside it:
  what of ours' excess over the floor that commit explains is printed plainly; **direct**: the
  benchmark itself POSTing that prebuilt request to the provider. All talk to
  `benchmarks/support/stamp_provider.py`, which stamps the moment it has a whole request
  (CLOCK_MONOTONIC) and sends the stamp back as the first text chunk.
- Every turn's user message is 2,000 words; the answer streams at a model's pace (10 chunks 20 ms
  apart). A conversation takes several turns in a row, so later turns carry the earlier ones as
  history (ours only: the floors have none by definition).
- Latency scenarios: 1, 8 and 32 conversations at once (each a loop of turns with a random pause of
  up to 0.2 s before each turn, so they do not march in step) and a burst of 200 conversations
  whose first turns start spread over one second. Per turn: first append → provider
  has the request, and time to first token (first text delta at the IDE) minus the direct call's.
- CPU per run start (the main figure on a shared machine): the provider holds its answers while
  runs are started one after another; the server's user+system CPU (the kernel's per-process CPU
  clock: what /proc/PID/stat counts, at ns grain) over that stretch
  (plus a settle period for anything the start left to do off the path, minus the idle rate) per
  start, for new conversations and for follow-up turns; and of that, the event loop thread's own
  (its schedstat: what the store's and the HTTP runtime's threads add is left out, and so is most
  of the noise another process's load puts on the whole figure).
- Cold start (process spawn → /healthz answered → first turn's first token) and peak memory (server
  process and its granian worker: RSS summed as the issue measured it, and PSS, which counts the
  pages the two share once) over 100 conversations, on a fresh server.

Knobs: BENCH_TURN_CONCURRENCY="1,8,32", BENCH_TURN_SAMPLES=192 (turns per level),
BENCH_TURNS_PER_CONVERSATION=3, BENCH_BURST=200, BENCH_HELD=100, BENCH_RSS_CONVERSATIONS=100,
BENCH_THINK_MS=200, BENCH_ANSWER_CHUNKS=10, BENCH_ANSWER_INTERVAL_MS=20,
BENCH_TURN_FLOORS="durable,floor" (the bare apps measured after ours, in that order); BENCH_SRC runs the
servers from another checkout's `src` (e.g. the commit before a change, for a before/after pair);
BENCH_PROFILE=/tmp/prefix records py-spy profiles of the servers over the CPU-per-start stretches
(raw collapsed stacks of the threads holding the GIL, 1 kHz: the Python side's work; needs
`pip install py-spy` and ptrace rights; the CPU figures of such a run include the sampling's
disturbance), summed up by `benchmarks/support/profile_summary.py`; BENCH_CPROFILE=/tmp/prefix records
cProfile on the servers' event loop threads with a thread-CPU clock over the same stretches
(`<prefix>-<ours|durable|floor>-<n>.prof`, n = 1 new conversations, 2 follow-ups; read with `pstats`; the CPU
figures of such a run include the profiler's own cost), and on their other Python threads
(`<prefix>-<ours|floor>-<n>-<thread>-<tid>.prof`: the store's writer among them), via
`benchmarks/support/cprofile_site`, which is always on the servers' path: it gives every Python
thread its name as its OS name, so the CPU per start is also broken down by thread (their names in
/proc/PID/task/TID/comm; "event loop" is the loop's thread; granian's own threads carry its names).
"""
from __future__ import annotations

import asyncio
import ctypes
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchmarks.support.bare_durable_app import DB_ENV, SqliteJournal
from benchmarks.support.bare_turn_app import BODY, turn_text
from benchmarks.support.cold_start import answered
from benchmarks.support.rawhttp import Connection
from benchmarks.test_gateway import ROOT, _tree, rss_kib, wait_healthy
from cursor_byok import hotpath
from cursor_byok.protocol import agent_pb2 as pb
from tests.harness.ide import BIDI_APPEND, RUN_SSE, append_body, envelope, run_request
from tests.harness.server import ModelSpec, ServerConfig, free_port

CONCURRENCY = [int(c) for c in os.environ.get("BENCH_TURN_CONCURRENCY", "1,8,32").split(",")]
SAMPLES = int(os.environ.get("BENCH_TURN_SAMPLES", "192"))
TURNS = int(os.environ.get("BENCH_TURNS_PER_CONVERSATION", "3"))
BURST = int(os.environ.get("BENCH_BURST", "200"))
HELD = int(os.environ.get("BENCH_HELD", "100"))
RSS_CONVERSATIONS = int(os.environ.get("BENCH_RSS_CONVERSATIONS", "100"))
SRC = os.environ.get("BENCH_SRC", str(ROOT / "src"))  # the cursor_byok source tree the servers run
FLOORS = [n for n in os.environ.get("BENCH_TURN_FLOORS", "durable,floor").split(",") if n]  # the bare apps measured after ours; "" for none
THINK = float(os.environ.get("BENCH_THINK_MS", "200")) / 1000
ANSWER_CHUNKS = os.environ.get("BENCH_ANSWER_CHUNKS", "10")
ANSWER_INTERVAL_MS = os.environ.get("BENCH_ANSWER_INTERVAL_MS", "20")
HOST = "127.0.0.1"
MODEL = "bench"
TEXT = turn_text()
PROFILE = os.environ.get("BENCH_PROFILE", "")  # a path prefix: py-spy profiles of the CPU-per-start stretches
CPROFILE = os.environ.get("BENCH_CPROFILE", "")  # a path prefix: cProfile (thread CPU) of the same stretches
CPROFILE_SITE = ROOT / "benchmarks" / "support" / "cprofile_site"
SETTLE_SECONDS = 0.5  # after the last held start: off-path work a start left behind is counted


class _Timespec(ctypes.Structure):
    _fields_ = [("seconds", ctypes.c_long), ("nanoseconds", ctypes.c_long)]


_libc = ctypes.CDLL(None, use_errno=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its children (granian's worker) so far, from the kernel's
    per-process CPU clock: the same account /proc/PID/stat keeps, at ns rather than 10 ms grain."""
    total = 0.0
    for p in _tree(pid):
        clock, spec = ctypes.c_int(), _Timespec()
        if _libc.clock_getcpuclockid(p, ctypes.byref(clock)) == 0 and _libc.clock_gettime(clock.value, ctypes.byref(spec)) == 0:
            total += spec.seconds + spec.nanoseconds / 1e9
    return total


def loop_thread_seconds(pid: int) -> float:
    """On-CPU time (ns grain, /proc/PID/task/TID/schedstat) of the thread that runs the app's event
    loop: the main thread of the server's worker when it has one, else of the server itself. The
    part of a start's CPU that its own threads (store writer, HTTP runtime) do not add."""
    p = _tree(pid)[-1]
    try:
        return int(Path(f"/proc/{p}/task/{p}/schedstat").read_text().split()[0]) / 1e9
    except OSError:
        return 0.0


def thread_seconds(pid: int) -> dict[tuple[int, int], tuple[str, float]]:
    """On-CPU time of every thread of a process and its children, by (pid, tid): its name and seconds.
    The event loop's thread is "event loop"; a thread that never named itself (it carries its
    process's name: granian's own, in ours) "unnamed"; another process's threads are prefixed with it."""
    tree = _tree(pid)
    out: dict[tuple[int, int], tuple[str, float]] = {}
    for p in tree:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{p}/task")]
            process_name = Path(f"/proc/{p}/comm").read_text().strip()
        except OSError:
            continue
        for tid in tids:
            try:
                seconds = int(Path(f"/proc/{p}/task/{tid}/schedstat").read_text().split()[0]) / 1e9
                comm = Path(f"/proc/{p}/task/{tid}/comm").read_text().strip()
            except OSError:
                continue  # it ended meanwhile
            name = "event loop" if tid == p == tree[-1] else "main" if tid == p else "unnamed" if comm == process_name else comm
            out[(p, tid)] = (name if p == tree[-1] else f"{'parent' if p == tree[0] else p}: {name}", seconds)
    return out


def thread_cpu_by_name(before: dict[tuple[int, int], tuple[str, float]], after: dict[tuple[int, int], tuple[str, float]]) -> dict[str, float]:
    """Seconds each thread name spent between two `thread_seconds` (threads of one name summed; a thread
    started meanwhile counts from zero, one that ended meanwhile is missing)."""
    spent: dict[str, float] = {}
    for key, (name, seconds) in after.items():
        spent[name] = spent.get(name, 0.0) + seconds - before.get(key, (name, 0.0))[1]
    return spent


def pss_kib(pid: int) -> int:
    """Proportional set size of a process and its children: pages shared between them (granian forks
    its worker from a parent that has imported the same modules) counted once, not once per process."""
    total = 0
    for p in _tree(pid):
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] / 1e6


def _tag(message: type, name: str) -> int:
    """The first byte of a length-delimited field's key (fields 1-15)."""
    return message.DESCRIPTOR.fields_by_name[name].number << 3 | 2


_UPDATE, _TEXT_DELTA = _tag(pb.AgentServerMessage, "interaction_update"), _tag(pb.InteractionUpdate, "text_delta")


def is_text_delta(payload: bytes) -> bool:
    """Whether a serialized server message is a text delta, read off its first two keys: a reader
    of thousands of deltas a second counts their words without parsing each."""
    if payload[:1] != bytes((_UPDATE,)):
        return False
    at = 1
    while payload[at] & 0x80:  # the update's length (a varint)
        at += 1
    return len(payload) > at + 1 and payload[at + 1] == _TEXT_DELTA


@dataclass
class Samples:
    to_provider_ns: list[int] = field(default_factory=list)  # first append → provider has the request
    ttft_ns: list[int] = field(default_factory=list)  # first append → first text delta at the IDE

    def add(self, sample: tuple[int, int]) -> None:
        """One turn's (append → provider, append → first token)."""
        self.to_provider_ns.append(sample[0])
        self.ttft_ns.append(sample[1])


class Client:
    """One conversation as the IDE drives it: a keep-alive connection for appends and one for RunSSE."""

    def __init__(self, port: int, model: str = MODEL) -> None:
        self.port = port
        self.model = model
        self.conversation_id = uuid.uuid4().hex
        self.appender: Connection
        self.streamer: Connection
        self.lock = asyncio.Lock()  # the append connection carries one request at a time
        self.words = 0  # words of answer text read so far, every turn
        self.texted = asyncio.Event()  # set at the first answer text

    async def open(self) -> Client:
        self.appender = await Connection.open(HOST, self.port)
        self.streamer = await Connection.open(HOST, self.port)
        return self

    def close(self) -> None:
        self.appender.close()
        self.streamer.close()

    async def _reconnect(self) -> None:
        """A new connection for one the server closed while idle (a turn of 40 s outlasts its
        keep-alive), as an HTTP client does."""
        if self.appender.closed:
            self.appender = await Connection.open(HOST, self.port)
        if self.streamer.closed:
            self.streamer = await Connection.open(HOST, self.port)

    def run_message(self) -> pb.AgentClientMessage:
        """The turn's run request (a subclass may carry more, as the IDE's do)."""
        return run_request(TEXT, model=self.model, conversation_id=self.conversation_id)

    def seen(self, msg: pb.AgentServerMessage) -> None:
        """A message the turn's stream delivered, but for the text deltas after its first, which
        `read` counts the words of (a subclass may keep more of it)."""
        if msg.interaction_update.WhichOneof("message") == "text_delta":
            self.words += msg.interaction_update.text_delta.text.count("word")
            self.texted.set()

    async def start(self) -> Callable[[], Awaitable[tuple[int, int]]]:
        """Open RunSSE and send the turn's run request; returns `finish`, which reads the turn to its
        end and gives (append → provider, append → first token) in ns."""
        rid = uuid.uuid4().hex
        body = append_body(rid, 0, self.run_message())
        await self.lock.acquire()
        await self._reconnect()
        self.streamer.send(RUN_SSE, envelope(pb.BidiRequestId(request_id=rid).SerializeToString()))
        sent = time.monotonic_ns()
        self.appender.send(BIDI_APPEND, body)
        replied = asyncio.get_running_loop().create_task(self._first_reply())

        async def finish() -> tuple[int, int]:
            result = await self.read(rid, sent)
            await replied
            return result

        return finish

    async def read(self, rid: str, sent: int) -> tuple[int, int]:
        """Read the turn's RunSSE to its end (the connection is reused), acking blobs; (append →
        provider, append → first token) in ns."""
        decoder = hotpath.FrameDecoder()
        seqnos = iter(range(1, 1 << 30))
        result: tuple[int, int] | None = None
        ended = False
        async for chunk in self.streamer.chunks():
            now = time.monotonic_ns()
            for flags, payload in decoder.feed(chunk):
                if flags & hotpath.FLAG_END_STREAM:
                    ended = True
                    continue
                if result is not None and is_text_delta(payload):
                    self.words += payload.count(b"word")
                    continue
                msg = pb.AgentServerMessage.FromString(payload)
                self.seen(msg)
                if msg.WhichOneof("message") == "kv_server_message":
                    reply = pb.AgentClientMessage()
                    reply.kv_client_message.id = msg.kv_server_message.id
                    reply.kv_client_message.set_blob_result.SetInParent()
                    async with self.lock:
                        await self._reconnect()
                        status, _ = await self.appender.post(BIDI_APPEND, append_body(rid, next(seqnos), reply))
                    assert status == 200, status
                elif result is None and msg.interaction_update.WhichOneof("message") == "text_delta":
                    stamp = int(msg.interaction_update.text_delta.text.split("|", 1)[0])
                    result = (stamp - sent, now - sent)
        assert ended, "RunSSE ended without an end-of-stream frame"
        assert result is not None, "the turn ended without text"
        return result

    async def _first_reply(self) -> None:
        try:
            status, _ = await self.appender.reply()
            assert status == 200, status
        finally:
            self.lock.release()

    async def turn(self) -> tuple[int, int]:
        return await (await self.start())()


async def direct_turn(conn: Connection) -> tuple[int, int]:
    """The prebuilt request straight to the provider: (send → provider has it, send → first chunk)."""
    conn.send("/v1/chat/completions", BODY)
    sent = time.monotonic_ns()
    result: tuple[int, int] | None = None
    async for chunk in conn.chunks():
        if result is None:
            now = time.monotonic_ns()
            text = chunk.split(b'"content":"', 1)[1]
            result = (int(text.split(b"|", 1)[0]) - sent, now - sent)
    assert result is not None
    return result


async def concurrent(port: int, conversations: int, samples: int, *, direct: bool = False, client: type[Client] = Client) -> Samples:
    """`conversations` loops at once, each taking turns (TURNS per conversation, then a new one)."""
    per_loop = math.ceil(samples / conversations)
    out = Samples()

    async def think() -> None:
        if conversations > 1:
            await asyncio.sleep(random.uniform(0, THINK))

    async def loop() -> None:
        done = 0
        if direct:
            conn = await Connection.open(HOST, port)
            for _ in range(per_loop):
                await think()
                a, b = await direct_turn(conn)
                out.to_provider_ns.append(a)
                out.ttft_ns.append(b)
            conn.close()
            return
        while done < per_loop:
            conversation = await client(port).open()
            for _ in range(min(TURNS, per_loop - done)):
                await think()
                a, b = await conversation.turn()
                out.to_provider_ns.append(a)
                out.ttft_ns.append(b)
                done += 1
            conversation.close()

    await asyncio.gather(*(loop() for _ in range(conversations)))
    return out


async def burst(port: int, conversations: int, *, direct: bool = False, client: type[Client] = Client) -> Samples:
    """`conversations` first turns whose starts are spread evenly over one second (connections are
    open beforehand, as the IDE's are)."""
    out = Samples()
    if direct:
        conns = [await Connection.open(HOST, port) for _ in range(conversations)]
    else:
        clients = [await client(port).open() for _ in range(conversations)]
    begin = time.monotonic()

    async def one(i: int) -> None:
        await asyncio.sleep(max(0.0, begin + i / conversations - time.monotonic()))
        a, b = await (direct_turn(conns[i]) if direct else clients[i].turn())
        out.to_provider_ns.append(a)
        out.ttft_ns.append(b)

    await asyncio.gather(*(one(i) for i in range(conversations)))
    for c in conns if direct else clients:
        c.close()
    return out


async def post_once(port: int, path: str) -> str:
    """An empty POST on a connection of its own; the answer's body (which must be a 200)."""
    conn = await Connection.open(HOST, port)
    try:
        status, body = await conn.post(path, b"")
        assert status == 200
        return body.decode()
    finally:
        conn.close()


async def provider_control(port: int, what: str) -> str:
    return await post_once(port, f"/control/{what}")


async def journal_stats(port: int) -> tuple[int, int]:
    """The durable floor's commits so far and the loop CPU (ns) they took."""
    commits, cpu_ns = (await post_once(port, SqliteJournal.path)).split()
    return int(commits), int(cpu_ns)


async def commit_cpu_us(port: int, before: tuple[int, int]) -> float:
    """The durable floor's loop CPU (µs) per commit since `journal_stats` gave `before`."""
    commits, cpu_ns = await journal_stats(port)
    return (cpu_ns - before[1]) / 1e3 / max(commits - before[0], 1)


@dataclass
class CpuRates:
    process: float
    loop: float
    threads: dict[str, float]  # by thread name


async def idle_cpu_rate(pid: int, seconds: float = 1.0) -> CpuRates:
    """CPU per second of an idle server: the whole process's, its loop thread's, each thread name's."""
    before, loop_before, threads_before = cpu_seconds(pid), loop_thread_seconds(pid), thread_seconds(pid)
    await asyncio.sleep(seconds)
    threads = thread_cpu_by_name(threads_before, thread_seconds(pid))
    return CpuRates((cpu_seconds(pid) - before) / seconds, (loop_thread_seconds(pid) - loop_before) / seconds,
                    {name: spent / seconds for name, spent in threads.items()})


async def held_turns(provider_port: int, clients: list[Client], *, one_by_one: bool) -> Callable[[], Awaitable[None]]:
    """Start a turn on every client while the provider holds its answers, all at once or each once
    the provider has the one before; returns what releases and finishes them."""
    await provider_control(provider_port, "hold")
    base = int(await provider_control(provider_port, "count"))
    finishes = []
    for n, client in enumerate(clients, 1):
        finishes.append(await client.start())
        while one_by_one and int(await provider_control(provider_port, "count")) < base + n:
            await asyncio.sleep(0.0005)
    while int(await provider_control(provider_port, "count")) < base + len(clients):
        await asyncio.sleep(0.001)

    async def release() -> None:
        await provider_control(provider_port, "release")
        await asyncio.gather(*(finish() for finish in finishes))

    return release


async def warm_provider_pool(port: int, provider_port: int, connections: int, client: type[Client] = Client) -> None:
    """Leave `connections` kept-alive connections to the provider in the server's pool (as any
    server has after serving that many turns at once), so held starts do not each pay a connect."""
    clients = [await client(port).open() for _ in range(connections)]
    await (await held_turns(provider_port, clients, one_by_one=False))()
    for c in clients:
        c.close()


async def cpu_per_start(provider_port: int, pid: int, clients: list[Client]) -> tuple[float, float]:
    """Server CPU (µs) per run start, the process's and its loop thread's (see `cpu_per_start_by_thread`)."""
    rates = await cpu_per_start_by_thread(provider_port, pid, clients)
    return rates.process, rates.loop


async def cpu_per_start_by_thread(provider_port: int, pid: int, clients: list[Client], profile: Path | None = None) -> CpuRates:
    """Server CPU (µs) per run start: each client starts a turn, one after another, while the
    provider holds its answers; the next starts once the provider has the previous request. The
    process's, the loop thread's and each thread name's (idle rates taken off each).
    `profile`: py-spy samples the server over the starts into that file (raw collapsed stacks)."""
    idle = await idle_cpu_rate(pid)
    spy = None
    if profile is not None:
        spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid), "--rate", "1000",
                                "--gil", "--nonblocking", "--subprocesses", "--format", "raw", "--output", str(profile)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await asyncio.sleep(0.5)  # attached
    if CPROFILE:
        os.kill(_tree(pid)[-1], signal.SIGUSR1)  # cprofile_site starts profiling the loop thread
        await asyncio.sleep(0.2)
    started = time.monotonic()
    before, loop_before, threads_before = cpu_seconds(pid), loop_thread_seconds(pid), thread_seconds(pid)
    release = await held_turns(provider_port, clients, one_by_one=True)
    await asyncio.sleep(SETTLE_SECONDS)
    if CPROFILE:
        os.kill(_tree(pid)[-1], signal.SIGUSR2)  # … and writes its file
    elapsed = time.monotonic() - started
    spent = cpu_seconds(pid) - before - idle.process * elapsed
    loop_spent = loop_thread_seconds(pid) - loop_before - idle.loop * elapsed
    threads = thread_cpu_by_name(threads_before, thread_seconds(pid))
    if spy is not None:
        spy.send_signal(2)  # py-spy writes its file on SIGINT
        spy.wait(30)
    await release()
    per_start = 1e6 / len(clients)
    return CpuRates(spent * per_start, loop_spent * per_start,
                    {name: (seconds - idle.threads.get(name, 0.0) * elapsed) * per_start for name, seconds in threads.items()})


# ---- processes ----------------------------------------------------------------------------------
FLOOR_APPS = {  # the bare granian apps, by target name
    "floor": "benchmarks.support.bare_turn_app:app",
    "durable": "benchmarks.support.bare_durable_app:app",
    "bare": "benchmarks.support.bare_relay_app:app",
}


def granian(app: str, port: int) -> list[str]:
    """A bare ASGI app served as `cursor-byok serve` serves ours (uvloop, one worker)."""
    return [sys.executable, "-m", "granian", "--interface", "asgi", "--loop", "uvloop", "--host", HOST,
            "--port", str(port), "--workers", "1", "--no-ws", app]


def spawn(cmd: list[str], env: dict[str, str], port: int, health: str, log: Path) -> tuple[subprocess.Popen[bytes], float]:
    """Start a server; returns it and the seconds from spawn to its health check answering ready."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = started + 30
    while not answered(port, health, ready=True):  # ours: held until loaded, as the floor's backlog holds it
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{cmd} did not come up:\n{log.read_text()[-4000:]}")
        time.sleep(0.002)
    return proc, time.monotonic() - started


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(5)


def stop_all(procs: list[subprocess.Popen[bytes] | None], provider: subprocess.Popen[bytes]) -> None:
    """The servers that were spawned, then the fake provider."""
    for proc in procs:
        if proc is not None:
            stop(proc)
    provider.terminate()
    provider.wait(10)


@dataclass
class Target:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    up_seconds: float
    first_token_seconds: float = 0.0
    peak_rss_kib: int = 0
    peak_pss_kib: int = 0
    latency: dict[str, Samples] = field(default_factory=dict)
    cpu_us: dict[str, float] = field(default_factory=dict)
    loop_cpu_us: dict[str, float] = field(default_factory=dict)  # of that, the event loop's thread
    thread_cpu_us: dict[str, dict[str, float]] = field(default_factory=dict)  # … and each thread name's
    commit_cpu_us: float = 0.0  # the durable floor's: its commit's own loop CPU per held start


async def measure(target: Target, provider_port: int, spawned_at: float, ours: bool) -> None:
    pid = target.proc.pid
    first = await Client(target.port).open()
    await first.turn()
    target.first_token_seconds = time.monotonic() - spawned_at
    first.close()
    # Peak RSS over RSS_CONVERSATIONS conversations (8 at a time, TURNS turns each).
    work = asyncio.ensure_future(concurrent(target.port, 8, RSS_CONVERSATIONS * TURNS))
    while not work.done():
        target.peak_rss_kib = max(target.peak_rss_kib, rss_kib(pid))
        target.peak_pss_kib = max(target.peak_pss_kib, pss_kib(pid))
        await asyncio.sleep(0.05)
    await work
    target.peak_rss_kib = max(target.peak_rss_kib, rss_kib(pid))
    target.peak_pss_kib = max(target.peak_pss_kib, pss_kib(pid))
    for c in CONCURRENCY:
        target.latency[str(c)] = await concurrent(target.port, c, SAMPLES)
    target.latency[f"burst {BURST}"] = await burst(target.port, BURST)
    await warm_provider_pool(target.port, provider_port, HELD)
    clients = [await Client(target.port).open() for _ in range(HELD)]
    profile = {kind: Path(f"{PROFILE}-{target.name}-{kind.split()[0]}.txt") if PROFILE else None for kind in ("new conversation", "follow-up turn")}
    kinds = ("new conversation", "follow-up turn") if ours else ("new conversation",)  # the floor has no history
    for kind in kinds:
        journaled = await journal_stats(target.port) if target.name == "durable" else None
        rates = await cpu_per_start_by_thread(provider_port, pid, clients, profile[kind])
        target.cpu_us[kind], target.loop_cpu_us[kind], target.thread_cpu_us[kind] = rates.process, rates.loop, rates.threads
        if journaled is not None:
            target.commit_cpu_us = await commit_cpu_us(target.port, journaled)
    for c in clients:
        c.close()


@pytest.mark.timeout(1800)
@pytest.mark.benchmark(group="turn-start")
def test_turn_start_vs_floor(benchmark, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{SRC}", "CURSOR_BYOK_TEST_KEY": "sk-bench"}
    provider_port = free_port()
    provider = subprocess.Popen([sys.executable, "-m", "benchmarks.support.stamp_provider", str(provider_port), ANSWER_CHUNKS, ANSWER_INTERVAL_MS], env=env, cwd=ROOT)
    targets: list[Target] = []
    procs: list[subprocess.Popen[bytes]] = [provider]
    try:
        env["BENCH_PROVIDER_URL"] = f"http://{HOST}:{provider_port}/v1"
        wait_healthy(f"http://{HOST}:{provider_port}/control/count")
        config = ServerConfig(
            data_dir=tmp_path / "data",
            models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=f"http://{HOST}:{provider_port}/v1", max_output_tokens=1000)],
            continuation_window_seconds=0.02,
            extra_server={"max_transports": 4096},
        )
        config.data_dir.mkdir(parents=True)
        ours_port = free_port()
        config_path = config.data_dir / "config.toml"
        config_path.write_text(config.toml(ours_port))
        exe = Path(sys.executable).with_name("cursor-byok")
        servers = [("ours", [str(exe), "serve", "--config", str(config_path)], ours_port, "/__byok-api__/healthz")]
        for name in FLOORS:  # an unknown name fails here, with the provider stopped below
            port = free_port()
            servers.append((name, granian(FLOOR_APPS[name], port), port, "/healthz"))
        for name, cmd, port, health in servers:
            spawned_at = time.monotonic()
            proc_env = {**env, "PYTHONPATH": f"{env['PYTHONPATH']}:{CPROFILE_SITE}", DB_ENV: str(tmp_path / "durable.db")}  # site: names the server's threads
            if CPROFILE:
                proc_env["BENCH_CPROFILE_OUT"] = f"{CPROFILE}-{name}"
            proc, up = spawn(cmd, proc_env, port, health, tmp_path / f"{name}.log")
            procs.append(proc)
            target = Target(name, port, proc, up)
            targets.append(target)

            def run(target: Target = target, spawned_at: float = spawned_at) -> None:
                asyncio.run(measure(target, provider_port, spawned_at, target.name == "ours"))

            if name == "ours":
                benchmark.pedantic(run, rounds=1, iterations=1)
            else:
                run()
        direct = {str(c): asyncio.run(concurrent(provider_port, c, SAMPLES, direct=True)) for c in CONCURRENCY}
        direct[f"burst {BURST}"] = asyncio.run(burst(provider_port, BURST, direct=True))
    finally:
        for proc in procs:
            if proc is provider:
                proc.terminate()
                proc.wait(10)
            else:
                stop(proc)
    report(benchmark, targets[0], targets[1:], direct)


def report(benchmark, ours: Target, floors: list[Target], direct: dict[str, Samples]) -> None:  # type: ignore[no-untyped-def]
    info = benchmark.extra_info
    print(f"\nturn start: 2,000-word turns, {TURNS} turns per conversation, {SAMPLES} turns per level")
    print("ms, p50 / p99; added TTFT = TTFT − the direct call's; × = ours over that target")
    for key, ours_samples in ours.latency.items():
        d50, d99 = pct(direct[key].ttft_ns, 0.5), pct(direct[key].ttft_ns, 0.99)
        o50, o99 = pct(ours_samples.to_provider_ns, 0.5), pct(ours_samples.to_provider_ns, 0.99)
        print(f"-- {key} conversations")
        for t in (ours, *floors):
            samples = t.latency[key]
            a50, a99 = pct(samples.to_provider_ns, 0.5), pct(samples.to_provider_ns, 0.99)
            t50, t99 = pct(samples.ttft_ns, 0.5) - d50, pct(samples.ttft_ns, 0.99) - d99
            ratio = "" if t is ours else f" (ours × {o50 / a50:.2f} / {o99 / a99:.2f})"
            print(f"  {t.name:>7}: append→provider {a50:6.2f} / {a99:<6.2f}{ratio:<22} | added TTFT {t50:+6.2f} / {t99:+6.2f}")
            prefix = f"c{key}" if t is ours else f"c{key}_{t.name}"
            info.update({f"{prefix}_p50_ms": round(a50, 3), f"{prefix}_p99_ms": round(a99, 3),
                         f"{prefix}_ttft_added_p50_ms": round(t50, 3), f"{prefix}_ttft_added_p99_ms": round(t99, 3)})
    for kind, us in ours.cpu_us.items():
        line = f"server CPU per run start ({kind}), µs (event loop thread): ours {us:.0f} ({ours.loop_cpu_us[kind]:.0f})"
        for t in floors:  # a floor has no history: its new conversations' start is what a follow-up's is held to
            line += f"; {t.name} {t.cpu_us['new conversation']:.0f} ({t.loop_cpu_us['new conversation']:.0f}), ours × {us / t.cpu_us['new conversation']:.2f}"
        print(line)
        info[f"loop_cpu_us_per_start_{kind}"] = round(ours.loop_cpu_us[kind])
        info[f"cpu_us_per_start_{kind}"] = round(us)
    for t in floors:
        info[f"{t.name}_cpu_us_per_start"] = round(t.cpu_us["new conversation"])
        info[f"{t.name}_loop_cpu_us_per_start"] = round(t.loop_cpu_us["new conversation"])
    by_name = {t.name: t for t in floors}
    if {"durable", "floor"} <= set(by_name):
        durable, floor, new = by_name["durable"], by_name["floor"], "new conversation"
        durable_share(info, "ours", durable.commit_cpu_us, *((t.cpu_us[new], t.loop_cpu_us[new]) for t in (ours, durable, floor)))
    for t in (ours, *floors):
        for kind, threads in t.thread_cpu_us.items():
            shown = sorted(((us, name) for name, us in threads.items() if abs(us) >= 1), reverse=True)
            print(f"{t.name} CPU per start by thread ({kind}), µs: " + ", ".join(f"{name} {us:.0f}" for us, name in shown))
            info.update({f"{t.name}_thread_cpu_us_{kind}_{name}": round(us) for us, name in shown})
    for t in (ours, *floors):
        print(f"{t.name}: spawn → ready {t.up_seconds * 1000:.0f} ms, → first token {t.first_token_seconds * 1000:.0f} ms;"
              f" over {RSS_CONVERSATIONS} conversations peak RSS {t.peak_rss_kib / 1024:.1f} MiB, PSS {t.peak_pss_kib / 1024:.1f} MiB")
        info[f"{t.name}_cold_start_ms"] = round(t.up_seconds * 1000)
        info[f"{t.name}_first_token_ms"] = round(t.first_token_seconds * 1000)
        info[f"{t.name}_peak_rss_mib"] = round(t.peak_rss_kib / 1024, 1)
        info[f"{t.name}_peak_pss_mib"] = round(t.peak_pss_kib / 1024, 1)


def durable_share(info: dict[str, object], name: str, commit_us: float, ours: tuple[float, float], durable: tuple[float, float],
                  floor: tuple[float, float]) -> None:
    """Print how much of ours' (the server `name`'s) CPU per start above the floor's the one durable
    commit explains: by the commit's own loop CPU (timed inside the durable floor) and by the two
    floors' difference. Each of `ours`, `durable`, `floor`: CPU per new-conversation start, µs, and
    its event loop's."""
    gap, loop_gap = ours[0] - floor[0], ours[1] - floor[1]
    between, loop_between = durable[0] - floor[0], durable[1] - floor[1]
    print(f"{name}: the durable commit, per start: its own loop CPU {commit_us:.0f} µs (timed inside the durable floor);"
          f" durable − floor {between:+.0f} µs (loop {loop_between:+.0f}); {name} − floor {gap:+.0f} µs (loop {loop_gap:+.0f}):"
          f" by its own time the commit explains {commit_us / loop_gap:.0%} of the loop excess;"
          f" the floors' difference {between / gap:.0%} of the CPU excess, {loop_between / loop_gap:.0%} of the loop's")
    info.update({"durable_commit_loop_cpu_us": round(commit_us), "durable_minus_floor_cpu_us": round(between),
                 "durable_minus_floor_loop_cpu_us": round(loop_between),
                 f"{name}_minus_floor_cpu_us": round(gap), f"{name}_minus_floor_loop_cpu_us": round(loop_gap)})
