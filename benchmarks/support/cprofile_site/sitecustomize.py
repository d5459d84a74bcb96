"""Loaded into a benchmarked server (on its PYTHONPATH).

Always: every Python thread the server starts gets its name (up to the first ':') as its OS name, so
a per-thread CPU account (/proc/PID/task/TID/comm) tells them apart in any checkout, also one whose
threads do not name themselves.

When BENCH_TIMELINE_OUT is set: `benchmarks.support.start_timeline` stamps the steps of each turn start.

When BENCH_GC_OUT is set: one line per garbage collection (generation, wall and CPU ns, on the loop
thread or not, objects collected) is appended to `<BENCH_GC_OUT>.<pid>`.

When BENCH_CPROFILE_OUT is set: SIGUSR1 starts cProfile on the main thread (the event loop's) with a
thread-CPU clock, SIGUSR2 stops it and writes `<BENCH_CPROFILE_OUT>-<n>.prof` (n counts from 1). A
thread-CPU clock charges a function only for the CPU its own thread spent in it, not for waits nor
for other threads holding the GIL. Every other Python thread is profiled (thread-CPU clock) for its
whole life; what it did between the two signals is written to `<BENCH_CPROFILE_OUT>-<n>-<thread
name>-<tid>.prof` (the difference of two snapshots of its counts, taken on the main thread).
"""
from __future__ import annotations

import cProfile
import gc
import marshal
import os
import re
import signal
import threading
import time
from typing import Any

_OUT = os.environ.get("BENCH_CPROFILE_OUT", "")
_GC_OUT = os.environ.get("BENCH_GC_OUT", "")
_state: dict[str, object] = {"profile": None, "count": 0}
_threads: dict[threading.Thread, cProfile.Profile] = {}  # every other thread's profiler
_marks: dict[threading.Thread, dict[Any, Any]] = {}  # their stats at SIGUSR1
_thread_run = threading.Thread.run


def _short(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name.split(":", 1)[0])[:15]


def _run(self: threading.Thread) -> None:
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write(_short(self.name))
    except OSError:
        pass
    if not _OUT:
        _thread_run(self)
        return
    profile = cProfile.Profile(time.thread_time_ns, 1e-9)
    _threads[self] = profile
    profile.enable()
    try:
        _thread_run(self)
    finally:
        profile.disable()


class _Entries:
    """What `cProfile.Profile.snapshot_stats` reads (`getstats`), for a profiler still running on its thread."""

    def __init__(self, entries: list[Any]) -> None:
        self.entries = entries
        self.stats: dict[Any, Any] = {}

    def getstats(self) -> list[Any]:
        return self.entries


def _stats(profile: cProfile.Profile) -> dict[Any, Any]:
    gc.disable()  # no collection (and no finalizer letting the profiled thread run) while reading its tree
    try:
        entries = profile.getstats()
    finally:
        gc.enable()
    snapshot = _Entries(entries)
    cProfile.Profile.snapshot_stats(snapshot)  # type: ignore[arg-type]
    return snapshot.stats


def _less(after: tuple[Any, ...], before: tuple[Any, ...] | None) -> tuple[Any, ...]:
    return after if before is None else tuple(a - b for a, b in zip(after, before))


def _difference(after: dict[Any, Any], before: dict[Any, Any]) -> dict[Any, Any]:
    out = {}
    for func, (cc, nc, tt, ct, callers) in after.items():
        was = before.get(func)
        counts = _less((cc, nc, tt, ct), None if was is None else was[:4])
        if counts[1]:
            was_callers = {} if was is None else was[4]
            new_callers = {f: _less(v, was_callers.get(f)) for f, v in callers.items()}
            out[func] = (*counts, {f: v for f, v in new_callers.items() if v[0]})
    return out


def _start(*_: object) -> None:
    for thread, thread_profile in list(_threads.items()):
        _marks[thread] = _stats(thread_profile)
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
        for thread, thread_profile in list(_threads.items()):
            stats = _difference(_stats(thread_profile), _marks.get(thread, {}))
            if stats:
                with open(f"{_OUT}-{_state['count']}-{_short(thread.name)}-{thread.native_id}.prof", "wb") as out:
                    marshal.dump(stats, out)


def _log_collections(path: str) -> None:
    fd = os.open(f"{path}.{os.getpid()}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    main = threading.main_thread().ident
    started = [0, 0]

    def collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0], started[1] = time.perf_counter_ns(), time.thread_time_ns()
            return
        wall, cpu = time.perf_counter_ns() - started[0], time.thread_time_ns() - started[1]
        on_main = int(threading.get_ident() == main)
        os.write(fd, f"{time.monotonic_ns()} {info['generation']} {wall} {cpu} {on_main} {info['collected']}\n".encode())

    gc.callbacks.append(collection)


threading.Thread.run = _run  # type: ignore[method-assign]
if _OUT:
    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
if os.environ.get("BENCH_TIMELINE_OUT"):  # a turn start's timeline (benchmarks/test_start_timeline.py)
    from benchmarks.support import start_timeline

    start_timeline.install()
if _GC_OUT:
    _log_collections(_GC_OUT)
