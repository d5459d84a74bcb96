"""The Python a new conversation's run request runs on the loop, from its hand-over to its model
request built (issue 35: a start's CPU is mostly the calls of this chain), counted, not timed: the
calls of the conversation domain's, the run engine's and the prompt compiler's own functions, and
the frames deep its provider call starts; apart, the store's (the start's writes queued and its
input committed on the loop)."""
from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

import cursor_byok

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import StreamLog, run_request
from tests.harness.inprocess import MODEL, Rig

PACKAGE = str(Path(cursor_byok.__file__).parent)
CHAIN = tuple(f"{PACKAGE}/{area}/" for area in ("conversation", "run", "prompting"))
STORE = (f"{PACKAGE}/store/",)


class ChainCalls:
    """Calls (and coroutine resumptions) of the chain's Python functions, and the built-in calls they
    make, while installed (`sys.setprofile`)."""

    def __init__(self, areas: tuple[str, ...] = CHAIN) -> None:
        self.areas = areas
        self.count = 0
        self.by_function: dict[str, int] = {}

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event in ("call", "c_call") and frame.f_code.co_filename.startswith(self.areas):
            self.count += 1
            name = f"{frame.f_code.co_filename[len(PACKAGE) + 1:]}:{frame.f_code.co_name}"
            if event == "c_call":
                name += f" → {getattr(arg, '__qualname__', arg)}"
            self.by_function[name] = self.by_function.get(name, 0) + 1


async def start_counted(rig: Rig, provider: FakeProviderServer, areas: tuple[str, ...] = CHAIN) -> ChainCalls:
    """A new conversation's run request handed over; the calls until `open_run` returns (its model
    request is built by then, waiting at most for its input's commit)."""
    provider.enqueue(OPENAI_CHAT.text(["an answer"]))
    conv, rid = uuid.uuid4().hex, uuid.uuid4().hex
    await rig.service.resolve(rid)
    await rig.store.flush()  # the store idle: the input commits on the loop, as a lone start's does
    request = run_request("a question", model=MODEL, conversation_id=conv).run_request
    counter = ChainCalls(areas)
    sys.setprofile(counter)
    try:
        rig.service.open_run(rid, request)
    finally:
        sys.setprofile(None)
    log = await asyncio.wait_for(rig.ide().stream(rid, StreamLog()), 10)
    assert log.terminal is None and log.text == "an answer"
    return counter


async def test_a_new_conversations_start_runs_few_calls_of_the_chain(rig: Rig, provider: FakeProviderServer) -> None:
    await start_counted(rig, provider)  # first-use work (imports, caches) out of the count
    counts = [await start_counted(rig, provider) for _ in range(3)]
    least = min(counts, key=lambda c: c.count)
    top = sorted(least.by_function.items(), key=lambda kv: -kv[1])[:25]
    assert least.count <= 275, f"{least.count} calls of the chain per start: {top}"


async def test_a_new_conversations_start_runs_few_calls_of_the_store(rig: Rig, provider: FakeProviderServer) -> None:
    """Its writes (the conversation's row, the input, the run's records) queued and the input
    committed on the loop: the store's Python around one commit, not a walk per write."""
    await start_counted(rig, provider, STORE)
    counts = [await start_counted(rig, provider, STORE) for _ in range(3)]
    least = min(counts, key=lambda c: c.count)
    top = sorted(least.by_function.items(), key=lambda kv: -kv[1])[:25]
    assert least.count <= 115, f"{least.count} calls of the store per start: {top}"
