"""How commands reach a conversation's runtime: one at a time, in order. One that comes while the
runtime is free (nothing queued ahead, nothing being handled) is taken in the step it comes in
(`take_now`); any other waits in a queue, taken by a task made when the first one has to wait (a
deque and a future, not asyncio.Queue: most commands never wait in it). What a command means is
the runtime's (`_take`); nothing here changes a conversation's lifecycle. So is how the end of a
step of a run (its prepare, its engine, its final checkpoint) comes back as a command (`_step`).
"""
from __future__ import annotations

import abc
import asyncio
import collections
import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

from ..run import start_now
from .commands import ClientInput, Command
from .output import OutputStream

StepDone = Callable[[str, BaseException | None, Any], Command]  # (run id, error, result) → the command its end is


class CommandInbox(abc.ABC):
    """The runtime's base: it defines `_take(cmd)` (True: the runtime ends), which sets `_taking`
    while it handles a command with `_handle(cmd)`."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: collections.deque[Command] = collections.deque()
        self._task: asyncio.Task[None] | None = None  # consumes the queue; made when a command first waits in it
        self._wake: asyncio.Future[None] | None = None  # what the task waits on while the queue is empty
        self._open = False  # started and not stopped: commands are taken
        self._taking = False  # a command is being handled (one at a time: a take_now then queues)
        self.held = False  # input that came together is being handed over: taken once all of it is in
        self._context = contextvars.copy_context()
        self._first_step = False  # `_step` runs a step up to its first wait: one that ends there is returned
        # Input accepted for a stream and still in the queue: the stream stays open for it.
        self._unhandled: dict[OutputStream, int] = {}

    @abc.abstractmethod
    def _take(self, cmd: Command) -> bool:
        """Handle one command; True: the runtime ends."""

    @abc.abstractmethod
    def _handle(self, cmd: Command) -> bool:
        """What `_take` does with a command, inside its bookkeeping."""

    def start(self) -> None:
        self._open = True

    def post(self, command: Command) -> None:
        if isinstance(command, ClientInput) and command.output is not None:
            self._unhandled[command.output] = self._unhandled.get(command.output, 0) + 1
        self._queue.append(command)
        if self._wake is not None:
            if not self._wake.done():
                self._wake.set_result(None)
        # No task while a command is being handled: the loop handling it takes this one next. Its
        # context (the run's log ids) is also the one take_now takes commands in.
        elif self._task is None and self._open and not self._taking and not self.held:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name=self._name, context=self._context)

    def take_now(self, cmd: Command) -> None:
        """Taken now, in the caller's step, when no command is queued ahead of it and none is being
        handled; else queued behind, as any command. For the commands of every turn: its run
        request (no queue hop and task switch before the model request), its RunSSE coming for
        the stream, the client's input, the end of its steps and its finalize window (no wake-up
        of this runtime's task for them)."""
        if self._taking or self.held or self._queue or not self.running:
            self.post(cmd)
            return
        self._context.run(self._take_all, cmd)

    def hold(self) -> None:
        """Commands that come now wait until `release`: input that came together (a run request and
        the cancel right behind it) is all queued before the first of it is handled."""
        self.held = True

    def release(self) -> None:
        """Take what came while held, in order, in this step."""
        self.held = False
        self.take_queued()

    def take_queued(self, *_: object) -> None:
        """Take what is queued now, in order, rather than when this runtime's task wakes (nothing
        when a command is being handled: its loop takes them next). Usable as a callback."""
        if self._queue and not self._taking and not self.held and self.running:
            self._context.run(self._take_all, self._dequeued(self._queue.popleft()))

    def _step(self, run_id: str, work: Awaitable[Any], done: StepDone) -> tuple[asyncio.Future[Any], Command | None]:
        """Start `work` now (`start_now`): its task, and the command of its end when it ended without
        waiting, for the caller to take (`_take_next`) once it holds the task; a later end is taken
        where it comes, as any command (`take_now`). A cancelled step reports nothing."""
        self._first_step = True
        try:
            step = start_now(self._report(run_id, work, done))
        finally:
            self._first_step = False
        ended = step.result() if step.done() and not step.cancelled() else None
        return step, ended

    async def _report(self, run_id: str, work: Awaitable[Any], done: StepDone) -> Command | None:
        # A method, not a closure per step: no function, cells and tuple per run held while it runs.
        try:
            result = await work
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            ended = done(run_id, exc, None)
        else:
            ended = done(run_id, None, result)
        if self._first_step:  # still in `_step` (a step started inside this one resets it): returned there
            return ended
        self.take_now(ended)
        return None

    def _take_next(self, cmd: Command) -> None:
        """Taken next, while a command is being handled: after the commands queued ahead, else now,
        without a trip through the queue (the loop handling the command would take it next)."""
        if self._queue or self.held:
            self.post(cmd)
        else:
            self._handle(cmd)

    def _take_all(self, cmd: Command) -> None:
        """Handle `cmd`, then what is queued behind it (what handling it posted); in order."""
        while not self._take(cmd):
            if not self._queue:
                return
            cmd = self._dequeued(self._queue.popleft())
        self.stop()  # shut down: its task ends at its next wait

    @property
    def running(self) -> bool:
        """Commands are still taken (not shut down, not evicted)."""
        task = self._task
        return self._open and (task is None or (not task.done() and not task.cancelling()))

    def stop(self) -> None:
        """Evict an idle runtime (its state is reloaded from the database on next use). A cancelled
        task holds its frame, so this runtime, through its exception: let go of it."""
        self._open = False
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._queue:
                self._wake = loop.create_future()
                try:
                    await self._wake
                finally:
                    self._wake = None
            self._take_all(self._dequeued(self._queue.popleft()))

    def _dequeued(self, cmd: Command) -> Command:
        if isinstance(cmd, ClientInput) and cmd.output is not None and (left := self._unhandled.pop(cmd.output) - 1):
            self._unhandled[cmd.output] = left
        return cmd
