"""Checkpoints exchanged with the IDE: built from the history and the run (blobs first, each acked by
the client, then the structure naming them), and the history rebuilt from the client's checkpoint
when our database has none. Data only: the runtime decides what a failure means for the run.

A checkpoint starts from the state the run request carried and fills what the IDE keeps to redraw
and resume the conversation: the root prompt messages, the turns (earlier ones as received, this
run's with their steps), the todo list, the plan, the paths read, the sub-tasks, the tool calls in
flight, and after a compaction its summary and archive (see protocols/cursor/NOTES.md).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import msgspec
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from ..protocol import agent_pb2 as pb, encode_server_message
from ..run import Message
from . import updates
from .active_run import ActiveRun, now_ms
from .history import (
    ROOT_SIZE,
    SEED_FIELD,
    Blob,
    ConversationHistory,
    EntryKind,
    Projection,
    RootBlobs,
    blob_id,
    message_from_json,
    pending_json,
    root_id,
    root_ids,
    seed_field,
    seed_of,
    summary_blobs,
    todo_blobs,
)
from .persistence import ConversationRecords
from .sync import BlobSync, roots_of

log = logging.getLogger("cursor_byok.runtime")


class Compaction(msgspec.Struct, frozen=True):
    """A compaction in this run: its summary, the root ids it replaced, and its history message."""

    summary: str
    replaced: tuple[bytes, ...]
    message: Message


class PendingRound(msgspec.Struct, frozen=True):
    """The assistant message whose tool calls are running, and when they started."""

    message: Message
    started_ms: int


class Checkpoints:
    def __init__(self, history: ConversationHistory, blobs: BlobSync, records: ConversationRecords, ack_timeout: float) -> None:
        self.history = history
        self.blobs = blobs
        self.records = records
        self.ack_timeout = ack_timeout
        self.root_blobs = RootBlobs()
        self._base: tuple[str, pb.ConversationStateStructure] | None = None  # (run id, its request's state without roots)
        # (request id, leading messages' roots its client holds): carried to the next request id
        # when its client sends no checkpoint (see `_lacking_roots`), with the system prompt's root
        # it holds.
        self._held_roots = ("", 0)
        self._held_system = b""
        self._seed_read = False  # the last stored checkpoint's roots, read for the first build (see `_read_seed`)
        self.todos: Callable[[], list[pb.TodoItem] | None] = lambda: None  # None: the state's own list stands

    def root_ids(self, run: ActiveRun) -> tuple[bytes, ...]:
        """The root message ids of the history as it is now (before a compaction changes it)."""
        return tuple(root_ids(self._roots(run, self.history.project())))

    def _roots(self, run: ActiveRun, messages: Projection) -> bytes:
        model_name = run.model.id if run.model else ""
        roots = self.root_blobs.build(run.spec.system if run.spec else None, messages, model_name)
        request_id, held = self._held_roots
        self._held_roots = (request_id, min(held, self.root_blobs.kept))  # what is held is what stayed the same
        return roots

    def _start(self, run: ActiveRun) -> pb.ConversationStateStructure:
        """A new state holding what the run request's carried, but for its roots and the round that
        was in flight (which the history gives): copied once per run without them, then from that."""
        if self._base is None or self._base[0] != run.run_id:
            base = pb.ConversationStateStructure()
            if run.run_request.HasField("conversation_state"):
                base.CopyFrom(run.run_request.conversation_state)
                del base.root_prompt_messages_json[:]
                del base.pending_tool_calls[:]
            self._base = (run.run_id, base)
        state = pb.ConversationStateStructure()
        state.CopyFrom(self._base[1])
        return state

    async def build(self, run: ActiveRun, pending: PendingRound | None = None) -> tuple[pb.ConversationStateStructure, bool, bytes]:
        """The run's checkpoint, whether the client acked every blob it names in time, and what to
        store ahead of it (its roots' `RootSeed`)."""
        await self._read_seed()
        state = self._start(run)
        base_turns = list(state.turns)
        messages = self.history.project()
        if pending is not None and messages and messages[-1] is pending.message:
            messages = messages[:-1]  # the round in flight goes in pending_tool_calls, not the roots
            state.pending_tool_calls.append(pending_json(pending.message, run.model.id if run.model else "", pending.started_ms))
        roots = self._roots(run, messages)
        seed = seed_field(self.root_blobs.last_seed())
        state.MergeFromString(roots)  # parsed by the protobuf runtime: no object per id
        blobs = self._compactions(run, state)
        last_turn = await self._last_turn(run, base_turns) if run.turns.continues() else None
        turn_ids, turn_blobs = run.turns.build(base_turns, last_turn)
        del state.turns[:]
        state.turns.extend(turn_ids)
        blobs += turn_blobs
        todos = self.todos()
        if todos is not None:
            items = todo_blobs(todos)
            del state.todos[:]
            state.todos.extend(bid for bid, _ in items)
            blobs += items
        run.derived.add(run.turns.take_tool_calls())
        run.derived.apply(state)
        if run.derived.plan is not None:
            blobs.append(run.derived.plan)
        state.mode = run.mode  # type: ignore[assignment]
        if run.model is not None:
            state.token_details.max_tokens = run.model.context_window
            state.token_details.used_tokens = min(run.presenter.usage.get("input_tokens", 0), 2**32 - 1)
        return state, await self._push(run, blobs, roots, run.spec is not None), seed

    async def _read_seed(self) -> None:
        """Once per runtime, before the first build over a history read from the store: the roots
        the server's own last stored checkpoint names, and what they were built from, so that build
        encodes and hashes only the messages since (not every message again). The server's own,
        not the client's: the client may send an older checkpoint, and appends journaled after its
        last one are in the history."""
        if self._seed_read:
            return
        self._seed_read = True
        stored = await self.records.last_checkpoint() if self.history.stored_count else None
        if stored is None:
            return
        try:
            state = pb.ConversationStateStructure.FromString(stored)
        except DecodeError:
            return
        field = next((f for f in UnknownFieldSet(state) if f.field_number == SEED_FIELD and f.wire_type == 2), None)
        seed = None if field is None else seed_of(field.data)
        if seed is not None:
            self.root_blobs.seed(seed, roots_of(state))

    def _compactions(self, run: ActiveRun, state: pb.ConversationStateStructure) -> list[Blob]:
        """Summary and archive blobs of this run's compactions (each archive names the root ids the
        compaction replaced and the root id of its summary message)."""
        out: list[Blob] = []
        for compaction in run.compactions:
            summary_root = self.root_blobs.id_of(compaction.message)
            summary, archive = summary_blobs(compaction.summary, compaction.replaced[1:], summary_root or b"")
            state.summary = summary[0]
            state.summary_archive = archive[0]
            state.summary_archives.append(archive[0])
            state.self_summary_count += 1
            out += [summary, archive]
        return out

    async def _last_turn(self, run: ActiveRun, base_turns: list[bytes]) -> bytes | None:
        """The bytes of the state's last turn, which this run's steps extend: pre-fetched, held
        here, or asked of the client (None when it cannot be had in time)."""
        if not base_turns:
            return None
        bid = base_turns[-1]
        if bid in run.known_blobs:
            return run.known_blobs[bid]
        try:
            data = await asyncio.wait_for(self.blobs.get_blob(run.output, run.request_id, bid), self.ack_timeout)
        except Exception:  # noqa: BLE001 - the turn is then started afresh, never fatal
            log.warning("could not fetch the checkpoint's last turn", extra={"conversation_id": self.history.conversation_id})
            run.known_blobs[bid] = b""  # asked once per run: an empty blob reads as no turn
            return None
        run.known_blobs[bid] = data
        return data

    def _lacking_roots(self, request_id: str, roots: bytes, system: bool) -> list[int]:
        """The indexes of the roots the client may lack on this request id. The messages' roots
        the client holds are nearly all of them, and they lead: those its checkpoint named (while
        the history extends the one it was built from) and those acked since are kept as a count
        and not looked at again, so a checkpoint looks at the new messages' roots, not the whole
        history's. A client that sent no checkpoint with the request holds what it acked on the
        conversation's earlier streams (its blob store keeps them; it gives no other view of it),
        so the count carries over. The system prompt's (first, when `system`) is looked at each
        time: a new mode changes it."""
        held = self.blobs.held(request_id)
        first = int(system)  # the messages' roots start here
        if self._held_roots[0] == request_id:
            known = self._held_roots[1]
        else:
            client = self.blobs.client_roots(request_id)
            if client is None:
                known, client_system = self._held_roots[1], self._held_system
            else:
                known, client_system = _common_roots(client[first * ROOT_SIZE :], roots[first * ROOT_SIZE :]), root_id(client, 0)
            if system and client_system == root_id(roots, 0):
                held.add(client_system)
        count = len(roots) // ROOT_SIZE
        lacking = [0] if system and root_id(roots, 0) not in held else []
        lacking += (i for i in range(first + known, count) if root_id(roots, i) not in held)
        unacked = next((i for i in lacking if i >= first), count)
        self._held_roots = (request_id, unacked - first)
        return lacking

    async def _push(self, run: ActiveRun, blobs: list[Blob], roots: bytes, system: bool) -> bool:
        """Push every blob the client may lack (root blobs encoded again only then); True when all
        were acked within the timeout."""
        # A root blob is encoded from the history's own entry: a replay of the stream encodes it again.
        lacking = [self.root_blobs.blob(i) for i in self._lacking_roots(run.request_id, roots, system)]
        pushes = [(root.id, root.data(), root.data) for root in lacking] + [(bid, data, None) for bid, data in blobs]
        waiters = [self.blobs.set_blob(run.output, run.request_id, bid, data, again) for bid, data, again in pushes]  # None: held
        pending = [w for w in waiters if w is not None]
        if not pending:
            return True
        # Not wait_for(gather()): timed out, that leaves a cancelled gathering future whose exception
        # nobody retrieves and whose traceback holds it (and every waiter) for the cycle collector.
        # A waiter still pending stays with the request id (a late ack still counts; its stream's end
        # drops it).
        done, late = await asyncio.wait(pending, timeout=self.ack_timeout, return_when=asyncio.FIRST_EXCEPTION)
        for waiter in done:
            waiter.result()  # the client failed to store a blob (or the wait ended with the stream)
        self._acked_roots(run.request_id)
        return not late

    def _acked_roots(self, request_id: str) -> None:
        """The client acked blobs on this request id: the count of leading roots it holds goes past
        those of the latest build it now holds (a blob id names its bytes, whichever build pushed
        it), so the next request id's count starts there."""
        request, known = self._held_roots
        if request != request_id:
            return
        held, system, roots = self.blobs.held(request_id), self.root_blobs.system_id(), self.root_blobs.message_roots()
        if system and system in held:
            self._held_system = system
        count = len(roots) // ROOT_SIZE
        while known < count and root_id(roots, known) in held:
            known += 1
        self._held_roots = (request_id, known)

    def start_step(self, run: ActiveRun, still_running: Callable[[], bool], pending: PendingRound | None = None) -> None:
        """Checkpoint a committed step (or a tool round starting) while the run goes on (cancelled
        with the run's tasks)."""
        run.checkpoint_seq += 1
        task = asyncio.get_running_loop().create_task(self._step(run, run.checkpoint_seq, still_running, pending))
        run.side_tasks.add(task)
        task.add_done_callback(run.side_tasks.discard)

    def round_started(self, run: ActiveRun, still_running: Callable[[], bool]) -> None:
        """A tool round is running: checkpoint it in flight (`pending_tool_calls`), so that a run
        resumed from this checkpoint runs those calls before it calls the model again."""
        entries = self.history.entries
        if entries and entries[-1].kind is EntryKind.ASSISTANT:
            self.start_step(run, still_running, PendingRound(entries[-1].message, now_ms()))

    async def _step(self, run: ActiveRun, seq: int, still_running: Callable[[], bool], pending: PendingRound | None) -> None:
        """A failure is logged, never fatal, and a step checkpoint never overtakes a newer one (or
        the final one), on the stream or in the store (where the newest replaces the others)."""
        try:
            state, acked, seed = await self.build(run, pending)
            if seq < run.checkpoint_stored:
                return  # a newer one is stored (or the final one is coming): this would replace it
            run.checkpoint_stored = seq
            await self.records.put_checkpoint(run, state, kind="step", seed=seed)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("step checkpoint failed", exc_info=True, extra={"conversation_id": self.history.conversation_id})
            return
        if acked and still_running() and seq > run.checkpoint_sent:
            run.checkpoint_sent = seq
            run.send(updates.checkpoint(state))

    async def final(self, run: ActiveRun, still_current: Callable[[], bool]) -> None:
        """The end of the turn, in the order of PROTOCOL.md 2.7, once its history is saved (a kill
        after the IDE heard of it must not lose the answer): the blobs of the run's last checkpoint
        pushed and acked, `turn_ended`, then that checkpoint staged (the answer still in flight),
        settled, and settled once more. It is persisted before it is sent. A client that never acks
        must not lose its turn: after the ack timeout the turn still ends, but a checkpoint naming
        blobs the client may not hold is not sent."""
        await self.records.history_durable()
        run.checkpoint_seq += 1
        run.checkpoint_sent = run.checkpoint_stored = run.checkpoint_seq  # no step checkpoint may follow the final one
        run.turns.close()
        state, acked, seed = await self.build(run)
        if still_current():
            run.send(updates.turn_ended(run.presenter.usage_total()))
        await self.records.put_checkpoint(run, state, kind="final", seed=seed)
        if not acked:
            log.warning("checkpoint blobs were not acked in time; checkpoint not sent", extra={"conversation_id": self.history.conversation_id})
        elif still_current() and not run.output.closed:
            settled = encode_server_message(updates.checkpoint(state))
            run.output.write(encode_server_message(updates.checkpoint(self._staged(run, state))) + settled + settled)
            run.final_state = state

    def _staged(self, run: ActiveRun, settled: pb.ConversationStateStructure) -> pb.ConversationStateStructure:
        """The settled checkpoint with the turn's answer as the message in flight
        (`pending_tool_calls`) instead of its last root, as Cursor's server stages it first."""
        messages = self.history.project()
        entries = self.history.entries
        if not (messages and entries and entries[-1].kind is EntryKind.ASSISTANT and messages[-1] is entries[-1].message):
            return settled  # the turn ends on no answer of its own (nothing was said): nothing to stage
        staged = pb.ConversationStateStructure()
        staged.CopyFrom(settled)
        del staged.root_prompt_messages_json[-1]
        staged.pending_tool_calls.append(pending_json(messages[-1], run.model.id if run.model else "", now_ms()))
        return staged

    async def hydrate(self, run: ActiveRun) -> list[tuple[EntryKind, str, Message]]:
        """The history the client's checkpoint names, when our database has none (a new machine, a
        deleted database): root blobs from the run request's pre-fetched blobs or asked of the
        client with get_blob, each hashing to its id, then the tool round that was in flight
        (`pending_tool_calls`). All or nothing: nothing is appended here."""
        state = run.run_request.conversation_state
        blobs = run.known_blobs
        wanted = [bid for bid in state.root_prompt_messages_json if bid not in blobs]
        fetches = (self.blobs.get_blob(run.output, run.request_id, bid) for bid in wanted)
        fetched = await asyncio.wait_for(asyncio.gather(*fetches), self.ack_timeout)
        blobs.update(zip(wanted, fetched, strict=True))
        out = []
        for bid in state.root_prompt_messages_json:
            role, message = message_from_json(blobs[bid])
            if message is None:
                continue  # the system prompt: we compile our own
            kind = {"assistant": EntryKind.ASSISTANT, "tool": EntryKind.TOOL_RESULTS}.get(role, EntryKind.USER)
            out.append((kind, f"hydrated:{bid.hex()}", message))
        for text in state.pending_tool_calls:
            data = text.encode()
            try:
                role, message = message_from_json(data)
            except (ValueError, KeyError, TypeError):
                continue  # a round we cannot read is not resumed (the history ends before it)
            if role == "assistant" and message is not None:
                out.append((EntryKind.ASSISTANT, f"hydrated-pending:{blob_id(data).hex()}", message))
        return out


def _common_roots(theirs: bytes, ours: bytes) -> int:
    """How many leading roots two encoded root lists share."""
    if ours.startswith(theirs):
        return len(theirs) // ROOT_SIZE
    low, high = 0, min(len(theirs), len(ours)) // ROOT_SIZE
    while low < high:  # a compaction or another history since: where they part, in a few compares
        middle = (low + high + 1) // 2
        if theirs[: middle * ROOT_SIZE] == ours[: middle * ROOT_SIZE]:
            low = middle
        else:
            high = middle - 1
    return low
