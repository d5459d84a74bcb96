"""What the server did: a record of every provider call and run (the store's `provider_calls` and
`usage` tables), Prometheus metrics, run ids on JSON log lines, and the dashboard at /ui/.

It subscribes to the conversation domain's events (`conversation.RunObserver`) and never changes a
run.
"""
from __future__ import annotations

from .costs import cache_hit_rate, cost
from .dashboard import UI_HEADERS, Dashboard, UiResponse, since_ms
from .logs import RUN_IDS, RunIdsFilter
from .metrics import GatewayGauges, Metrics
from .probe import DEFAULT_PROMPT, ModelTestResult, measure_model
from .recorder import Recorder
from .views import totals, usage, user_text

__all__ = [
    "DEFAULT_PROMPT",
    "RUN_IDS",
    "UI_HEADERS",
    "Dashboard",
    "GatewayGauges",
    "Metrics",
    "ModelTestResult",
    "Recorder",
    "RunIdsFilter",
    "UiResponse",
    "cache_hit_rate",
    "cost",
    "measure_model",
    "since_ms",
    "totals",
    "usage",
    "user_text",
]
