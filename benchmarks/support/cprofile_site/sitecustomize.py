"""Loaded into a benchmarked server (on its PYTHONPATH) when BENCH_CPROFILE_OUT is set: SIGUSR1
starts cProfile on the main thread (the event loop's) with a thread-CPU clock, SIGUSR2 stops it and
writes `<BENCH_CPROFILE_OUT>-<n>.prof` (n counts from 1). A thread-CPU clock charges a function only
for the CPU its own thread spent in it, not for waits nor for other threads holding the GIL."""
from __future__ import annotations

import cProfile
import os
import signal
import time

_OUT = os.environ.get("BENCH_CPROFILE_OUT", "")
_state: dict[str, object] = {"profile": None, "count": 0}


def _start(*_: object) -> None:
    profile = cProfile.Profile(time.thread_time_ns, 1e-9)
    _state["profile"] = profile
    profile.enable()


def _stop(*_: object) -> None:
    profile = _state["profile"]
    if isinstance(profile, cProfile.Profile):
        profile.disable()
        _state["count"] = int(_state["count"]) + 1  # type: ignore[call-overload]
        profile.dump_stats(f"{_OUT}-{_state['count']}.prof")
        _state["profile"] = None


if _OUT:
    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
