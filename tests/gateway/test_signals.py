"""The worker-side stop hook (the stop-signal e2e tests cover what it does; these cover installing it)."""
from __future__ import annotations

import granian._signals as granian_signals
import pytest

from cursor_byok.gateway.signals import drain_before_worker_stops


async def nothing() -> None:
    return None


def test_installing_twice_wraps_granian_once(monkeypatch: pytest.MonkeyPatch) -> None:
    original = granian_signals.set_loop_signals
    monkeypatch.setattr(granian_signals, "set_loop_signals", original)
    assert drain_before_worker_stops(nothing, lambda: False)
    wrapped = granian_signals.set_loop_signals
    assert wrapped is not original
    assert drain_before_worker_stops(nothing, lambda: False)
    assert granian_signals.set_loop_signals is wrapped


def test_a_granian_without_the_hook_is_reported_not_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(granian_signals, "set_loop_signals")
    assert drain_before_worker_stops(nothing, lambda: False) is False
