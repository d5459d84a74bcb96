"""The OS's name for a store thread (Python's thread names stay inside Python): what `top -H`,
`ps -L` and /proc/PID/task/TID/comm show, so each thread's CPU can be told apart."""
from __future__ import annotations

import threading


def name_this_thread(name: str) -> None:
    """On Linux (elsewhere nothing): the calling thread's OS name, at most 15 bytes."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write(name[:15])
    except OSError:
        pass
