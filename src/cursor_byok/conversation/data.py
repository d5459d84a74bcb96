"""One conversation's data, as its runtime holds it: the history, the tool state, the blobs the IDE
holds, checkpoints and the store records; and the preparation of a run from it.

Data, not lifecycle: the runtime decides what each result or failure means for the run.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import prompting
from ..config import Config, ModelConfig
from ..protocol import model_not_found_error
from ..run import RunEngine
from . import updates
from .active_run import ActiveRun, now_ms
from .checkpoints import Checkpoints
from .history import ConversationHistory, prompt_mode
from .identity import ParentConversationRef
from .persistence import ConversationRecords
from .run_setup import requested_model_id, run_spec, tool_context
from .state import Phase
from .sync import BlobSync
from .tool_calls import ToolRounds
from .turn_input import commit_turn_input


@dataclass
class RuntimeServices:
    """Services the runtime uses (provided by the gateway at startup)."""

    config: Config
    make_engine: Callable[[ModelConfig], RunEngine]
    store: Any = None  # cursor_byok.store.Store, or None for a memory-only runtime
    # (model, requested model id, requested parameters) → effort; the model catalog's rule.
    resolve_effort: Callable[[ModelConfig, str, list[tuple[str, str]]], str] | None = None
    continuation_window: float = 2.0
    blob_ack_timeout: float = 15.0


class ConversationData:
    def __init__(self, conversation_id: str, services: RuntimeServices) -> None:
        self.conversation_id = conversation_id
        self.services = services
        self.parent: ParentConversationRef | None = None
        self.history = ConversationHistory(conversation_id)
        self.records = ConversationRecords(conversation_id, services.store)
        self.blobs = BlobSync()
        self.checkpoints = Checkpoints(self.history, self.blobs, self.records, services.blob_ack_timeout)
        self.tool_rounds = ToolRounds(conversation_id, self.records.put_tool_state)
        # The stored history is read once per runtime life: `_loading` is that read while it runs,
        # and only a read that completed marks it loaded (a cancelled or failed one is redone).
        self.loaded = False
        self._loading: asyncio.Task[None] | None = None

    def mode(self, run: ActiveRun) -> prompting.Mode:
        return prompt_mode(run.mode, subagent=self.parent is not None)

    async def ensure_loaded(self) -> None:
        if self.loaded:
            return
        if self._loading is None:
            self._loading = asyncio.get_running_loop().create_task(self._load())
            self._loading.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved even if nobody waits
        # Shielded: a Stop during the read cancels the run, not the read, which still completes.
        await asyncio.shield(self._loading)

    async def _load(self) -> None:
        try:
            stored = await self.records.load()
        finally:
            self._loading = None
        self.history.restore(stored.entries)
        if stored.parent is not None and self.parent is None:
            self.parent = stored.parent
        if stored.tool_state is not None:
            self.tool_rounds.state = stored.tool_state
        self.loaded = True

    async def prepare(self, run: ActiveRun) -> None:
        """Everything before the model is called: the model, the history (loaded, or hydrated from
        the client's checkpoint when we hold none), the turn's input queued for the store, the
        engine. The engine builds the model request while the input is written and sends it once
        the write has committed (`run.input_stored`), so the input is durable before the model
        sees it without the turn waiting for the disk first."""
        s = self.services
        rr = run.run_request
        model_id = requested_model_id(rr)
        model = s.config.model(model_id)
        if model is None:
            raise model_not_found_error(model_id)
        run.model = model
        await self.ensure_loaded()
        self.records.run_started(run, self.parent, Phase.PREPARING.value)
        if not self.history.entries and rr.conversation_state.root_prompt_messages_json:
            hydrated = await self.checkpoints.hydrate(run)
            entries = [self.history.append(kind, key, message, run.run_id) for kind, key, message in hydrated]
            await self.records.append_durably([e for e in entries if e is not None])
        mode = self.mode(run)
        run.tool_ctx = tool_context(
            rr, conversation_id=self.conversation_id, run_id=run.run_id, parent=self.parent, config=s.config, model=model, mode=mode
        )
        # A user message without a message id is keyed by its Cursor run; one of our follow-ups
        # shares the run id of the run before it, so it is keyed by its own.
        fallback = run.run_id if run.follow_up else (run.cursor_run_id or run.run_id)
        turn = commit_turn_input(self.history, rr, run.run_id, fallback, mode)
        run.call_model = turn.call_model
        run.input_stored = self.records.append(turn.entries)
        if run.input_stored is not None and (turn.delivered is not None or not turn.call_model):
            await run.input_stored  # the IDE hears of it, or the run ends, only once it is stored
            run.input_stored = None
        if turn.delivered is not None:
            run.send(updates.injection_delivered(turn.delivered.injection_id, 0, now_ms()))
            if turn.delivered.user_message is not None:
                run.send(updates.user_message_appended(turn.delivered.user_message))
        run.engine = s.make_engine(model)
        run.spec = run_spec(rr, model, run.tool_ctx, mode, s.resolve_effort)
