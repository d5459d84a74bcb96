"""ConversationService: the conversation domain's one entry point for the gateway.

It binds request ids to conversations (registry), opens output streams (hub) and turns ordered wire
input into runtime commands. It never changes a lifecycle itself: runtimes do.

After a restart it resumes the streams whose journaled input had not all had its effect (`resume`):
the stream's run starts again from its run request, marked resumed, and the journaled appends that
followed are delivered again, in order, marked replayed.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator

import msgspec

from ..protocol import ConnectError, agent_pb2 as pb, unknown_fields, which
from .identity import ParentConversationRef
from .output import OutputHub, OutputStream
from .registry import BindingConflict, BindKind, Registry
from .commands import ClientInput, Command, Heartbeat, Reader, Shutdown, StartRun
from .data import RuntimeServices
from .intake import AppendIntake, Keep
from .runtime import ConversationRuntime

log = logging.getLogger("cursor_byok.conversation")

# How deep fields a newer client added are looked for in a run request or an action (they reach
# its request context's environment); tool results and acks are not scanned: they are many, and
# their switches report a newer member themselves.
NEWER_FIELDS_DEPTH = 6


class OpenedRun(msgspec.Struct, frozen=True):
    conversation_id: str
    output: OutputStream
    kind: BindKind


class ConversationService:
    def __init__(self, services: RuntimeServices, hub: OutputHub) -> None:
        self.services = services
        self.hub = hub
        self.registry: Registry[ConversationRuntime] = Registry(self._make_runtime, services.store)
        hub.on_forget = self.registry.forget  # the registry keeps a binding while the hub keeps its stream
        self._holding: list[ConversationRuntime] | None = None  # runtimes held by `together`
        self.appends = AppendIntake(self)  # an append's path: admit, journal, hand over

    def _make_runtime(self, conversation_id: str) -> ConversationRuntime:
        rt = ConversationRuntime(conversation_id, self.services)
        rt.start()
        return rt

    async def restore(self, keep: Keep | None = None, *, conversation_id: str | None = None) -> None:
        """After a restart: runs left without an outcome were cut by a crash; mark them so.
        `keep`: whether a conversation is this server's to restore (see `resume_journaled`);
        `conversation_id`: only that one's runs (one conversation taken over), read by its index."""
        store = self.services.store
        if store is None:
            return
        for run in await store.find_unfinished_runs(conversation_id):
            if keep is None or await keep(run.conversation_id):
                store.finish_run(run.run_id, "interrupted_by_crash")
        await store.flush()

    async def let_go(self, conversation_id: str) -> bool:
        """Another instance runs the conversation's next turn: drop its runtime, once everything it
        wrote is stored (the other instance reads it). False while it has a run or one queued."""
        rt = self.registry.runtime(conversation_id)
        if rt is not None:
            if not rt.idle:
                return False
            rt.stop()
            self.registry.evict(conversation_id)
        if self.services.store is not None:
            await self.services.store.flush()
        return True

    async def resolve(self, request_id: str) -> None:
        """Await before handing over an append for `request_id`: then its binding, if it has one,
        is known to the checks and routing that follow in the same step (an indexed read of the
        store when memory does not hold it)."""
        await self.registry.resolve(request_id)

    def conversation_for(self, run_request: pb.AgentRunRequest, request_id: str) -> str:
        """The conversation a run request belongs to. Without a conversation_id only an existing
        binding may route it; request_id is never used as an identity."""
        if run_request.HasField("conversation_id") and run_request.conversation_id:
            return run_request.conversation_id
        binding = self.registry.binding(request_id)
        if binding is None:
            raise ConnectError(
                "invalid_argument", f"run request has no conversation_id and request id {request_id!r} is not bound"
            )
        return binding.conversation_id

    def check_binding(self, request_id: str, conversation_id: str) -> None:
        binding = self.registry.binding(request_id)
        if binding is not None and binding.conversation_id != conversation_id:
            raise ConnectError(
                "already_exists",
                str(BindingConflict(request_id, binding.conversation_id, conversation_id)),
            )

    def open_run(
        self, request_id: str, run_request: pb.AgentRunRequest, parent: ParentConversationRef | None = None,
        *, resumed: bool = False, wire: bytes | None = None, developer: str | None = None,
    ) -> OpenedRun:
        """Bind request_id and start (or queue) the run on a fresh output stream generation. `wire`:
        the serialized client message it came in, when the caller holds it (its newer-field scan
        then reads those bytes rather than copying the request). `developer`: a team server's, whose
        request it is: the runs on the stream are theirs."""
        unknown_fields(run_request, NEWER_FIELDS_DEPTH, wire=wire)
        conversation_id = self.conversation_for(run_request, request_id)
        cursor_run_id = run_request.run_id if run_request.HasField("run_id") else ""
        try:
            binding, kind = self.registry.bind(request_id, conversation_id, cursor_run_id)
        except BindingConflict as exc:
            raise ConnectError("already_exists", str(exc)) from None
        if kind is BindKind.SAME and (existing := self.hub.get(request_id)) is not None:
            return OpenedRun(conversation_id, existing, kind)
        output = self.hub.open(request_id, cursor_run_id)
        output.developer = developer
        runtime = self.registry.ensure_runtime(conversation_id)
        self._hand(runtime, StartRun(request_id, output, run_request, parent, resumed=resumed))
        return OpenedRun(conversation_id, output, kind)

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """Input handed over in the block reaches each runtime all at once, taken in order as the
        block ends: a cancel that came with its run request is queued before the run prepares, so
        the run never calls the model. Inside another such block it adds to that one."""
        if self._holding is not None:
            yield
            return
        held = self._holding = []
        try:
            yield
        finally:
            self._holding = None
            for runtime in held:
                runtime.release()

    def _hand(self, runtime: ConversationRuntime, cmd: Command) -> None:
        """`cmd` to the runtime at once; inside `together`, the runtime takes nothing before the block ends."""
        held = self._holding
        if held is not None and not runtime.held:
            runtime.hold()
            held.append(runtime)
        runtime.take_now(cmd)

    async def resume(
        self, request_id: str, run_request: pb.AgentRunRequest, replay: list[tuple[int, pb.AgentClientMessage]], *, developer: str | None = None
    ) -> None:
        """Resume a stream cut by a restart: its run again, then the appends journaled after its
        run request (seqno, message), as they were delivered before. The conversation's history is
        loaded first, so the run can rebuild what was in flight before any of them is taken."""
        await self.resolve(request_id)
        conversation_id = self.conversation_for(run_request, request_id)
        await self.registry.ensure_runtime(conversation_id).data.ensure_loaded()
        self.open_run(request_id, run_request, resumed=True, developer=developer)
        for seqno, message in replay:
            try:
                self.deliver(request_id, message, seqno=seqno, replayed=True)
            except ConnectError as exc:
                log.info("journaled append not applied again: %s", exc.message, extra={"request_id": request_id})

    def deliver(
        self, request_id: str, message: pb.AgentClientMessage, *, seqno: int = 0, replayed: bool = False, wire: bytes | None = None,
    ) -> None:
        """Hand ordered input to its conversation's runtime, with the stream it belongs to. A
        conversation action on a stream that has ended is refused here, so the IDE sees it was not
        applied (the runtime would only log it). `wire`: `message` serialized, as for `open_run`."""
        binding = self.registry.binding(request_id)
        if binding is None:
            raise ConnectError("failed_precondition", f"request id {request_id!r} has no run")
        output = self.hub.get(request_id)
        if output is not None:
            output.touch()  # the IDE is on it: a finished one stays for a read again
        kind = which(message, "message")
        if kind in ("conversation_action", "run_request"):
            unknown_fields(getattr(message, kind), NEWER_FIELDS_DEPTH, wire=wire)
        if kind == "conversation_action" and (output is None or output.closed):
            action = which(message.conversation_action, "action") or "conversation action"
            raise ConnectError("failed_precondition", f"the run on request id {request_id!r} has ended; its {action} was not applied")
        runtime = self.registry.ensure_runtime(binding.conversation_id)
        self._hand(runtime, ClientInput(request_id, message, output, seqno, replayed))

    def heartbeat(self, request_id: str) -> None:
        binding = self.registry.binding(request_id)
        output = self.hub.get(request_id)
        if output is not None:
            output.touch()
        if binding is None or output is None or output.closed:
            return
        self.registry.ensure_runtime(binding.conversation_id).post(Heartbeat(output))

    def evict_idle(self, idle_seconds: float, history_bytes: int | None = None, now: float | None = None) -> int:
        """Drop runtimes idle for longer than `idle_seconds`, and the least recently active idle ones
        whose histories together hold more than `history_bytes` of text (never the most recently
        active one: the conversation the user is in would otherwise read its whole history again
        at each turn once it outgrew the budget); the database keeps their state, and a
        conversation's next turn reads it again. Only possible with a store (a memory-only runtime
        would lose its history)."""
        if self.services.store is None:
            return 0
        now = time.monotonic() if now is None else now
        idle = sorted((rt for rt in self.registry.runtimes() if rt.idle), key=lambda rt: rt.last_active, reverse=True)
        stale, kept = [], 0
        for newest, rt in enumerate(idle):
            kept += rt.data.history.text_bytes
            if now - rt.last_active > idle_seconds or (history_bytes is not None and kept > history_bytes and newest):
                stale.append(rt)
        for rt in stale:
            rt.stop()
            self.registry.evict(rt.conversation_id)
        return len(stale)

    async def shutdown(self, reason: str = "server shutting down", timeout: float = 5.0) -> None:
        """End every runtime (open streams get one terminal). Idempotent: the drain before the HTTP
        server stops and the gateway's shutdown after it both call this."""
        self.appends.stopping = True  # streams end cut now: what still comes for them is journaled with them
        loop = asyncio.get_running_loop()
        waits = []
        for rt in self.registry.runtimes():
            if not rt.running:
                continue
            done: asyncio.Future[None] = loop.create_future()
            rt.post(Shutdown(reason, done))
            waits.append(done)
        if waits:
            await asyncio.wait(waits, timeout=timeout)

    def parent_ref(self, parent_request_id: str, parent_tool_call_id: str) -> ParentConversationRef | None:
        """The immutable origin of a child conversation from the child's parent headers."""
        binding = self.registry.binding(parent_request_id)
        if binding is None:
            log.warning("parent request id is not bound", extra={"parent_request_id": parent_request_id})
            return None
        parent = self.registry.runtime(binding.conversation_id)
        run = parent.run if parent is not None else None
        if run is None:
            log.warning("parent conversation has no active run", extra={"conversation_id": binding.conversation_id})
            return None
        return ParentConversationRef(binding.conversation_id, run.run_id, parent_tool_call_id)

    def has_ended(self, request_id: str, cursor_run_id: str, *, opened: bool) -> bool:
        """The request id's stream of that generation has ended: nothing appended to it now has an
        effect. `opened`: its run request was taken (no stream now means it ended and was swept)."""
        stream = self.hub.get(request_id)
        if stream is None:
            return opened
        return stream.closed and stream.cursor_run_id == cursor_run_id

    def stream_ended(self, request_id: str) -> bool:
        """The request id is bound (its run request was taken, here or before a restart) and its
        stream is no longer running: closed, or gone with its retention or the restart."""
        if self.registry.binding(request_id) is None:
            return False
        stream = self.hub.get(request_id)
        return stream is None or stream.closed

    def attach(self, request_id: str, output: OutputStream) -> None:
        """A reader is on the request id's stream `output`: a run resumed on it after a restart
        goes on; one whose reader had left is no longer given up."""
        self._reader(Reader(request_id, True, output))

    def detach(self, request_id: str, output: OutputStream) -> None:
        """A reader left `output` (its client closed or reset the stream, or it read the end): the
        runtime decides what that means for the run (a stream left unread ends its run after the
        reattach grace)."""
        self._reader(Reader(request_id, False, output))

    def _reader(self, cmd: Reader) -> None:
        binding = self.registry.binding(cmd.request_id)
        rt = self.registry.runtime(binding.conversation_id) if binding is not None else None
        if rt is not None:
            rt.take_now(cmd)
