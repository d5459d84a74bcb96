"""The reattach grace, in the runtime: it starts only when the run's stream has no reader left, a
reader coming back stops it, and a stream that ended has none (a short grace here: were it started
where it must not be, it would run out while the run still streams and cancel it)."""
from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import StreamLog, run_request
from tests.harness.inprocess import MODEL, Rig

SHORT = 0.01


def slow(pieces: int) -> object:
    reply = OPENAI_CHAT.text(["x"] * pieces)
    reply.chunk_delay = 0.03
    return reply


async def test_a_reader_leaving_while_another_reads_starts_no_grace(tmp_path: Path, provider: FakeProviderServer) -> None:
    rig = await Rig(tmp_path, provider, reattach_grace=SHORT).start()
    try:
        provider.enqueue(slow(12))
        ide, rid = rig.ide(), uuid.uuid4().hex
        leaving, staying, stop = StreamLog(), StreamLog(), asyncio.Event()
        left = asyncio.create_task(ide.stream(rid, leaving, stop=stop))
        stays = asyncio.create_task(ide.stream(rid, staying))
        await ide.append(rid, run_request("go", model=MODEL, conversation_id=uuid.uuid4().hex))
        while not leaving.text:
            await asyncio.sleep(0.01)
        stop.set()
        await left
        await asyncio.wait_for(stays, 10)
    finally:
        await rig.close()
    assert staying.terminal is None and staying.text == "x" * 12


async def test_a_reader_back_stops_the_grace(tmp_path: Path, provider: FakeProviderServer) -> None:
    """The reader leaves and another comes: the grace the leaving one started is stopped (a long
    one here: only the reader coming back can stop it), and the run goes on to its end."""
    rig = await Rig(tmp_path, provider, reattach_grace=60.0).start()
    try:
        provider.enqueue(slow(20))
        ide, rid, conv = rig.ide(), uuid.uuid4().hex, uuid.uuid4().hex
        first, stop = StreamLog(), asyncio.Event()
        reader = asyncio.create_task(ide.stream(rid, first, stop=stop))
        await ide.append(rid, run_request("go", model=MODEL, conversation_id=conv))
        while not first.text:
            await asyncio.sleep(0.01)
        stop.set()
        await reader
        runtime = rig.runtime(conv)
        run = runtime.run if runtime is not None else None
        assert run is not None and run.unread is not None  # the grace runs
        log = await asyncio.wait_for(ide.stream(rid, StreamLog()), 10)
    finally:
        await rig.close()
    assert log.terminal is None and log.text == "x" * 20
    assert run.unread is None
