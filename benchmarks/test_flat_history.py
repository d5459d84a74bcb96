"""A follow-up turn's start at 5, 50 and 200 turns of history: its CPU must not grow with the
history (issue 13, "costs stay flat as history grows").

    .venv/bin/python -m pytest -q benchmarks/test_flat_history.py -s
    BENCH_SRC=<another checkout>/src .venv/bin/python -m pytest -q benchmarks/test_flat_history.py -s

Each history length gets a database of BENCH_FLAT_CONVERSATIONS=8 conversations of that many turns
(`tests/harness/synthetic_history.py`: 6 history events a turn, a user message, two tool rounds
and the answer, so 200 turns are 1,200 messages) and a real `cursor-byok serve` on it, against
`benchmarks/support/stamp_provider.py`. Each conversation takes two turns first (its history is
read again at the first, as after a restart; from the second on it is the conversation a long
session has in memory); like Cursor, the client sends each turn the last checkpoint it got. Then,
BENCH_FLAT_ROUNDS=6 times, every conversation starts a turn while the provider holds its answers,
one after another, and the server's CPU per start is taken as the turn-start benchmark takes it
(`cpu_per_start`: the whole process, and the event loop thread's own). With BENCH_SRC, the same
runs from that tree too, in one run: a server of each beside each other on the same history,
rounds alternating between them. Printed: µs per start per length, and 200 turns / 5 turns.
BENCH_CPROFILE=<prefix> profiles each round's starts on the servers' loop threads (thread-CPU
clock) into `<prefix>-<tree>-<turns>-<round>.prof`.
"""
from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchmarks.test_gateway import ROOT, wait_healthy
from benchmarks.test_scale import write_config
from benchmarks.test_turn_start import CPROFILE, CPROFILE_SITE, HOST, Client, cpu_per_start, spawn, stop, warm_provider_pool
from cursor_byok.protocol import agent_pb2 as pb
from tests.harness.server import free_port
from tests.harness.synthetic_history import conversation_id

LENGTHS = [int(n) for n in os.environ.get("BENCH_FLAT_TURNS", "5,50,200").split(",")]
CONVERSATIONS = int(os.environ.get("BENCH_FLAT_CONVERSATIONS", "8"))
ROUNDS = int(os.environ.get("BENCH_FLAT_ROUNDS", "6"))
EVENTS = 6
BEFORE = os.environ.get("BENCH_SRC", "")
TREES = {"after": str(ROOT / "src"), **({"before": BEFORE} if BEFORE else {})}


class CursorClient(Client):
    """A conversation's client that sends each turn the last checkpoint it got, as Cursor does."""

    state: pb.ConversationStateStructure | None = None

    def run_message(self) -> pb.AgentClientMessage:
        msg = super().run_message()
        if self.state is not None:
            msg.run_request.conversation_state.CopyFrom(self.state)
        return msg

    def seen(self, msg: pb.AgentServerMessage) -> None:
        if msg.WhichOneof("message") == "conversation_checkpoint_update":
            self.state = msg.conversation_checkpoint_update


@dataclass
class Server:
    tree: str
    turns: int
    port: int
    proc: subprocess.Popen[bytes]
    clients: list[CursorClient] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)
    loop_us: list[float] = field(default_factory=list)


def start_server(tree: str, src: str, turns: int, provider_port: int, tmp_path: Path) -> Server:
    data_dir = tmp_path / f"{tree}-{turns}"
    data_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{src}", "CURSOR_BYOK_TEST_KEY": "sk-bench"}
    if CPROFILE:  # each round's starts profiled on the loop thread: <BENCH_CPROFILE>-<tree>-<turns>-<round>.prof
        env = {**env, "PYTHONPATH": f"{env['PYTHONPATH']}:{CPROFILE_SITE}", "BENCH_CPROFILE_OUT": f"{CPROFILE}-{tree}-{turns}"}
    subprocess.run([sys.executable, "-m", "tests.harness.synthetic_history", str(data_dir / "state.db"), str(CONVERSATIONS),
                    str(turns), str(EVENTS)], env=env, cwd=ROOT, check=True, capture_output=True)
    port = free_port()
    config_path = write_config(data_dir, port, provider_port, src)
    exe = Path(sys.executable).with_name("cursor-byok")
    proc, _ = spawn([str(exe), "serve", "--config", str(config_path)], env, port, "/__byok-api__/healthz", data_dir / "server.log")
    return Server(tree, turns, port, proc)


