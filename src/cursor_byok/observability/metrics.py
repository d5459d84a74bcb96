"""`GET /metrics`: the server's counters in the Prometheus text format (prometheus-client).

Runs, provider calls, tokens and tool round trips are counted when they end (never per delta). What
the gateway holds anyway (open RunSSE streams, active conversations, appends, its error replies) is
read when the page is scraped, so counting it costs the hot path nothing. prometheus-client (and
the exposition modules it brings) is imported on the first count or scrape, or by the warm-up
right after the server is up, whichever comes first; not at start.
"""
from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

import msgspec

from ..lazy import warm_after_start

if TYPE_CHECKING:
    from prometheus_client.core import Metric

warm_after_start("prometheus_client")

TOKEN_KINDS = ("input", "output", "cache_read", "cache_write", "reasoning")
# Seconds: from a fast local model's first token to a long reasoning answer.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0, 300.0)
TOOL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class GatewayGauges(msgspec.Struct, frozen=True):
    """What the gateway counts itself, read at scrape time."""

    active_conversations: Callable[[], int]
    open_streams: Callable[[], int]
    appends: Callable[[], int]
    appends_waiting: Callable[[], int]  # later appends waiting for their seqno 0
    runsse_waiting: Callable[[], int]  # RunSSE requests read, waiting for their request's first append
    requests_in_flight: Callable[[], int]  # HTTP requests being handled
    transports: Callable[[], int]  # request ids with a transport (until it expires)
    streams_retained: Callable[[], int]  # run streams whose output is kept for a (late) reader
    conversations_loaded: Callable[[], int]  # conversation runtimes in memory (until evicted when idle)
    edge_errors: Callable[[], Mapping[str, int]]  # Connect code → replies and stream terminals


class Metrics:
    def __init__(self, *, per_user: bool = False) -> None:
        """`per_user`: a team server's, whose run, call, token and cost counters carry a `user` label."""
        self.per_user = per_user
        self.run_errors: collections.Counter[str] = collections.Counter()  # failed runs by Connect code
        self._gateway: GatewayGauges | None = None

    @functools.cached_property
    def series(self) -> Series:
        return Series(self)

    def attach(self, gauges: GatewayGauges) -> None:
        self._gateway = gauges

    def render(self) -> tuple[bytes, str]:
        """The page and its content type."""
        from prometheus_client import generate_latest
        from prometheus_client.exposition import CONTENT_TYPE_LATEST

        return generate_latest(self.series.registry), CONTENT_TYPE_LATEST


class Series:
    """The counted series, in their registry."""

    def __init__(self, metrics: Metrics) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

        disable_created_metrics()  # a `_created` series beside every counter is noise here
        self.registry = CollectorRegistry()
        r = self.registry
        user = ["user"] if metrics.per_user else []  # a team server's developer ("" for none)
        self.runs = Counter("cursor_byok_runs", "Finished runs by model and outcome.", ["model", "outcome", *user], registry=r)
        self.calls = Counter(
            "cursor_byok_provider_calls", "Provider calls by model, provider kind and result (ok or the error kind).",
            ["model", "provider", "result", *user], registry=r,
        )
        self.cost = Counter(
            "cursor_byok_cost_usd", "USD spent on provider calls, as the configured prices price them (unpriced models count 0).",
            ["model", *user], registry=r,
        )
        self.ttft = Histogram(
            "cursor_byok_provider_ttft_seconds", "Provider calls: start to first text, thinking or tool call.",
            ["model"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.duration = Histogram(
            "cursor_byok_provider_call_duration_seconds", "Provider calls: start to end of the response.",
            ["model"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.tokens = Counter("cursor_byok_tokens", "Tokens by model and kind.", ["model", "kind", *user], registry=r)
        self.tool_round_trip = Histogram(
            "cursor_byok_tool_round_trip_seconds", "Tool calls: sent to the IDE (or started) to result.",
            ["tool"], buckets=TOOL_BUCKETS, registry=r,
        )
        r.register(_GatewayCollector(metrics))


class _GatewayCollector:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> list[Metric]:
        return []  # described at collection: these families are read live

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        errors = collections.Counter(self._metrics.run_errors)
        gauges = self._metrics._gateway
        if gauges is not None:
            errors.update(gauges.edge_errors())
            yield GaugeMetricFamily(
                "cursor_byok_active_conversations", "Conversations with a run in progress or queued.",
                value=gauges.active_conversations(),
            )
            yield GaugeMetricFamily("cursor_byok_runsse_streams_open", "RunSSE responses streaming now.", value=gauges.open_streams())
            yield CounterMetricFamily("cursor_byok_appends", "BidiAppend requests accepted.", value=gauges.appends())
            yield GaugeMetricFamily(
                "cursor_byok_appends_waiting", "BidiAppends waiting for their request's first append.", value=gauges.appends_waiting()
            )
            yield GaugeMetricFamily(
                "cursor_byok_runsse_waiting", "RunSSE requests waiting for their request's first append.", value=gauges.runsse_waiting()
            )
            yield GaugeMetricFamily(
                "cursor_byok_requests_in_flight", "HTTP requests being handled (a scrape counts itself).", value=gauges.requests_in_flight()
            )
            yield GaugeMetricFamily("cursor_byok_transports", "Request ids with a live transport.", value=gauges.transports())
            yield GaugeMetricFamily(
                "cursor_byok_runsse_streams_retained", "Run streams whose output is kept for a reader.", value=gauges.streams_retained()
            )
            yield GaugeMetricFamily(
                "cursor_byok_conversations_loaded", "Conversations held in memory (idle ones are let go).", value=gauges.conversations_loaded()
            )
        family = CounterMetricFamily("cursor_byok_errors", "Errors sent to clients, by Connect code.", labels=["code"])
        for code, count in sorted(errors.items()):
            family.add_metric([code], count)
        yield family
