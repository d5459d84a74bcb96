"""The turn-start benchmarks' durable floor (`benchmarks/support/bare_durable_app.py`) is what it claims
to be: the floor plus one commit of the run request before the provider is called. Served by granian
as the benchmarks serve it, against a fake provider that looks into the journal the moment it has a
request; the IDE's side is the scripted IDE."""
from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import closing, suppress
from pathlib import Path

import httpx
import pytest

from tests.fakes import OPENAI_CHAT
from tests.fakes.server import FakeProviderServer, RecordedRequest, Reply
from tests.harness.ide import ScriptedIDE, StreamLog, run_request
from tests.harness.server import free_port

ROOT = Path(__file__).resolve().parents[2]


def journaled(db: Path) -> dict[str, bytes]:
    """The journal's rows as another connection reads them: what is committed."""
    with closing(sqlite3.connect(db)) as reader:
        return dict(reader.execute("SELECT request_id, message FROM appends"))


@pytest.fixture
def floor(tmp_path: Path) -> Iterator[tuple[str, FakeProviderServer, list[set[str]]]]:
    """The durable floor's base URL, its provider, and the request ids journaled as each provider
    request arrived."""
    db = tmp_path / "journal.db"
    at_arrival: list[set[str]] = []

    def answer(request: RecordedRequest) -> Reply:
        at_arrival.append(set(journaled(db)))
        return OPENAI_CHAT.text(["durable ", "words"])

    with FakeProviderServer() as provider:
        provider.respond_with(answer)
        port = free_port()
        env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}", "BENCH_PROVIDER_URL": provider.url + "/v1", "BENCH_DURABLE_DB": str(db)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "granian", "--interface", "asgi", "--loop", "uvloop", "--host", "127.0.0.1", "--port", str(port),
             "--workers", "1", "--no-ws", "benchmarks.support.bare_durable_app:app"],
            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        base_url = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client() as client:
                deadline, pause = time.monotonic() + 30, 0.005
                while True:  # start-up polled with a growing back-off, as the harness's servers
                    assert proc.poll() is None and time.monotonic() < deadline, "the durable floor did not come up"
                    try:
                        if client.get(base_url + "/healthz").status_code == 204:
                            break
                    except httpx.TransportError:
                        pass
                    time.sleep(pause)
                    pause = min(pause * 2, 0.05)
            yield base_url, provider, at_arrival
        finally:
            with suppress(ProcessLookupError):  # it may have ended (did not come up)
                os.killpg(proc.pid, 9)
            proc.wait(10)


async def turn(ide: ScriptedIDE, text: str) -> tuple[str, bytes, StreamLog]:
    """One turn through the floor: its request id, the run request's bytes, what its RunSSE read."""
    rid, message = uuid.uuid4().hex, run_request(text, model="bench", conversation_id=uuid.uuid4().hex)
    log = StreamLog()
    reader = asyncio.create_task(ide.stream(rid, log))
    assert (await ide.append(rid, message)).status_code == 200
    await asyncio.wait_for(reader, 15)
    return rid, message.SerializeToString(), log


async def test_the_run_request_is_committed_before_the_provider_has_it_and_a_failed_commit_calls_no_provider(
    floor: tuple[str, FakeProviderServer, list[set[str]]], tmp_path: Path
) -> None:
    base_url, provider, at_arrival = floor
    db = tmp_path / "journal.db"
    ide = ScriptedIDE(base_url)
    try:
        first, first_bytes, log = await turn(ide, "the first turn")
        assert log.text == "durable words" and log.finished
        assert at_arrival == [{first}]  # committed (another connection reads it) when the provider had the request
        # Another connection holds the write lock: the run request's commit fails, so does its append,
        # and no provider request is made.
        with closing(sqlite3.connect(db, isolation_level=None)) as locker:
            locker.execute("BEGIN IMMEDIATE")
            refused = await ide.append(uuid.uuid4().hex, run_request("not durable", model="bench", conversation_id=uuid.uuid4().hex))
            locker.execute("ROLLBACK")
        assert refused.status_code == 500
        # The next turn's provider request is the next the provider sees (a request made for the refused
        # append would have come before it, its turn not journaled).
        second, second_bytes, log = await turn(ide, "the second turn")
        assert log.text == "durable words"
        assert at_arrival == [{first}, {first, second}]
        assert journaled(db) == {first: first_bytes, second: second_bytes}  # the run requests' bytes as the IDE sent them
        assert len(provider.requests) == 2
    finally:
        await ide.close()
