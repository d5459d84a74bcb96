"""Gateway streaming benchmark over loopback: N concurrent transports, each appending M messages and
streaming F text-delta frames, against the real `cursor-byok serve` and, in the same run, against a
bare granian ASGI app that streams the same frames with none of our logic (the floor).

Latency is from the moment a delta is produced (stamped with CLOCK_MONOTONIC by its producer: the
model provider for us, the app itself for the floor) to the client reading it.

    .venv/bin/python -m pytest benchmarks/test_gateway.py -s
    BENCH_TRANSPORTS=200 BENCH_APPENDS=50 BENCH_FRAMES=500 BENCH_INTERVAL_MS=5 (defaults)
"""
from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest


from cursor_byok import hotpath
from cursor_byok.protocol import agent_pb2 as pb
from benchmarks.support.rawhttp import Connection
from tests.harness.ide import BIDI_APPEND, RUN_SSE, append_body, envelope, heartbeat_message, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess, free_port

TRANSPORTS = int(os.environ.get("BENCH_TRANSPORTS", "200"))
APPENDS = int(os.environ.get("BENCH_APPENDS", "50"))
FRAMES = int(os.environ.get("BENCH_FRAMES", "500"))
INTERVAL_MS = float(os.environ.get("BENCH_INTERVAL_MS", "5"))
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Outcome:
    latencies_ns: list[int] = field(default_factory=list)
    frames: int = 0
    appends: int = 0
    seconds: float = 0.0
    rss_kib: int = 0
    cpu_seconds: float = 0.0  # the server's processes, over the scenario
    errors: list[str] = field(default_factory=list)

    def row(self) -> dict[str, float]:
        lat = sorted(self.latencies_ns)
        return {
            "frames_per_s": self.frames / self.seconds,
            "appends_per_s": self.appends / self.seconds,
            "p50_ms": lat[len(lat) // 2] / 1e6,
            "p99_ms": lat[int(len(lat) * 0.99)] / 1e6,
            "mean_ms": statistics.fmean(lat) / 1e6,
            "rss_mib": self.rss_kib / 1024,
            "cpu_us_per_delta": self.cpu_seconds * 1e6 / max(self.frames, 1),
        }


def _tree(pid: int) -> list[int]:
    """A process and its children (a server that runs the app in a worker process has one)."""
    try:
        return [pid, *(int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]
    except OSError:
        return [pid]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its children so far."""
    ticks = 0
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    """Resident memory of a process and its children."""
    total = 0
    for p in _tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


async def one_transport(host: str, port: int, model: str, out: Outcome) -> None:
    rid = uuid.uuid4().hex
    decoder = hotpath.FrameDecoder()
    seqnos = iter(range(1, 1 << 30))  # shared by heartbeats and blob acks, like the IDE's one counter
    appender = await Connection.open(host, port)
    streamer = await Connection.open(host, port)
    lock = asyncio.Lock()  # one keep-alive connection carries the appends, one at a time

    async def append(seqno: int, message: pb.AgentClientMessage) -> None:
        async with lock:
            status, _ = await appender.post(BIDI_APPEND, append_body(rid, seqno, message))
        assert status == 200, status
        out.appends += 1

    async def read() -> None:
        body = envelope(pb.BidiRequestId(request_id=rid).SerializeToString())
        async for chunk in streamer.stream(RUN_SSE, body):
            now = time.monotonic_ns()
            for flags, payload in decoder.feed(chunk):
                if flags & hotpath.FLAG_END_STREAM:
                    return
                msg = pb.AgentServerMessage.FromString(payload)
                if msg.WhichOneof("message") == "kv_server_message":
                    reply = pb.AgentClientMessage()
                    reply.kv_client_message.id = msg.kv_server_message.id
                    reply.kv_client_message.set_blob_result.SetInParent()
                    await append(next(seqnos), reply)
                elif msg.interaction_update.WhichOneof("message") == "text_delta":
                    for stamp in msg.interaction_update.text_delta.text.split("|"):
                        if stamp:
                            out.latencies_ns.append(now - int(stamp))
                            out.frames += 1

    async def write() -> None:
        await append(0, run_request("bench", model=model, conversation_id=uuid.uuid4().hex))
        spacing = FRAMES * INTERVAL_MS / 1000 / max(APPENDS, 1)
        for _ in range(1, APPENDS):
            await asyncio.sleep(spacing)
            await append(next(seqnos), heartbeat_message())

    try:
        await asyncio.gather(read(), write())
    except Exception as exc:  # record, so one broken transport is reported instead of tearing all down
        out.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        appender.close()
        streamer.close()


async def scenario(host: str, port: int, model: str, pid: int) -> Outcome:
    out = Outcome()
    peak = 0
    started = time.monotonic()
    cpu_before = cpu_seconds(pid)
    work = asyncio.gather(*(one_transport(host, port, model, out) for _ in range(TRANSPORTS)))
    while not work.done():
        peak = max(peak, rss_kib(pid))
        await asyncio.sleep(0.2)
    await work
    out.seconds = time.monotonic() - started
    out.cpu_seconds = cpu_seconds(pid) - cpu_before
    out.rss_kib = peak
    return out


def wait_healthy(url: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=0.5).status_code in (200, 204):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


@pytest.mark.timeout(1800)
@pytest.mark.benchmark(group="gateway")
def test_gateway_streaming_vs_bare_granian(benchmark, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}", "BENCH_FRAMES": str(FRAMES), "BENCH_INTERVAL_MS": str(INTERVAL_MS)}
    provider_port = free_port()
    provider = subprocess.Popen([sys.executable, "-m", "benchmarks.support.ts_provider", str(provider_port), str(FRAMES), str(INTERVAL_MS)], env=env, cwd=ROOT)
    env["BENCH_PROVIDER_URL"] = f"http://127.0.0.1:{provider_port}/v1"

    def granian(port: int, target: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "granian", "--interface", "asgi", "--loop", "uvloop", "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--no-ws", target],
            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    bare_port, proxy_port = free_port(), free_port()
    bare = granian(bare_port, "benchmarks.support.bare_app:app")
    bare_proxy = granian(proxy_port, "benchmarks.support.bare_proxy_app:app")
    config = ServerConfig(
        data_dir=tmp_path / "data",
        models=[ModelSpec(id="bench", provider="openai-chat", base_url=f"http://127.0.0.1:{provider_port}/v1", max_output_tokens=1000)],
        extra_server={"max_transports": TRANSPORTS * 4},
    )
    ours = ServerProcess(config)
    try:
        ours.start()
        wait_healthy(f"http://127.0.0.1:{bare_port}/healthz")
        wait_healthy(f"http://127.0.0.1:{proxy_port}/healthz")
        results: dict[str, Outcome] = {}

        def run_both() -> None:
            results["bare"] = asyncio.run(scenario("127.0.0.1", bare_port, "bench", bare.pid))
            results["proxy"] = asyncio.run(scenario("127.0.0.1", proxy_port, "bench", bare_proxy.pid))
            results["ours"] = asyncio.run(scenario("127.0.0.1", ours.port, "bench", ours.proc.pid))  # type: ignore[union-attr]

        benchmark.pedantic(run_both, rounds=1, iterations=1)
    finally:
        ours.stop()
        for proc in (provider, bare, bare_proxy):
            proc.terminate()
            proc.wait(10)
    o, b, p = results["ours"].row(), results["bare"].row(), results["proxy"].row()
    benchmark.extra_info.update({f"ours_{k}": round(v, 3) for k, v in o.items()})
    benchmark.extra_info.update({f"bare_{k}": round(v, 3) for k, v in b.items()})
    benchmark.extra_info.update({f"proxy_{k}": round(v, 3) for k, v in p.items()})
    benchmark.extra_info["p50_ratio"] = round(o["p50_ms"] / b["p50_ms"], 2)
    benchmark.extra_info["p50_ratio_vs_proxy"] = round(o["p50_ms"] / p["p50_ms"], 2)
    print(f"\n{TRANSPORTS} transports x {APPENDS} appends x {FRAMES} frames, {INTERVAL_MS} ms apart")
    print(f"{'':8}{'frames/s':>12}{'appends/s':>12}{'p50 ms':>10}{'p99 ms':>10}{'RSS MiB':>10}{'CPU µs/delta':>14}")
    for name, row in (("ours", o), ("bare", b), ("proxy", p)):
        print(f"{name:8}{row['frames_per_s']:>12.0f}{row['appends_per_s']:>12.0f}{row['p50_ms']:>10.2f}{row['p99_ms']:>10.2f}{row['rss_mib']:>10.1f}{row['cpu_us_per_delta']:>14.1f}")
    print(f"p50 latency ratio ours/bare: {o['p50_ms'] / b['p50_ms']:.2f}  p99 ratio: {o['p99_ms'] / b['p99_ms']:.2f}")
    print(f"p50 latency ratio ours/bare-proxy (same provider hop): {o['p50_ms'] / p['p50_ms']:.2f}  p99: {o['p99_ms'] / p['p99_ms']:.2f}")
    assert not any(r.errors for r in results.values()), {k: r.errors[:3] for k, r in results.items()}
    assert results["ours"].frames == TRANSPORTS * FRAMES  # every delta arrived
