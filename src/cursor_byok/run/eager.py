"""Start a coroutine now, in the caller's step, and give it a task only once it has to wait.

A task's first step runs one pass of the event loop later, behind whatever else is ready; a run
start is a chain of such steps (prepare, engine, provider call), so each would add a pass (and the
work of every other callback in it) before the model request leaves. Started here, a step runs to
its first real wait at once; a step that never waits costs no task at all. (Python 3.12's eager
task factory does the same for every task of a loop; this is the same idea for the few that need it.)

While it runs here, `asyncio.current_task()` is still the caller's: code that starts this way must
not rely on it before its first wait.
"""
from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


def start_now(coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
    """Run `coro` up to its first wait now. Returns a finished future when it did not wait (its
    result or error), else the task that carries on from that wait (cancel it as any task)."""
    loop = asyncio.get_running_loop()
    try:
        waiting_on = coro.send(None)
    except StopIteration as stop:
        done: asyncio.Future[T] = loop.create_future()
        done.set_result(stop.value)
        return done
    except asyncio.CancelledError:
        failed: asyncio.Future[T] = loop.create_future()
        failed.cancel()
        return failed
    except Exception as exc:  # handed to whoever awaits the future, as a task would
        failed = loop.create_future()
        failed.set_exception(exc)
        return failed
    return _StartedTask(_Continuation(coro, waiting_on), loop=loop)


class _StartedTask(asyncio.Task[T]):
    """The task of a started coroutine. Until its first step it does not wait on what the coroutine
    waits on; cancelled then, it cancels that as a waiting task would (an inner task the coroutine
    awaits, say a provider call, would otherwise go on alone after the outer one ended)."""

    def cancel(self, msg: Any | None = None) -> bool:
        coro = self.get_coro()
        if isinstance(coro, _Continuation):
            coro.cancel_waited(msg)
        return super().cancel(msg)


class _Continuation(Coroutine[Any, Any, Any]):
    """The rest of a started coroutine, as a task drives it: its first step hands the task what the
    coroutine waits on; every later one (a value, or an error thrown in such as the task's
    cancellation, even before that first step) goes to the coroutine itself."""

    __slots__ = ("_coro", "_waiting_on", "_handed")

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting_on: Any) -> None:
        self._coro = coro
        self._waiting_on: Any = waiting_on
        self._handed = False

    def send(self, value: Any) -> Any:
        if self._handed:
            return self._coro.send(value)
        self._handed = True
        waiting_on, self._waiting_on = self._waiting_on, None
        return waiting_on

    def cancel_waited(self, msg: Any | None) -> None:
        """Before the first step: cancel what the coroutine waits on when it is a task of its own
        (say a provider call); a plain future may be shared (the input's commit) and is left alone."""
        if not self._handed and isinstance(self._waiting_on, asyncio.Task):
            self._waiting_on.cancel(msg)

    def throw(self, *exc: Any) -> Any:  # type: ignore[override]
        self._handed = True
        self._waiting_on = None
        try:
            return self._coro.throw(*exc)
        finally:
            del exc  # an error going on out of here holds this frame: holding it too would be a cycle

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, Any, Any]:
        raise TypeError("driven by its task only")