async def prepare(server: Server, provider_port: int) -> None:
    await warm_provider_pool(server.port, provider_port, CONVERSATIONS)
    for index in range(CONVERSATIONS):
        client = await CursorClient(server.port).open()
        client.conversation_id = conversation_id(index)
        for _ in range(2):  # read again, then in memory; each sends back the checkpoint it got
            await client.turn()
        server.clients.append(client)


async def measure(servers: list[Server], provider_port: int) -> None:
    for server in servers:
        await prepare(server, provider_port)
    for server in servers:  # the server closes a connection idle past its header timeout: new ones
        for client in server.clients:
            client.close()
            await client.open()
    for round_ in range(ROUNDS):
        for server in servers[:: 1 if round_ % 2 == 0 else -1]:  # alternating which goes first
            # Bounded: a start that never reaches the provider fails the run instead of hanging it.
            cpu, loop = await asyncio.wait_for(cpu_per_start(provider_port, server.proc.pid, server.clients), 300)
            server.cpu_us.append(cpu)
            server.loop_us.append(loop)
    for server in servers:
        for client in server.clients:
            client.close()


@pytest.mark.timeout(1800)
@pytest.mark.benchmark(group="flat-history")
def test_follow_up_start_cpu_does_not_grow_with_the_history(benchmark, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{TREES['after']}"}
    provider_port = free_port()
    provider = subprocess.Popen([sys.executable, "-m", "benchmarks.support.stamp_provider", str(provider_port), "1", "1"], env=env, cwd=ROOT)
    wait_healthy(f"http://{HOST}:{provider_port}/control/count")
    results: dict[tuple[str, int], Server] = {}

    def run() -> None:
        for turns in LENGTHS:
            servers = [start_server(tree, src, turns, provider_port, tmp_path) for tree, src in TREES.items()]
            try:
                asyncio.run(measure(servers, provider_port))
            finally:
                for server in servers:
                    stop(server.proc)
            results.update({(s.tree, turns): s for s in servers})

    try:
        benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        provider.terminate()
        provider.wait(10)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"\nfollow-up start CPU, µs per start (median of {ROUNDS} rounds × {CONVERSATIONS} starts; process / event loop thread),"
          f" {EVENTS} history events a turn; load at the end {' '.join(load)}")
    for tree in TREES:
        row = {turns: results[tree, turns] for turns in LENGTHS}
        cells = "  ".join(f"{t} turns {statistics.median(s.cpu_us):>6.0f} / {statistics.median(s.loop_us):>5.0f}" for t, s in row.items())
        first, last = row[LENGTHS[0]], row[LENGTHS[-1]]
        ratio = statistics.median(last.cpu_us) / statistics.median(first.cpu_us)
        loop_ratio = statistics.median(last.loop_us) / statistics.median(first.loop_us)
        print(f"{tree:>6}: {cells}  | {LENGTHS[-1]} / {LENGTHS[0]} turns: {ratio:.2f} / {loop_ratio:.2f}")
        for turns, server in row.items():
            benchmark.extra_info[f"{tree}_{turns}_cpu_us"] = round(statistics.median(server.cpu_us))
            benchmark.extra_info[f"{tree}_{turns}_loop_us"] = round(statistics.median(server.loop_us))
        benchmark.extra_info[f"{tree}_loop_ratio"] = round(loop_ratio, 3)
