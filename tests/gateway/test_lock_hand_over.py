"""While serving, the interpreter hands its lock to a waiting thread within half a millisecond, not
CPython's default 5 ms: the store's writer thread takes the lock back after each SQLite call, and
with the event loop busy streaming it waited the whole interval each time (a run start's commit on
that thread took tens of ms under 32 fast streams; benchmarks/test_turn_start_load.py)."""
from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from cursor_byok.gateway.lock_hand_over import SWITCH_INTERVAL_SECONDS, hand_over_the_lock_often


@pytest.fixture
def interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_serving_hands_the_interpreter_lock_over_within_half_a_millisecond(interval: None) -> None:
    sys.setswitchinterval(0.005)  # CPython's default
    hand_over_the_lock_often()
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_SECONDS)
    assert SWITCH_INTERVAL_SECONDS <= 0.0005
