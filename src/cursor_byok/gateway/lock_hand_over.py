"""How soon the interpreter hands its lock to another thread that waits for it.

The store's writer thread lets go of the lock around each SQLite call and must take it back after.
With the event loop busy (conversations streaming), a thread waiting for the lock gets it only when
the switch interval runs out: CPython's default, 5 ms, per SQLite call. A run start whose commit went
to the writer thread (the store busy with other turns' writes) then waited tens of ms under 32 fast
streams. At 0.5 ms the same starts' TTFT p50 fell from ~89 to ~26-30 ms (the bare relay app: 17-20),
streamed words/s and CPU per start unchanged (`benchmarks/test_turn_start_load.py`, two runs with
the order swapped; `benchmarks/results/gateway.md`).
"""
from __future__ import annotations

import sys

SWITCH_INTERVAL_SECONDS = 0.0005


def hand_over_the_lock_often() -> None:
    """For the serving process: called once it serves."""
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
