"""The sweep period follows the expiry times it serves: a short expiry is not overrun by it."""
from __future__ import annotations

from cursor_byok.config import ServerConfig
from cursor_byok.gateway import sweep_seconds


def test_default_expiries_are_swept_every_five_seconds() -> None:
    assert sweep_seconds(ServerConfig()) == 5.0


def test_a_short_expiry_is_swept_at_half_of_it() -> None:
    assert sweep_seconds(ServerConfig(transport_idle_seconds=0.5)) == 0.25
    assert sweep_seconds(ServerConfig(runtime_idle_seconds=3.0, output_retention_seconds=1.0)) == 0.5


def test_a_zero_expiry_does_not_make_the_sweep_spin() -> None:
    assert sweep_seconds(ServerConfig(output_retention_seconds=0.0)) == 0.1
