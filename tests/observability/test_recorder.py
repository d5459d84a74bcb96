"""The recorder against a real store: a run's calls and usage row land with the run's ids, a call
that ends after its run (cut by a cancel) is still recorded, and retention runs when it starts."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec

from cursor_byok.config import parse
from cursor_byok.conversation import ObservedRun, ObservedTool
from cursor_byok.observability import Metrics, Recorder
from cursor_byok.providers import CallError, ProviderCall, Usage
from cursor_byok.store import Store
from tests.conversation.test_memory_release import kinds, no_cycle_collector

CONFIG = {"models": [{"id": "m", "provider": "anthropic", "model": "claude"}]}


def ended_call(step: int, **fields: object) -> ProviderCall:
    call = ProviderCall("cycle", step)
    call.started_ns = call.ended_ns = time.monotonic_ns()
    for name, value in fields.items():
        setattr(call, name, value)
    return call


async def test_a_runs_calls_and_usage_row_and_a_late_call(tmp_path: Path) -> None:
    config = parse(CONFIG)
    store = await Store.open(tmp_path / "state.db")
    try:
        recorder = Recorder(config, store, Metrics())
        run = ObservedRun("conv", "run-1", "cursor-run", "req", "m", model=config.models[0])
        recorder.run_started(run)
        assert recorder.live == {"run-1": run}
        recorder.provider_call(run, ended_call(1, usage=Usage(input_tokens=10, output_tokens=2), stop_reason="tool_use"))
        recorder.tool_finished(run, ObservedTool("t1", "Grep", 100, 130, True))
        recorder.run_finished(run, "canceled", None, None)
        recorder.provider_call(run, ended_call(2, error=CallError.of(asyncio.CancelledError())))  # ended after the cancel
        await store.flush()
        calls = await store.list_calls(conversation_id="conv")
        [usage] = (await store.run_usage("conv")).values()
    finally:
        await store.close()
    assert recorder.live == {}
    assert [(c.trace_id, c.seq, c.run_id, c.request_id, c.cursor_run_id) for c in calls] == [
        (run.trace_id, 1, "run-1", "req", "cursor-run"), (run.trace_id, 2, "run-1", "req", "cursor-run")]
    assert msgspec.json.decode(calls[0].tools) == [{"id": "t1", "name": "Grep", "started_at_ms": 100, "ms": 30, "error": True}]
    assert (calls[0].input_tokens, calls[0].finish_reason, calls[1].error_kind) == (10, "tool_use", "canceled")
    assert (usage["trace_id"], usage["outcome"], usage["calls"], usage["tool_calls"]) == (run.trace_id, "canceled", 1, 1)


async def test_a_finished_run_leaves_nothing_for_the_cycle_collector(tmp_path: Path) -> None:
    """The run and what the recorder kept about it go by reference counting once the run is over and
    its last call recorded: a cycle between them would outlive the young collections while the run
    is live and wait, with its lists, for a middle or full pass (which then holds the loop the
    longer for every run that finished since)."""
    config = parse(CONFIG)
    store = await Store.open(tmp_path / "state.db")
    try:
        recorder = Recorder(config, store, Metrics())
        with no_cycle_collector() as garbage:
            run = ObservedRun("conv", "run-1", "cursor-run", "req", "m", model=config.models[0])
            recorder.run_started(run)
            recorder.provider_call(run, ended_call(1, usage=Usage(input_tokens=10, output_tokens=2), stop_reason="tool_use"))
            recorder.tool_finished(run, ObservedTool("t1", "Grep", 100, 130, False))
            recorder.provider_call(run, ended_call(2, usage=Usage(input_tokens=12, output_tokens=3)))
            recorder.run_finished(run, "completed", None, None)
            del run
        await store.flush()
    finally:
        await store.close()
    assert not kinds(garbage), kinds(garbage)
