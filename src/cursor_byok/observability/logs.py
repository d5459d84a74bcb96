"""The ids of the run a log record belongs to, for JSON logs: set once when a run starts, in the
runtime task that drives it; every task it starts inherits them (asyncio copies the context), so
the engine's, the provider's and the tools' records carry them too."""
from __future__ import annotations

import contextvars
import logging

RUN_IDS: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("cursor_byok_run_ids", default=None)


class RunIdsFilter(logging.Filter):
    """Adds trace_id, conversation_id, run_id and request_id to every record made inside a run
    (fields a record already has, from `extra=`, win)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ids = RUN_IDS.get()
        if ids:
            fields = record.__dict__
            for key, value in ids.items():
                fields.setdefault(key, value)
        return True
