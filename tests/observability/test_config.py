"""The config keys of observability and model prices: defaults, and one line naming a bad key."""
from __future__ import annotations

import pytest

from cursor_byok.config import ConfigError, parse

MODEL = {"id": "m", "provider": "anthropic", "model": "claude"}


def test_defaults_record_with_retention_and_no_bodies() -> None:
    obs = parse({}).observability
    assert (obs.enabled, obs.detailed, obs.log_format) == (True, False, "text")
    retention = parse({}).retention
    assert (retention.calls_days, retention.usage_days) == (30, 400)
    assert parse({"models": [MODEL]}).models[0].price is None


@pytest.mark.parametrize(("data", "problem"), [
    ({"observability": {"log_format": "xml"}}, 'observability.log_format: expected "text" or "json"'),
    ({"retention": {"calls_days": -1}}, "retention.calls_days: must be >= 0"),
    ({"observability": {"detail": True}}, "observability.detail: unknown key"),
    ({"models": [{**MODEL, "price": {"input": "3"}}]}, "models[0].price.input: expected float, got string"),
    ({"models": [{**MODEL, "price": {"inputs": 3}}]}, "models[0].price.inputs: unknown key"),
    ({"models": [{**MODEL, "price": {"output": -1}}]}, "models[0].price: prices must be >= 0"),
])
def test_a_bad_key_is_named(data: dict, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(data)
    assert problem in str(caught.value)
