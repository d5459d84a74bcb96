"""Start a coroutine now, in the caller's step, and give it a task only once it has to wait.

A task's first step runs one pass of the event loop later, behind whatever else is ready; a run
start is a chain of such steps (prepare, engine, provider call), so each would add a pass (and the
work of every other callback in it) before the model request leaves. Started here, a step runs to
its first real wait at once; a step that never waits costs no task at all. (Python 3.12's eager
task factory does the same for every task of a loop; this is the same idea for the few that need it.)

`start_now` runs that first step as the caller: `asyncio.current_task()` is still the caller's there,
so code started this way must not rely on it before its first wait. `start_task` runs it as a task
of its own (for code that binds time bounds to its task in its first step, as a provider call
does), now or in the pass that learns what it must not start before.
"""
from __future__ import annotations

import asyncio
import contextvars
from asyncio.tasks import _enter_task, _leave_task  # the swap 3.12's eager tasks make; no public API on 3.11
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
    return _StartedTask(_Continuation(coro, loop, (_YIELDED, waiting_on)), loop=loop)


def start_task(
    coro: Coroutine[Any, Any, T], after: asyncio.Future[Any] | None = None, *, name: str | None = None,
    context: contextvars.Context | None = None,
) -> asyncio.Task[T]:
    """A task for `coro` whose first step runs as that task (in its context) but without waiting a
    pass of the loop for it: now, or, while `after` is not done, in the pass that runs `after`'s
    callbacks (whatever its outcome: `coro` awaits it itself). Callbacks added to `after` before
    this run before that step. Cancelled before its first step, the task ends and `coro` never runs."""
    loop = asyncio.get_running_loop()
    continuation = _Continuation(coro, loop)
    context = contextvars.copy_context() if context is None else context
    task = _StartedTask(continuation, loop=loop, name=name, context=context)
    if after is None or after.done():
        context.run(continuation.first_step, task)
    else:
        after.add_done_callback(lambda _: context.run(continuation.first_step, task))
    return task


class _StartedTask(asyncio.Task[T]):
    """The task of a started coroutine. Until its first step it does not wait on what the coroutine
    waits on; cancelled then, it cancels that as a waiting task would (an inner task the coroutine
    awaits, say a provider call, would otherwise go on alone after the outer one ended)."""

    def cancel(self, msg: Any | None = None) -> bool:
        coro = self.get_coro()
        if isinstance(coro, _Continuation):
            coro.cancel_waited(msg)
        return super().cancel(msg)


_YIELDED, _RETURNED, _RAISED = range(3)  # how the coroutine's first step ended


class _Continuation(Coroutine[Any, Any, Any]):
    """A started coroutine as its task drives it. The coroutine's first step runs outside the task
    (`first_step`, or before the task was made), and its outcome is the `handoff` of the task's
    next step: what it waits on, its result or its error. A step of the task before the
    coroutine's first waits on a future of its own (a gate, which cancelling the task cancels
    alone); every other step (a value, or an error thrown in such as the task's cancellation) goes
    to the coroutine itself: once the handoff is taken, by the task straight to the coroutine's
    own `send` (set on the instance, which the task's step looks up first), so a provider call's
    task steps per streamed delta without a frame of this class."""

    __slots__ = ("_coro", "_loop", "handoff", "_gate", "_began", "__dict__")

    def __init__(self, coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop, handoff: tuple[int, Any] | None = None) -> None:
        self._coro = coro
        self._loop = loop
        self.handoff = handoff  # its first step's outcome, when it ran before this was made
        self._gate: asyncio.Future[None] | None = None
        self._began = handoff is not None  # the coroutine's first step has run (or it was closed before)

    def first_step(self, task: asyncio.Task[Any]) -> None:
        """Run the coroutine up to its first wait, as `task`; its task takes it from there."""
        if self._began or task.cancelling():  # cancelled before: the task's step ends it
            return
        self._began = True
        loop = self._loop
        caller = asyncio.current_task(loop)
        if caller is not None:
            _leave_task(loop, caller)
        _enter_task(loop, task)
        try:
            self.handoff = (_YIELDED, self._coro.send(None))
        except StopIteration as stop:
            self.handoff = (_RETURNED, stop.value)
        except (Exception, asyncio.CancelledError) as exc:
            self.handoff = (_RAISED, exc)
        finally:
            _leave_task(loop, task)
            if caller is not None:
                _enter_task(loop, caller)
        gate = self._gate
        if gate is not None and not gate.done():
            gate.set_result(None)  # the task, waiting for this step, takes the handoff next

    def send(self, value: Any) -> Any:
        handoff = self.handoff
        if handoff is not None:
            self.handoff = None
            self.send = self._coro.send  # type: ignore[method-assign]
            how, what = handoff
            if how is _YIELDED:
                return what
            if how is _RETURNED:
                raise StopIteration(what)
            try:
                raise what
            finally:
                del what, handoff  # an error going on out of here holds this frame
        if not self._began:  # the task's step before the coroutine's first: wait for it
            gate = self._gate = self._loop.create_future()
            gate._asyncio_future_blocking = True  # awaited, as `await gate` would mark it
            return gate
        return self._coro.send(value)

    def cancel_waited(self, msg: Any | None) -> None:
        """Before the task took the first step's handoff: cancel what the coroutine waits on when it
        is a task of its own (say a provider call); a plain future may be shared (the input's
        commit) and is left alone."""
        handoff = self.handoff
        if handoff is not None and handoff[0] is _YIELDED and isinstance(handoff[1], asyncio.Task):
            handoff[1].cancel(msg)

    def throw(self, *exc: Any) -> Any:  # type: ignore[override]
        self.handoff = None
        try:
            if not self._began:  # it never ran: it ends with what was thrown
                self._began = True
                self._coro.close()
                raise exc[0]  # the error asyncio throws in (an instance; a class is made one)
            return self._coro.throw(*exc)
        finally:
            del exc  # an error going on out of here holds this frame: holding it too would be a cycle

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, Any, Any]:
        raise TypeError("driven by its task only")
