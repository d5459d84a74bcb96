"""One instance's part of a cluster: who owns which conversation, and the requests that cross.

A conversation runs in one instance at a time, its owner (a lease, `leases.py`). A request that lands
on an instance that does not own its conversation goes to the owner over the bus: a BidiAppend is
taken by the owner's inbox as if it had come there (admitted, journaled, answered once durable); a
RunSSE reads the owner's output stream, frames relayed as they come. A new turn landing elsewhere
first asks an idle owner to let the conversation go, so with affinity per request id (the balancer
hashing `x-request-id`) a turn's requests all stay on the instance its run request reached.

An owner that stops renewing loses its leases when they end: the next instance that needs one of
its conversations takes it over (`Local.take_over`: what a restart does for it, from the journal).
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import msgspec

from .bus import Bus
from .leases import Leases
from .notes import Kind, Message
from .port import Answer, Forwarded, Local, OwnerGone

log = logging.getLogger("cursor_byok.cluster")
# A READ names the request id, then (a team server) the reader's developer: ids never hold it.
READER_SEPARATOR = "\x00"

YIELDED, BUSY = b"yielded", b"busy"
INSTANCE_FILE = "cluster-instance"
# A turn claimed here that has not reached its runtime by then was refused on its way: it no longer
# keeps its conversation from going to another instance.
ARRIVING_SECONDS = 30.0
# BOUNDs nobody waited for, kept for a reader that asks a moment later (a turn's RunSSE and run
# request race each other): the latest ones, a few per conversation at once.
TOLD_KEPT = 4096


def lasting_id(data_dir: Path) -> str:
    """This instance's name among the others, kept in its data dir (which has one server at a time:
    its lock): restarted on the same data dir, an instance holds its leases again at once and
    resumes what it was cut in, as a single server does, rather than wait for them to end. A file
    that does not hold a name is replaced: a start never fails because of it."""
    path = data_dir / INSTANCE_FILE
    with contextlib.suppress(OSError, UnicodeDecodeError):
        kept = path.read_text().strip()
        if re.fullmatch(r"[0-9a-f]{16}", kept):
            return kept
    name = uuid.uuid4().hex[:16]
    with contextlib.suppress(OSError):  # not kept: the next start takes over what this one held, once its leases end
        path.write_text(name + "\n")
    return name


class Cluster:
    def __init__(self, url: str, lease_seconds: float, me: str | None = None) -> None:
        self.me = me or uuid.uuid4().hex[:16]
        self.lease_seconds = lease_seconds
        self.bus = Bus(url, self.me, self._on_message)
        self.leases: Leases | None = None
        self.local: Local | None = None  # set by the composition root before `start`
        self._answers: dict[str, asyncio.Future[bytes]] = {}
        self._readers: dict[str, asyncio.Queue[Message]] = {}
        self._serving: dict[tuple[str, str], asyncio.Task[None]] = {}  # (reader's instance, reader) → its relay
        self._bound: dict[str, list[asyncio.Future[str]]] = {}  # request id → who waits to learn its owner
        self._told: collections.OrderedDict[str, str] = collections.OrderedDict()  # request id → owner, as BOUND said
        self._taking: dict[str, asyncio.Future[None]] = {}  # conversations being claimed (or let go) here
        self._arriving: dict[str, tuple[str, float]] = {}  # a turn's request id → (its conversation, when claimed)
        self._tasks: set[asyncio.Task[None]] = set()
        self._renewing: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.bus.open()
        self.leases = Leases(self.bus, self.me, self.lease_seconds)
        self._renewing = asyncio.get_running_loop().create_task(self._renew(), name="cluster-leases")
        log.info("cluster member", extra={"instance": self.me, "lease_seconds": self.lease_seconds})

    async def stop(self) -> None:
        """After the conversations stopped: their leases end now (not in lease_seconds), so another
        instance takes over what was cut at once."""
        for task in (self._renewing, *self._tasks, *self._serving.values()):
            if task is not None:
                task.cancel()
        if self.leases is not None:
            with contextlib.suppress(Exception):
                await self.leases.expire_all()
        await self.bus.close()

    # -- ownership ----------------------------------------------------------------------------------
    async def claim(self, conversation_id: str, within: float, turn: str | None = None) -> str:
        """The instance a new turn of the conversation runs in: this one when the conversation is
        free, ours, its owner's lease has ended (taken over first), or its idle owner lets it go;
        else its owner (busy with a run, or silent until `within` runs out). `turn`: the request
        id of the run request that claims it, which holds the conversation here until it reaches
        its runtime (`bound_here`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            owner = await self._claim_once(conversation_id)
            if owner == self.me and turn is not None:
                self._arriving[turn] = (conversation_id, loop.time())
            left = deadline - loop.time()
            if owner == self.me or left <= 0:
                return owner
            try:  # a dead owner never answers: by then its lease has ended and the claim takes it
                answer = await self.ask(owner, Kind.YIELD, conversation_id.encode(), timeout=min(left, self.lease_seconds))
            except TimeoutError:
                continue
            if answer != YIELDED:
                return owner

    async def _claim_once(self, conversation_id: str) -> str:
        """One claim; a takeover it wins is done before it returns. One at a time per conversation
        here: a second request must not find the conversation ours before its takeover is done."""
        while (taking := self._taking.get(conversation_id)) is not None:
            await asyncio.shield(taking)
        done = self._taking[conversation_id] = asyncio.get_running_loop().create_future()
        try:
            claim = await self._leases().claim(conversation_id)
            if claim.owner == self.me and claim.taken_from is not None:
                log.warning("conversation taken over from an instance whose lease ended",
                            extra={"conversation_id": conversation_id, "previous_owner": claim.taken_from, "instance": self.me})
                assert self.local is not None
                await self.local.take_over(conversation_id)
            return claim.owner
        finally:
            del self._taking[conversation_id]
            done.set_result(None)

    async def claim_free(self, conversation_id: str | None) -> bool:
        """At start: whether this instance resumes the conversation's cut runs and streams, which it
        does when no live instance owns it (claimed here). A stream whose conversation cannot be
        read is any instance's to quarantine."""
        return conversation_id is None or (await self._leases().claim(conversation_id)).owner == self.me

    async def owner_of_request(self, request_id: str, wait: float) -> str | None:
        """The instance that runs the request id's conversation (claimed here when none does); None
        when the request id is not bound within `wait` (its run request may be on its way: the
        instance that takes it says so, `bound_here`)."""
        told = self._told.pop(request_id, None)  # its BOUND came before this asked (before its binding was durable)
        if told is not None:
            return told
        bound = asyncio.get_running_loop().create_future()
        self._bound.setdefault(request_id, []).append(bound)  # before the read: a BOUND after it is not missed
        try:
            found = await self._leases().of_request(request_id)
            if found is None:
                try:
                    return await asyncio.wait_for(bound, wait)
                except TimeoutError:
                    found = await self._leases().of_request(request_id)
        finally:
            waiting = self._bound.get(request_id, [])
            if bound in waiting:
                waiting.remove(bound)
            if not waiting:
                self._bound.pop(request_id, None)
        if found is None:
            return None
        if found.owner in (None, self.me):  # ours: once a takeover of it going on here is done
            return await self.claim(found.conversation_id, wait)
        return found.owner

    def bound_here(self, request_id: str) -> None:
        """A run request for the request id was just taken here (its run handed to the runtime):
        what waits for it, here or in another instance (its RunSSE or a later append), learns that
        it runs here."""
        self._arriving.pop(request_id, None)
        self._wake(request_id, self.me)
        self._spawn(self._send_quietly(None, Message(Kind.BOUND, self.me, request_id)))

    def _wake(self, request_id: str, owner: str) -> None:
        waiters = self._bound.pop(request_id, None)
        if waiters is None:  # kept a while for a RunSSE or append that has yet to ask
            told = self._told
            told[request_id] = owner
            if len(told) > TOLD_KEPT:
                told.popitem(last=False)
            return
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(owner)

    async def _renew(self) -> None:
        leases = self._leases()
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await leases.renew()
            except Exception as exc:  # noqa: BLE001 - the next round tries again; the lease may end meanwhile
                log.error("conversation leases not renewed: %s", exc)

    def _leases(self) -> Leases:
        assert self.leases is not None, "the cluster has not started"
        return self.leases

    # -- requests to other instances -----------------------------------------------------------------
    async def ask(self, to: str, kind: Kind, body: bytes, timeout: float) -> bytes:
        corr = uuid.uuid4().hex
        answer = self._answers[corr] = asyncio.get_running_loop().create_future()
        try:
            await self.bus.send(to, Message(kind, self.me, corr, body))
            return await asyncio.wait_for(answer, timeout)
        finally:
            self._answers.pop(corr, None)

    async def forward_append(self, owner: str, forwarded: Forwarded) -> Answer | None:
        """The owner's answer to an append that came here; None when the owner stays silent for a
        lease (it may have stopped: the caller looks again where the conversation runs)."""
        try:
            raw = await self.ask(owner, Kind.APPEND, msgspec.msgpack.encode(forwarded), self.lease_seconds)
        except TimeoutError:
            return None
        return msgspec.msgpack.decode(raw, type=Answer)

    async def read(self, owner: str, request_id: str, developer: str | None = None) -> AsyncIterator[tuple[bytes, bool]]:
        """The owner's output stream for the request id, from its start: (frames, more) until the
        last. Raises OwnerGone when the owner goes silent and its lease on the conversation ends.
        `developer`: a team server's reader, whom the owner checks the stream against."""
        corr = uuid.uuid4().hex
        inbox = self._readers[corr] = asyncio.Queue()
        leases = self._leases()
        last = False
        try:
            asked = request_id if developer is None else f"{request_id}{READER_SEPARATOR}{developer}"
            await self.bus.send(owner, Message(Kind.READ, self.me, corr, asked.encode()))
            while True:
                try:
                    message = await asyncio.wait_for(inbox.get(), self.lease_seconds)
                except TimeoutError:  # quiet is fine while the owner holds the lease (a tool may run for minutes)
                    found = await leases.of_request(request_id)
                    if found is None or found.owner != owner:
                        raise OwnerGone(owner) from None
                    continue
                last = message.kind is Kind.END
                yield message.body, not last
                if last:
                    return
        finally:
            self._readers.pop(corr, None)
            if not last:  # the reader went away first: the owner's relay ends (its stream is detached)
                self._spawn(self._send_quietly(owner, Message(Kind.LEAVE, self.me, corr)))

    async def _send_quietly(self, to: str | None, message: Message) -> None:
        try:
            await self.bus.send(to, message)
        except Exception as exc:  # noqa: BLE001 - the other side finds out by itself (its reader's lease ends)
            log.info("cluster message not sent: %s", exc)

    # -- requests from other instances ---------------------------------------------------------------
    def _on_message(self, message: Message) -> None:
        match message.kind:
            case Kind.ANSWER:
                answer = self._answers.get(message.corr)
                if answer is not None and not answer.done():
                    answer.set_result(message.body)
            case Kind.OUT | Kind.END:
                inbox = self._readers.get(message.corr)
                if inbox is not None:
                    inbox.put_nowait(message)
            case Kind.BOUND:
                self._wake(message.corr, message.sender)
            case Kind.LEAVE:
                relay = self._serving.pop((message.sender, message.corr), None)
                if relay is not None:
                    relay.cancel()
            case Kind.APPEND:
                self._spawn(self._answer(message, self._take_append(message.body)))
            case Kind.YIELD:
                self._spawn(self._answer(message, self._yield(message.body.decode())))
            case Kind.READ:
                key = (message.sender, message.corr)
                self._serving[key] = self._spawn(self._serve_read(message, key))

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("cluster request failed: %s", task.exception(), exc_info=task.exception())

    async def _answer(self, question: Message, answering: Awaitable[bytes]) -> None:
        body = await answering
        await self._send_quietly(question.sender, Message(Kind.ANSWER, self.me, question.corr, body))

    async def _take_append(self, body: bytes) -> bytes:
        assert self.local is not None
        try:
            answer = await self.local.take_append(msgspec.msgpack.decode(body, type=Forwarded))
        except Exception as exc:  # noqa: BLE001 - the asking instance answers its IDE with it
            log.exception("a forwarded append failed")
            answer = Answer("internal", f"{type(exc).__name__} on the instance running the conversation")
        return msgspec.msgpack.encode(answer)

    async def _yield(self, conversation_id: str) -> bytes:
        """Let an idle conversation go. Not while a turn claimed here is on its way to its runtime,
        nor while it is being claimed here; and no claim here while it goes (it waits, then finds
        the conversation free or the other instance's)."""
        loop = asyncio.get_running_loop()
        for request_id, (arriving, since) in list(self._arriving.items()):
            if loop.time() - since > ARRIVING_SECONDS:
                del self._arriving[request_id]  # its run request was refused on its way
            elif arriving == conversation_id:
                return BUSY
        if conversation_id in self._taking:
            return BUSY
        done = self._taking[conversation_id] = loop.create_future()
        try:
            assert self.local is not None
            if not await self.local.let_go(conversation_id):
                return BUSY
            await self._leases().release(conversation_id)
            return YIELDED
        finally:
            del self._taking[conversation_id]
            done.set_result(None)

    async def _serve_read(self, question: Message, key: tuple[str, str]) -> None:
        assert self.local is not None

        async def sink(frames: bytes, more: bool) -> None:
            await self.bus.send(question.sender, Message(Kind.OUT if more else Kind.END, self.me, question.corr, frames))

        try:
            request_id, _, developer = question.body.decode().partition(READER_SEPARATOR)
            await self.local.serve_read(request_id, developer or None, sink)
        finally:
            self._serving.pop(key, None)
