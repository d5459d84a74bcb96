"""A graceful stop when the stop signal reaches granian's worker process itself.

Ctrl-C in a terminal signals the whole foreground process group and systemd (KillMode=
control-group) the whole cgroup, so the worker sees SIGINT/SIGTERM at the same moment as the main
process. Granian's worker then stops serving at once, cutting every open RunSSE before our lifespan
shutdown can end it with its terminal frame, and the main process's drain request finds nobody to
answer. Granian offers no hook for this, so the worker's loop-signal installer (an internal it calls
after loading the app) is wrapped: the first signal drains and leaves the stopping to the main
process, which signals the worker once more when it stops its workers (stopping on our own would
make granian count the worker as crashed and exit 1, which systemd reports as a failed stop). If no
second signal comes (the worker alone was signalled), the worker stops by itself after a grace
period.
"""
from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("cursor_byok.gateway")

ALONE_GRACE_SECONDS = 10.0  # a worker signalled alone waits this long for the main process to stop it


def drain_before_worker_stops(drain: Callable[[], Awaitable[None]], drained: Callable[[], bool]) -> bool:
    """Install the wrapper in this (worker) process. `drained()` tells whether a drain already ran
    (the main process asks for one before it stops the workers): then a signal stops at once.
    False if granian no longer has the internal: then only a signal sent to the main process alone
    is drained (its drain request still works)."""
    try:
        import granian._signals as granian_signals

        install = granian_signals.set_loop_signals
    except (ImportError, AttributeError):
        log.warning("granian's worker signal hook is gone: a stop signal sent to the whole process group will cut open streams")
        return False
    if getattr(install, "_drains", False):
        return True
    pending: set[asyncio.Task[None]] = set()

    def set_loop_signals(loop: asyncio.AbstractEventLoop) -> Any:
        stop = install(loop)  # granian's own: a WorkerSignal its server stops on
        draining = False

        def on_signal() -> None:
            nonlocal draining
            if draining or drained():
                stop.set()  # asked twice, or the main process drained us first: stop now
                return
            draining = True
            task = loop.create_task(_drain_then(drain, lambda: loop.call_later(ALONE_GRACE_SECONDS, stop.set)))
            pending.add(task)
            task.add_done_callback(pending.discard)

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        return stop

    set_loop_signals._drains = True  # type: ignore[attr-defined]
    granian_signals.set_loop_signals = set_loop_signals
    return True


async def _drain_then(drain: Callable[[], Awaitable[None]], then: Callable[[], object]) -> None:
    try:
        await drain()
    except Exception:  # noqa: BLE001 - stopping must not depend on a clean drain
        log.exception("drain on stop signal failed")
    finally:
        then()
