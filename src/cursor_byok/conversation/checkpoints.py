"""Checkpoints exchanged with the IDE: built from the history (blobs first, each acked by the client,
then the structure naming them), and the history rebuilt from the client's checkpoint when our
database has none. Data only: the runtime decides what a failure means for the run."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..protocol import agent_pb2 as pb
from ..run import Message
from . import updates
from .active_run import ActiveRun
from .history import ConversationHistory, EntryKind, RootBlobs, blob_id, message_from_json
from .persistence import ConversationRecords
from .sync import BlobSync

log = logging.getLogger("cursor_byok.runtime")


class Checkpoints:
    def __init__(self, history: ConversationHistory, blobs: BlobSync, records: ConversationRecords, ack_timeout: float) -> None:
        self.history = history
        self.blobs = blobs
        self.records = records
        self.ack_timeout = ack_timeout
        self.root_blobs = RootBlobs()

    async def build(self, run: ActiveRun) -> tuple[pb.ConversationStateStructure, bool]:
        """The run's checkpoint, and whether the client acked every blob it names in time."""
        state = pb.ConversationStateStructure()
        if run.run_request.HasField("conversation_state"):
            state.CopyFrom(run.run_request.conversation_state)
        del state.root_prompt_messages_json[:]
        del state.pending_tool_calls[:]
        model_name = run.model.id if run.model else ""
        blobs = self.root_blobs.build(run.spec.system if run.spec else None, self.history.project(), model_name)
        waiters = [self.blobs.set_blob(run.output, run.request_id, bid, data) for bid, data in blobs]
        pending = [w for w in waiters if w is not None]
        acked = True
        if pending:
            try:
                await asyncio.wait_for(asyncio.gather(*pending), self.ack_timeout)
            except TimeoutError:
                acked = False
        state.root_prompt_messages_json.extend(bid for bid, _ in blobs)
        state.mode = run.mode
        if run.model is not None:
            state.token_details.max_tokens = run.model.context_window
            state.token_details.used_tokens = min(run.presenter.usage.get("input_tokens", 0), 2**32 - 1)
        return state, acked

    def start_step(self, run: ActiveRun, still_running: Callable[[], bool]) -> None:
        """Checkpoint a committed step while the run goes on (cancelled with the run's tasks)."""
        run.checkpoint_seq += 1
        task = asyncio.get_running_loop().create_task(self._step(run, run.checkpoint_seq, still_running))
        run.side_tasks.add(task)
        task.add_done_callback(run.side_tasks.discard)

    async def _step(self, run: ActiveRun, seq: int, still_running: Callable[[], bool]) -> None:
        """A failure is logged, never fatal, and a step checkpoint never overtakes a newer one (or
        the final one)."""
        try:
            state, acked = await self.build(run)
            await self.records.put_checkpoint(run, state, kind="step")
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("step checkpoint failed", exc_info=True, extra={"conversation_id": self.history.conversation_id})
            return
        if acked and still_running() and seq > run.checkpoint_sent:
            run.checkpoint_sent = seq
            run.send(updates.checkpoint(state))

    async def final(self, run: ActiveRun, still_current: Callable[[], bool]) -> None:
        """The run's last checkpoint, persisted before it is sent. A client that never acks blobs
        must not lose its turn: the checkpoint is persisted, but one naming blobs the client may
        not hold is not sent."""
        run.checkpoint_seq += 1
        run.checkpoint_sent = run.checkpoint_seq  # no step checkpoint may follow the final one
        state, acked = await self.build(run)
        await self.records.put_checkpoint(run, state, kind="final")
        if not acked:
            log.warning("checkpoint blobs were not acked in time; checkpoint not sent", extra={"conversation_id": self.history.conversation_id})
        elif still_current():
            run.send(updates.checkpoint(state))

    async def hydrate(self, run: ActiveRun) -> list[tuple[EntryKind, str, Message]]:
        """The history the client's checkpoint names, when our database has none (a new machine, a
        deleted database): root blobs from the run request's pre-fetched blobs or asked of the
        client with get_blob, each hashing to its id. All or nothing: nothing is appended here."""
        state = run.run_request.conversation_state
        prefetched = {b.id: b.value for b in run.run_request.pre_fetched_blobs if blob_id(b.value) == b.id}
        wanted = [bid for bid in state.root_prompt_messages_json if bid not in prefetched]
        fetches = (self.blobs.get_blob(run.output, run.request_id, bid) for bid in wanted)
        fetched = await asyncio.wait_for(asyncio.gather(*fetches), self.ack_timeout)
        blobs = {**prefetched, **dict(zip(wanted, fetched, strict=True))}
        out = []
        for bid in state.root_prompt_messages_json:
            role, message = message_from_json(blobs[bid])
            if message is None:
                continue  # the system prompt: we compile our own
            kind = {"assistant": EntryKind.ASSISTANT, "tool": EntryKind.TOOL_RESULTS}.get(role, EntryKind.USER)
            out.append((kind, f"hydrated:{bid.hex()}", message))
        return out
