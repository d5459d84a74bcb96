"""One INFO line per finished run, and its usage row: what an operator reads to see that turns happen
and what they cost. Observation only: nothing here touches the lifecycle."""
from __future__ import annotations

import logging
import time
from typing import Any

from ..store import UsageRecord
from .active_run import ActiveRun
from .presenter import USAGE_FIELDS

log = logging.getLogger("cursor_byok.runs")


def report_run_finished(store: Any, conversation_id: str, run: ActiveRun, outcome: str, error_code: str | None) -> None:
    """Log the finished run (conversation, model, time to first output, tokens, tool calls, outcome,
    error code) and record its token usage when a model was called."""
    run_id, model, started_ms, presenter = run.run_id, run.model, run.started_ms, run.presenter
    now_ms = int(time.time() * 1000)
    ttft_ms = presenter.first_output_ms - started_ms if presenter.first_output_ms is not None else None
    tokens = {name: presenter.usage.get(name, 0) for name in USAGE_FIELDS}
    log.info(
        "run finished",
        extra={
            "conversation_id": conversation_id,
            "run_id": run_id,
            "model": model.id if model is not None else None,
            "outcome": outcome,
            "error_code": error_code,
            "ttft_ms": ttft_ms,
            "duration_ms": now_ms - started_ms,
            "input_tokens": tokens["input_tokens"],
            "output_tokens": tokens["output_tokens"],
            "tool_calls": presenter.tool_calls,
        },
    )
    if store is None or model is None or not presenter.usage:
        return
    store.record_usage(
        UsageRecord(
            model_id=model.id,
            provider=model.provider.value,
            created_at_ms=now_ms,
            run_id=run_id,
            conversation_id=conversation_id,
            ttft_ms=ttft_ms,
            duration_ms=now_ms - started_ms,
            **tokens,
        )
    )


__all__ = ["report_run_finished"]
