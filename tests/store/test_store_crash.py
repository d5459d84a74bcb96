"""kill -9 while writing: every acknowledged (committed, then printed) event survives, once."""
from __future__ import annotations

import asyncio
import os
import random
import sys
from pathlib import Path

import pytest

import cursor_byok
from cursor_byok.store import Store

# The child acknowledges an event only after awaiting its commit future, like the runtime does
# before sending a frame. Each append also retries the writer's previous event (a redelivery),
# which must be reported as a duplicate rather than stored twice.
CHILD = r"""
import asyncio, os, sys
from cursor_byok.store import ConversationRecord, EventKind, NewEvent, Store

async def main(path, generation):
    store = await Store.open(path)
    for c in range(4):
        store.upsert_conversation(ConversationRecord(f"conv-{c}", 1, 1))

    async def writer(w):
        conv = f"conv-{w % 4}"
        previous = f"g{generation - 1}-w{w}-0" if generation else None
        i = 0
        while True:
            event_id = f"g{generation}-w{w}-{i}"
            events = [NewEvent(event_id, EventKind.TOOL_RESULT, os.urandom(1024 + (i * 37) % 3072))]
            if previous is not None:
                events.insert(0, NewEvent(previous, EventKind.TOOL_RESULT, b"redelivered"))
            result = await store.append_events(conv, events)
            if previous is not None and not result.results[0].duplicate:
                sys.stdout.write(f"{conv} {previous}\n")
            if i % 5 == 4:
                await store.put_checkpoint(conv, os.urandom(2048), kind="step")
            sys.stdout.write(f"{conv} {event_id}\n")
            sys.stdout.flush()
            previous = event_id
            i += 1

    await asyncio.gather(*(writer(w) for w in range(8)))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


async def _run_and_kill(db_path: Path | str, generation: int, kill_after: int) -> list[tuple[str, str]]:
    env = dict(os.environ)
    src = str(Path(cursor_byok.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(db_path), str(generation),
        stdout=asyncio.subprocess.PIPE, env=env,
    )
    assert proc.stdout is not None
    acknowledged: list[tuple[str, str]] = []
    try:
        while len(acknowledged) < kill_after:
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
            assert line.endswith(b"\n"), f"child exited early (rc={await proc.wait()})"
            conv, event_id = line.decode().split()
            acknowledged.append((conv, event_id))
    finally:
        proc.kill()  # SIGKILL: no flush, no close, no atexit
    rest = await proc.stdout.read()
    await proc.wait()
    # A line cut by the kill has no newline after it: only whole lines were acknowledged.
    complete, _, _cut = rest.rpartition(b"\n")
    for line in complete.split(b"\n"):
        if line:
            conv, event_id = line.decode().split()
            acknowledged.append((conv, event_id))
    return acknowledged


async def test_acknowledged_events_survive_sigkill(store_location: Path | str) -> None:
    await _crash_and_verify(store_location, generations=2, seed=7)  # crash, restart and crash again


@pytest.mark.soak
async def test_acknowledged_events_survive_repeated_sigkill(db_path: Path) -> None:
    await _crash_and_verify(db_path, generations=12, seed=11)


async def _crash_and_verify(db_path: Path | str, *, generations: int, seed: int) -> None:
    rng = random.Random(seed)
    acknowledged: list[tuple[str, str]] = []
    for generation in range(generations):
        acknowledged += await _run_and_kill(db_path, generation, kill_after=rng.randint(20, 400))

    store = await Store.open(db_path)
    try:
        stored: dict[str, list[str]] = {}
        for c in range(4):
            events = await store.load_events(f"conv-{c}")
            assert [e.seq for e in events] == list(range(1, len(events) + 1))  # gap-free
            stored[f"conv-{c}"] = [e.event_id for e in events]
            checkpoint = await store.latest_checkpoint(f"conv-{c}")
            if checkpoint is not None:
                assert checkpoint.through_event_seq <= len(events)
        for conv, ids in stored.items():
            assert len(ids) == len(set(ids)), f"duplicated events in {conv}"
        missing = [(conv, e) for conv, e in acknowledged if e not in stored[conv]]
        assert missing == []
        assert sum(map(len, stored.values())) >= len(set(acknowledged))
    finally:
        await store.close()
