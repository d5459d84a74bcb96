"""The pure parts of observability: cost from prices, cache-hit rate, phase timings, tool labels."""
from __future__ import annotations

import pytest

from cursor_byok.config import ModelPrice
from cursor_byok.observability import cache_hit_rate, cost
from cursor_byok.observability.recorder import phase_ms, tool_label


def test_cost_prices_each_kind_of_token_once() -> None:
    price = ModelPrice(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    # 1,000 prompt tokens of which 600 were read from the cache and 100 written to it.
    got = cost(price, input_tokens=1000, output_tokens=50, cache_read_tokens=600, cache_write_tokens=100)
    assert got == pytest.approx((300 * 3.0 + 600 * 0.3 + 100 * 3.75 + 50 * 15.0) / 1e6)
    assert cost(None, input_tokens=1000, output_tokens=1, cache_read_tokens=0, cache_write_tokens=0) is None


def test_cache_hit_rate_is_the_share_of_the_prompt_read_from_cache() -> None:
    assert cache_hit_rate(1000, 250) == 0.25
    assert cache_hit_rate(0, 0) is None


def test_phase_timings_sum_repeated_phases() -> None:
    ms = 1_000_000
    phases = [("preparing", 0), ("modeling", 5 * ms), ("waiting_tools", 20 * ms), ("modeling", 50 * ms), ("checkpointing", 70 * ms)]
    assert phase_ms(phases, 72 * ms) == {"preparing": 5, "modeling": 35, "waiting_tools": 30, "checkpointing": 2}
    assert phase_ms([], 1) == {}


def test_mcp_tools_share_one_metric_label() -> None:
    assert (tool_label("Read"), tool_label("mcp_weather_get_forecast")) == ("Read", "mcp")
