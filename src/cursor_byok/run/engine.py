"""The generic model loop: model cycle → tool batch → results → next cycle, until the model stops.

The engine knows the provider, a ToolPort, a HistoryPort and an EventSink; it knows nothing of
Cursor. It commits only whole cycles (or, on a soft interrupt, the text streamed so far), so a hard
cancel (task cancellation) never leaves a partial commit behind.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, Literal

import msgspec

from ..config import ModelConfig
from ..prompting import CompactionPrompt, compaction_prompt
from ..providers import (
    CallError,
    ContextLengthError,
    Message,
    ModelRequest,
    Provider,
    ProviderCall,
    RefusalError,
    StreamEvent,
    TextPart,
    ToolCallPart,
    ToolSchema,
    Usage,
    add_usage,
)
from .compaction import CHARS_PER_TOKEN, fallback_summary, summary_transcript
from .cycle import Cycle, Summary, batch_outcomes, tool_call_request, tool_results_message
from .eager import start_task
from .events import CompactionFinished, CompactionStarted, ModelCycleFinished, ToolBatchFinished, ToolBatchStarted
from .ports import EventSink, HistoryPort, Interrupted, ToolPort
from .types import ToolCallRequest, ToolOutcome

RunStop = Literal["end_turn", "max_tokens", "max_cycles", "interrupted", "other"]

SUMMARY_MAX_TOKENS = 8_000
_MIN_SUMMARY_BUDGET_CHARS = 8_000


class RunSpec(msgspec.Struct, kw_only=True):
    model: ModelConfig
    system: str  # from prompting.compile_request
    tools: list[ToolSchema]  # from prompting.compile_request
    tools_chars: int | None = None  # their JSON size, when known (the compiled prompt's): else measured
    max_cycles: int = 200
    max_tokens: int | None = None  # default: model.max_output_tokens
    effort: str | None = None  # default: model.default_effort
    thinking_budget: int | None = None  # default: model.thinking_budget_tokens (0 = off)
    extra_params: dict[str, Any] = {}
    compaction_threshold: float = 0.9  # share of model.context_window that triggers compaction
    compaction: CompactionPrompt | None = None  # default: prompting.compaction_prompt()
    # Tool calls of a round that was in flight when an earlier run stopped: run before the model.
    pending_calls: list[ToolCallPart] = []


class RunResult(msgspec.Struct, frozen=True):
    stop_reason: RunStop
    usage_total: Usage | None  # summed over every provider call of the run, summaries included
    cycles: int  # model cycles started (summary calls not counted)


async def _drain(stream: AsyncIterator[StreamEvent], apply: Callable[[StreamEvent], None]) -> None:
    """Feed every event to `apply`; always close the stream (and so its HTTP response)."""
    close = getattr(stream, "aclose", None)
    try:
        async for event in stream:
            apply(event)
    finally:
        if close is not None:
            await close()


def _cancelling() -> bool:
    """The current task is being cancelled. (A helper: the task bound to a local of the frame its
    CancelledError goes out through would be a cycle, task → error → frame → task.)"""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class RunEngine:
    """Runs one model loop at a time. `interrupt()` is the soft interrupt; cancel the task running
    `run()` for a hard cancel."""

    def __init__(self, provider: Provider, *, keep_bodies: bool = False) -> None:
        """`keep_bodies`: the provider calls' records keep their request and response bodies."""
        self._provider = provider
        self._keep_bodies = keep_bodies
        self._interrupted = False  # a soft interrupt came since the cycle began
        self._cuttable: asyncio.Future[None] | None = None  # the provider call it cuts short
        self._active = False

    def interrupt(self) -> None:
        """Soft interrupt. During a model stream: end it now, keep its text, drop its tool calls.
        During a tool batch: nothing is cancelled (the ToolPort aborts its batch by raising
        Interrupted). Either way the engine takes queued injections at the next cycle boundary and
        continues; with nothing queued after an interrupted stream, the run ends "interrupted"."""
        self._interrupted = True
        if self._cuttable is not None:
            self._cuttable.cancel()

    async def run(self, spec: RunSpec, history: HistoryPort, tools: ToolPort, sink: EventSink) -> RunResult:
        if self._active:
            raise RuntimeError("RunEngine.run() is already running")
        self._active = True
        try:
            return await self._loop(spec, history, tools, sink)
        finally:
            self._active = False

    # ---- loop ------------------------------------------------------------------------------------
    async def _loop(self, spec: RunSpec, history: HistoryPort, tools: ToolPort, sink: EventSink) -> RunResult:
        model = spec.model
        threshold = int(model.context_window * spec.compaction_threshold)
        schema_chars = len(msgspec.json.encode(spec.tools)) if spec.tools_chars is None else spec.tools_chars
        estimator = history.estimator()  # the history's, kept across its runs: sizes only what is new
        estimator.for_run(len(spec.system) + schema_chars, (model.provider, model.model))
        usage_total: Usage | None = None
        cycles = 0
        finished: RunStop | None = None  # the model stopped; injections may still continue the run
        after_interrupt = False
        compacted = False  # compaction ran since the last completed cycle: do not repeat it
        overflow_retried = False

        if spec.pending_calls:
            await self._tool_round([tool_call_request(p.id, p.name, p.arguments) for p in spec.pending_calls], history, tools, sink)
        while True:
            self._interrupted = False
            injected = history.take_injections()
            if injected:
                history.commit_injected(injected)
                finished = None
            elif finished is not None:
                return RunResult(finished, usage_total, cycles)
            elif after_interrupt:
                return RunResult("interrupted", usage_total, cycles)
            after_interrupt = False
            if cycles >= spec.max_cycles:
                return RunResult("max_cycles", usage_total, cycles)

            messages = history.messages()
            if not compacted:
                estimate = estimator.estimate(messages)
                if estimate >= threshold:
                    done, usage = await self._compact(spec, history, sink, "threshold", estimate)
                    usage_total = add_usage(usage_total, usage)
                    if not done:
                        after_interrupt = True
                        continue
                    compacted = True
                    estimator.reset()
                    messages = history.messages()

            cycles += 1
            cycle = Cycle(sink, cycles, ProviderCall("cycle", cycles, keep_bodies=self._keep_bodies))
            try:
                # The request goes out before the cycle's start is reported: the IDE's step frames
                # are written while the provider works, not in front of the request.
                interrupted = await self._stream(self._request(spec, messages), cycle, sink, history.stored(), then=cycle.begin)
            except ContextLengthError:
                if overflow_retried or cycle.emitted:
                    raise
                cycle.begin()
                sink.emit(ModelCycleFinished(cycles, "context_length"))
                done, usage = await self._compact(spec, history, sink, "context_length", estimator.estimate(messages))
                usage_total = add_usage(usage_total, usage)
                if done:
                    overflow_retried = compacted = True
                    estimator.reset()
                else:
                    after_interrupt = True
                continue
            cycle.begin()
            compacted = False
            overflow_retried = False
            usage_total = add_usage(usage_total, cycle.usage)

            if interrupted:
                partial = cycle.partial_text()
                if partial is not None:
                    history.commit_assistant(partial, None)
                sink.emit(ModelCycleFinished(cycles, "interrupted"))
                after_interrupt = True
                continue

            if cycle.usage is not None and cycle.usage.input_tokens is not None:
                estimator.anchor(cycle.usage.input_tokens, messages)
            message = cycle.message()
            calls = cycle.tool_calls()
            if message.parts:
                history.commit_assistant(message, cycle.usage, answer=not calls)
            sink.emit(ModelCycleFinished(cycles, cycle.stop_reason))
            if not calls:
                stop = cycle.stop_reason
                finished = stop if stop == "end_turn" or stop == "max_tokens" else "other"
                continue
            await self._tool_round(calls, history, tools, sink)

    async def _tool_round(self, calls: list[ToolCallRequest], history: HistoryPort, tools: ToolPort, sink: EventSink) -> None:
        outcomes = await self._run_tools(calls, tools, sink)
        history.commit_tool_results(tool_results_message(outcomes))
        sink.emit(ToolBatchFinished(outcomes))

    def _request(self, spec: RunSpec, messages: list[Message]) -> ModelRequest:
        model = spec.model
        return ModelRequest(
            model=model.model, system=spec.system, messages=messages, tools=spec.tools,
            max_tokens=spec.max_tokens or model.max_output_tokens,
            effort=spec.effort or model.default_effort or None,
            thinking_budget=spec.thinking_budget or model.thinking_budget_tokens or None,
            extra_params=spec.extra_params,
        )

    async def _stream(
        self, request: ModelRequest, into: Cycle | Summary, sink: EventSink, ready: Awaitable[object] | None,
        then: Callable[[], None] | None = None,
    ) -> bool:
        """One provider call streamed into `into` (True: a soft interrupt cut it short, see
        `_interruptible`), sent once `ready` is done. However it ends, the sink is told what the
        call did."""
        call = into.call
        call.started_ns = time.monotonic_ns()
        interrupted = False
        try:
            after = ready if isinstance(ready, asyncio.Future) else None
            interrupted = await self._interruptible(_drain(self._provider.stream(request, call, ready), into.apply), then, after)
        except BaseException as exc:
            call.error = CallError.of(exc)
            raise
        finally:
            call.ended_ns = time.monotonic_ns()
            call.usage = into.usage
            call.stop_reason = None if call.error is not None else "interrupted" if interrupted else into.stop_reason
            sink.provider_call(call)
        return interrupted

    async def _interruptible(
        self, work: Coroutine[Any, Any, None], then: Callable[[], None] | None = None, after: asyncio.Future[Any] | None = None
    ) -> bool:
        """Run `work` until it finishes (False) or a soft interrupt cancels it (True). Its errors
        propagate; if the caller is cancelled, `work` is cancelled and awaited before returning.
        `work` runs in a task of its own (the provider's time bounds act on the task they are
        entered in) whose first step (the request sent) is not a pass of the loop later: now, or
        while `after` (the input's commit) is pending, in the pass that learns it. `then` is called
        once that first step has run, or, while the request waits for `after`, a pass later."""
        if self._interrupted:  # cut before it began: it never runs
            work.close()
            return True
        task = start_task(work, after)
        if then is not None:
            if after is None or after.done():
                then()  # the request has left
            else:
                asyncio.get_running_loop().call_soon(then)  # while it waits for the commit, as the request would
        # Cut by `interrupt()` directly: no watcher task and wait per provider call.
        self._cuttable = task
        try:
            await task  # the caller's cancellation cancels `task` and comes once it has ended
        except asyncio.CancelledError:
            if _cancelling():  # the caller was cancelled, not only `task`
                raise
            return True
        finally:
            self._cuttable = None
        return False

    async def _run_tools(self, calls: list[ToolCallRequest], tools: ToolPort, sink: EventSink) -> list[ToolOutcome]:
        sink.emit(ToolBatchStarted(calls))
        valid = [c for c in calls if c.parsed is not None]
        returned: list[ToolOutcome] = []
        interrupted = False
        if valid:
            try:
                returned = await tools.run_tools(valid)
            except Interrupted as exc:
                returned = exc.outcomes
                interrupted = True
        return batch_outcomes(calls, returned, interrupted)

    # ---- compaction ------------------------------------------------------------------------------
    async def _compact(
        self, spec: RunSpec, history: HistoryPort, sink: EventSink, reason: Literal["threshold", "context_length"],
        estimate: int,
    ) -> tuple[bool, Usage | None]:
        """Summarize the history with a tool-less call and reset the prefix. Returns (applied,
        usage); not applied when a soft interrupt arrived during the summary call."""
        sink.emit(CompactionStarted(reason, estimate))
        prompt = spec.compaction or compaction_prompt()
        model = spec.model
        max_tokens = min(model.max_output_tokens, SUMMARY_MAX_TOKENS)
        overhead = (len(prompt.system) + len(prompt.instruction)) // CHARS_PER_TOKEN
        budget_tokens = int(model.context_window * spec.compaction_threshold) - max_tokens - overhead
        budget_chars = max(_MIN_SUMMARY_BUDGET_CHARS, int(budget_tokens * CHARS_PER_TOKEN * 0.8))
        transcript = summary_transcript(history.messages(), budget_chars)
        request = ModelRequest(
            model=model.model,
            system=prompt.system,
            messages=[Message("user", [TextPart(
                f"<conversation>\n{transcript}\n</conversation>\n\n{prompt.instruction}"
            )])],
            tools=[],
            max_tokens=max_tokens,
            extra_params=spec.extra_params,
        )
        collected = Summary(ProviderCall("compaction", keep_bodies=self._keep_bodies))
        try:
            interrupted = await self._stream(request, collected, sink, history.stored())
        except (ContextLengthError, RefusalError):
            interrupted = False
            collected.chunks = []
        if interrupted:
            sink.emit(CompactionFinished("", applied=False))
            return False, collected.usage
        summary = "".join(collected.chunks).strip() or fallback_summary(transcript)
        history.compact(summary)
        sink.emit(CompactionFinished(summary))
        return True, collected.usage

