"""The client's deadline on a call (`connect-timeout-ms`, gRPC-Web's `grpc-timeout`), which bounds
the call: a wait ends with deadline_exceeded once it passes. A stream's handler has its task
cancelled then (`cancels`), and tells that cancellation from a disconnect or a stop (`took`)."""
from __future__ import annotations

import asyncio
import math

from ..protocol import ConnectError

__all__ = ["Deadline"]


class Deadline:
    __slots__ = ("passed", "timeout_ms", "when", "_timer")

    def __init__(self, timeout_ms: int | None) -> None:
        """`timeout_ms` None: the client set none, and this one never passes."""
        self.timeout_ms = timeout_ms
        self.when = math.inf if timeout_ms is None else asyncio.get_running_loop().time() + timeout_ms / 1000
        self.passed = False
        self._timer: asyncio.TimerHandle | None = None

    @classmethod
    def of(cls, timeout_ms: int | None) -> Deadline:
        """The call's deadline; without a timeout the one shared deadline that never passes (a
        Connect request without one, the IDE's every append, allocates nothing)."""
        return _NEVER if timeout_ms is None else cls(timeout_ms)

    def remaining(self) -> float:
        return max(0.0, self.when - asyncio.get_running_loop().time())

    def error(self) -> ConnectError:
        return ConnectError("deadline_exceeded", f"the call's deadline ({self.timeout_ms} ms) passed")

    def cancels(self, task: asyncio.Task[object] | None) -> None:
        """Cancel `task` when the deadline passes (`stop` when the call is over)."""
        if self.when != math.inf and task is not None:
            self._timer = asyncio.get_running_loop().call_at(self.when, self._pass, task)

    def _pass(self, task: asyncio.Task[object]) -> None:
        self.passed = True
        task.cancel()

    def took(self, task: asyncio.Task[object] | None) -> bool:
        """Whether the cancellation `task` is in is the deadline's (then it is taken back)."""
        if not self.passed or task is None:
            return False
        task.uncancel()
        return True

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


_NEVER = Deadline(None)  # never armed: `cancels` does nothing without a timeout
