"""The observer of runs: one record per provider call and one usage row per run, written through the
store's writer (fire and forget), the run's metrics, its INFO line, and the runs in progress.

A call's record waits for the tool calls it asked for (their round trips belong in it) and is
written when the run's next call ends or the run does; so nothing is written while a delta streams.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec

from ..config import Config, ModelConfig
from ..conversation import ObservedRun, ObservedTool
from ..protocol import new_trace_id
from ..providers import ProviderCall
from ..store import CallRecord, UsageRecord
from .logs import RUN_IDS
from .metrics import TOKEN_KINDS, Metrics
from .views import priced

log = logging.getLogger("cursor_byok.runs")

_TOKEN_FIELDS = tuple(f"{kind}_tokens" for kind in TOKEN_KINDS)


class RunState(msgspec.Struct, gc=False):
    """What the recorder keeps about one run (on its ObservedRun, so a call that ends after its
    run finds it). Not the run itself: the two would hold each other, a cycle per run that outlives
    the young collections while the run is live and is then left to a middle or full one. (Nor
    tracked by the collector: it holds no object that could lead back to it.)"""

    calls: int = 0
    tokens: dict[str, int] = msgspec.field(default_factory=lambda: dict.fromkeys(_TOKEN_FIELDS, 0))
    first_token_ns: int = 0
    tool_calls: int = 0
    pending: dict[str, Any] | None = None  # the last call's record, waiting for its tools
    tools: list[dict[str, Any]] = msgspec.field(default_factory=list)
    finished: bool = False


class Recorder:
    def __init__(self, config: Config, store: Any, metrics: Metrics) -> None:
        self.config = config
        self.store = store
        self.metrics = metrics
        self.live: dict[str, ObservedRun] = {}  # runs in progress, by run id
        self.spent: Callable[[str, float], None] | None = None  # a team server's: told what each developer's calls cost

    # -- RunObserver ------------------------------------------------------------------------------------
    def run_started(self, run: ObservedRun) -> None:
        run.observer_state = RunState()
        self.live[run.run_id] = run
        RUN_IDS.set({
            "trace_id": run.trace_id, "conversation_id": run.conversation_id, "run_id": run.run_id, "request_id": run.request_id,
        })

    def provider_call(self, run: ObservedRun, call: ProviderCall) -> None:
        state: RunState = run.observer_state
        self._flush(state)
        state.calls += 1
        record = call_fields(run, call, state.calls)
        for name in _TOKEN_FIELDS:
            state.tokens[name] += record[name]
        if call.first_token_ns and not state.first_token_ns:
            state.first_token_ns = call.first_token_ns
        self._count_call(record)
        state.pending = record
        if state.finished:
            self._flush(state)

    def tool_finished(self, run: ObservedRun, tool: ObservedTool) -> None:
        state: RunState = run.observer_state
        state.tool_calls += 1
        ms = max(0, tool.ended_ms - tool.started_ms)
        state.tools.append({"id": tool.call_id, "name": tool.name, "started_at_ms": tool.started_ms, "ms": ms, "error": tool.is_error})
        self.metrics.series.tool_round_trip.labels(tool_label(tool.name)).observe(ms / 1000)

    def run_finished(self, run: ObservedRun, outcome: str, error_code: str | None, error_message: str | None) -> None:
        state: RunState = run.observer_state
        state.finished = True
        self.live.pop(run.run_id, None)
        self._flush(state)
        now_ns = time.monotonic_ns()
        duration_ms = (now_ns - run.started_ns) // 1_000_000
        ttft_ms = (state.first_token_ns - run.started_ns) // 1_000_000 if state.first_token_ns else None
        model_id = run.model.id if run.model is not None else run.requested_model
        tokens = state.tokens
        log.info(
            "run finished",
            extra={
                "conversation_id": run.conversation_id, "run_id": run.run_id, "trace_id": run.trace_id, "model": model_id,
                "outcome": outcome, "error_code": error_code, "ttft_ms": ttft_ms, "duration_ms": duration_ms,
                "input_tokens": tokens["input_tokens"], "output_tokens": tokens["output_tokens"],
                "cache_read_tokens": tokens["cache_read_tokens"], "calls": state.calls, "tool_calls": state.tool_calls,
            },
        )
        self.metrics.series.runs.labels(model_id, outcome, *self._user(run.developer)).inc()
        if error_code is not None:
            self.metrics.run_errors[error_code] += 1
        if self.store is not None and not self.store.closed:
            self.store.record_usage(UsageRecord(
                model_id=model_id,
                provider=run.model.provider.value if run.model is not None else "",
                created_at_ms=run.started_ms + duration_ms,
                run_id=run.run_id,
                conversation_id=run.conversation_id,
                ttft_ms=ttft_ms,
                duration_ms=duration_ms,
                trace_id=run.trace_id,
                outcome=outcome,
                error_code=error_code,
                calls=state.calls,
                tool_calls=state.tool_calls,
                phases=msgspec.json.encode(phase_ms(run.phases, now_ns)).decode(),
                user_name=run.developer,
                **tokens,
            ))
        RUN_IDS.set(None)

    # -- model tests (the dashboard's button) ---------------------------------------------------------------
    def test_call(self, model: ModelConfig, call: ProviderCall) -> None:
        run = ObservedRun("", "", "", "", model.id, model=model)
        record = call_fields(run, call, 1)
        record.update(conversation_id=None, run_id=None, cursor_run_id=None, request_id=None)
        self._count_call(record)
        self._write(record)

    # -- internals -------------------------------------------------------------------------------------------
    def _user(self, developer: str | None) -> tuple[str, ...]:
        """The `user` label's value, on a team server's counters."""
        return (developer or "",) if self.metrics.per_user else ()

    def _count_call(self, record: dict[str, Any]) -> None:
        m, model, user = self.metrics.series, record["model_id"], self._user(record["user_name"])
        m.calls.labels(model, record["provider"], record["error_kind"] or "ok", *user).inc()
        m.duration.labels(model).observe(record["duration_ms"] / 1000)
        if record["ttft_ms"] is not None:
            m.ttft.labels(model).observe(record["ttft_ms"] / 1000)
        for kind, name in zip(TOKEN_KINDS, _TOKEN_FIELDS):
            if record[name]:
                m.tokens.labels(model, kind, *user).inc(record[name])
        usd = priced(self.config, model, record)
        if usd:
            m.cost.labels(model, *user).inc(usd)
            if self.spent is not None and record["user_name"]:
                self.spent(record["user_name"], usd)

    def _flush(self, state: RunState) -> None:
        record, state.pending = state.pending, None
        if record is None:
            return
        if state.tools:
            record["tools"] = msgspec.json.encode(state.tools)
            state.tools = []
        self._write(record)

    def _write(self, record: dict[str, Any]) -> None:
        if self.store is not None and not self.store.closed:
            self.store.record_call(CallRecord(**record))


def call_fields(run: ObservedRun, call: ProviderCall, seq: int) -> dict[str, Any]:
    """A provider call's record (as CallRecord fields), from what the call and its run say."""
    start = call.started_ns

    def after(ns: int) -> int | None:
        return (ns - start) // 1_000_000 if ns else None

    usage, error, model = call.usage, call.error, run.model
    record: dict[str, Any] = {
        "trace_id": run.trace_id or new_trace_id(),
        "seq": seq,
        "conversation_id": run.conversation_id,
        "run_id": run.run_id,
        "cursor_run_id": run.cursor_run_id or None,
        "request_id": run.request_id,
        "model_id": model.id if model is not None else run.requested_model,
        "provider": call.provider_kind or (model.provider.value if model is not None else ""),
        "upstream_model": call.upstream_model or (model.model if model is not None else ""),
        "purpose": call.purpose,
        "step": call.step,
        "attempts": call.attempts,
        "started_at_ms": run.started_ms + (start - run.started_ns) // 1_000_000,
        "duration_ms": after(call.ended_ns) or 0,
        "ttfb_ms": after(call.response_ns),
        "first_event_ms": after(call.first_event_ns),
        "ttft_ms": after(call.first_token_ns),
        "finish_reason": call.stop_reason,
        "http_status": call.status if call.status is not None else error.status if error is not None else None,
        "provider_request_id": call.provider_request_id or (error.request_id if error is not None else None),
        "error_kind": error.kind if error is not None else None,
        "error_message": error.message if error is not None else None,
        "user_name": run.developer,
        "request_body": call.request_body,
        "response_body": bytes(call.response_body) if call.response_body is not None else None,
    }
    for name in _TOKEN_FIELDS:
        record[name] = (getattr(usage, name) or 0) if usage is not None else 0
    return record


def phase_ms(phases: list[tuple[str, int]], now_ns: int) -> dict[str, int]:
    """Milliseconds spent in each phase (a phase entered several times is summed)."""
    spent: dict[str, int] = {}
    for (phase, entered), (_, left) in zip(phases, [*phases[1:], ("", now_ns)]):
        spent[phase] = spent.get(phase, 0) + (left - entered) // 1_000_000
    return spent


def tool_label(name: str) -> str:
    """The metric label of a tool: MCP tools (names users define) share one."""
    return "mcp" if name.startswith("mcp_") else name
