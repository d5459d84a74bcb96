"""What tokens cost, from the prices in the config, and how much of a prompt the cache served. Pure."""
from __future__ import annotations

from ..config import ModelPrice

PER_MILLION = 1_000_000


def cost(
    price: ModelPrice | None, *, input_tokens: int, output_tokens: int, cache_read_tokens: int, cache_write_tokens: int
) -> float | None:
    """USD for these tokens; None without a price. `input_tokens` is the whole prompt, cache reads
    and writes included (as every provider's usage is normalised), so they are priced apart."""
    if price is None:
        return None
    uncached = max(0, input_tokens - cache_read_tokens - cache_write_tokens)
    return (
        uncached * (price.input or 0.0)
        + cache_read_tokens * (price.cache_read or 0.0)
        + cache_write_tokens * (price.cache_write or 0.0)
        + output_tokens * (price.output or 0.0)
    ) / PER_MILLION


def cache_hit_rate(input_tokens: int, cache_read_tokens: int) -> float | None:
    """The share of prompt tokens read from the provider's cache; None without prompt tokens."""
    return cache_read_tokens / input_tokens if input_tokens > 0 else None
