"""Conversation actions → the decision the runtime applies, by the stream they came on and the phase.

An action (cancel, user message, inject context, cancel sub-agent, background completion) belongs
to the stream (request id) it was appended on, and an injection also names the Cursor run it
expects. It acts on that stream's run only:

| action on the run's own stream | PREPARING … INTERRUPTING | CHECKPOINTING | FINALIZING        |
|--------------------------------|--------------------------|---------------|-------------------|
| cancel                         | cancel the run           | cancel        | end the stream    |
| cancel sub-agent               | abort that Task          | ignore        | ignore            |
| user message / inject context  | inject (soft interrupt)  | next run on the same stream (queued_for_next_turn) |
| background completion          | join at the next cycle   | next run on the same stream                       |

On a stream whose run has not started yet (queued behind the active one) a cancel drops that run
and anything else becomes a run after it. An injection whose `expected_run_id` is not that
stream's Cursor run is rejected visibly; an action on any other stream is stale and ignored (the
service refuses one on a finished stream before it gets here).

Pure, like `state.py`: no awaits, no clock, no output; the runtime performs the decision.
"""
from __future__ import annotations

import msgspec

from .. import prompting
from ..protocol import agent_pb2 as pb, which
from ..run import Message, TextPart
from .history import background_completion_messages, render_request_context, render_user_message
from .state import Phase

RUNNING = frozenset({Phase.PREPARING, Phase.MODELING, Phase.WAITING_TOOLS, Phase.INTERRUPTING})
"""Phases in which the run's engine will still take injected messages."""


StreamKey = tuple[str, int]
"""(request id, generation): one RunSSE stream. A new Cursor run on the same request id opens a new
generation, and input appended after that belongs to it."""


class Stream(msgspec.Struct, frozen=True):
    """A run the runtime has on one stream: the active one or one queued behind it."""

    request_id: str
    generation: int
    cursor_run_id: str  # the wire run id ('' when the run request carried none)

    @property
    def key(self) -> StreamKey:
        return (self.request_id, self.generation)

    @property
    def expected_run_id(self) -> str:
        """What `expected_run_id` must equal: the Cursor run id, or the request id without one."""
        return self.cursor_run_id or self.request_id


class Situation(msgspec.Struct, frozen=True):
    phase: Phase
    active: Stream | None
    queued: tuple[Stream, ...]
    mode: prompting.Mode  # how the active run renders a user message
    fresh_id: str = ""  # unique within the active run: names an input that came without an id


# -- decisions ----------------------------------------------------------------------------------------
class Injected(msgspec.Struct, frozen=True):
    """One input for the active run's engine, or the input of a follow-up run."""

    key: str  # its history event id, the same whichever way the input arrives (`input_key`)
    message: Message
    request_context: str = ""
    injection_id: str = ""  # reported to the IDE as context_injection_state ('' : not reported)
    user_message: pb.UserMessage | None = None  # echoed as user_message_appended once delivered


class CancelRun(msgspec.Struct, frozen=True):
    pass


class EndStream(msgspec.Struct, frozen=True):
    """FINALIZING: the run already succeeded; a Stop only ends the continuation window."""


class CancelQueued(msgspec.Struct, frozen=True):
    stream: StreamKey


class CancelSubagent(msgspec.Struct, frozen=True):
    subagent_id: str


class Inject(msgspec.Struct, frozen=True):
    items: tuple[Injected, ...]
    interrupt: bool  # cut the current cycle short (user input), or join at the next boundary


class FollowUp(msgspec.Struct, frozen=True):
    """The action becomes the next run on that stream, with the settings of the run before it."""

    stream: StreamKey
    action: pb.ConversationAction
    injection_id: str = ""  # an IDE injection id: told queued_for_next_turn now, delivered later


class Reject(msgspec.Struct, frozen=True):
    stream: StreamKey
    injection_id: str
    reason: str


class Ignore(msgspec.Struct, frozen=True):
    reason: str


Decision = CancelRun | EndStream | CancelQueued | CancelSubagent | Inject | FollowUp | Reject | Ignore


def decide(situation: Situation, stream: StreamKey, action: pb.ConversationAction) -> Decision:
    """What `action`, appended on `stream`, does."""
    kind = which(action, "action")
    active = situation.active
    if active is not None and active.key == stream:
        return _on_active(situation, active, kind, action)
    queued = next((s for s in situation.queued if s.key == stream), None)
    if queued is not None:
        return _on_queued(queued, kind, action)
    return Ignore(f"{kind or 'an empty or newer action'} on a stream with no run")


def _on_active(situation: Situation, stream: Stream, kind: str | None, action: pb.ConversationAction) -> Decision:
    phase = situation.phase
    running = phase in RUNNING
    if kind == "cancel_action":
        return EndStream() if phase is Phase.FINALIZING else CancelRun()
    if kind == "cancel_subagent_action":
        if not running:
            return Ignore("cancel_subagent_action after the run's tools finished")
        return CancelSubagent(action.cancel_subagent_action.subagent_id)
    if kind == "user_message_action":
        if not running:
            return FollowUp(stream.key, action)
        uma = action.user_message_action
        um = uma.user_message
        injection_id = f"user-message:{um.message_id or situation.fresh_id}"
        key = input_key(um.message_id, injection_id)
        item = Injected(key, user_message(um, situation.mode), render_request_context(uma.request_context), injection_id, um)
        return Inject((item,), interrupt=True)
    if kind == "background_task_completion_action":
        if not running:
            return FollowUp(stream.key, action)
        items = tuple(Injected(key, message) for key, message in background_completion_messages(action.background_task_completion_action))
        return Inject(items, interrupt=False)
    if kind == "inject_context_action":
        ica = action.inject_context_action
        refused = _refused_injection(stream, ica)
        if refused is not None:
            return refused
        if not running:
            return FollowUp(stream.key, action, ica.injection_id)
        item = injected_context(ica, situation.mode)
        assert item is not None  # _refused_injection ignores one without a payload
        return Inject((item,), interrupt=True)
    return Ignore(f"{kind or 'an empty or newer action'} is not handled mid-run")


def _on_queued(stream: Stream, kind: str | None, action: pb.ConversationAction) -> Decision:
    if kind == "cancel_action":
        return CancelQueued(stream.key)
    if kind in ("user_message_action", "background_task_completion_action"):
        return FollowUp(stream.key, action)
    if kind == "inject_context_action":
        ica = action.inject_context_action
        return _refused_injection(stream, ica) or FollowUp(stream.key, action, ica.injection_id)
    return Ignore(f"{kind or 'an empty or newer action'} for a run that has not started")


def _refused_injection(stream: Stream, ica: pb.InjectContextAction) -> Reject | Ignore | None:
    # Compared with the Cursor wire run id; the request id only when the run request had none.
    expected = ica.expected_run_id
    if expected and expected != stream.expected_run_id:
        return Reject(stream.key, ica.injection_id, f"expected run {expected}, the stream's run is {stream.expected_run_id}")
    if which(ica, "payload") is None:
        return Ignore("inject_context_action without a payload")
    return None


def follow_up_request(
    base: pb.AgentRunRequest, action: pb.ConversationAction, state: pb.ConversationStateStructure | None
) -> pb.AgentRunRequest:
    """The run request of a follow-up: the stream's run settings (model, mode, tools, Cursor run
    id) with the action, on the newest checkpoint the IDE got on that stream (`state`; None: none
    was sent since the stream's run request, whose state it keeps), so nothing the IDE's state
    carried is dropped."""
    rr = pb.AgentRunRequest()
    rr.CopyFrom(base)
    if state is not None:
        rr.conversation_state.CopyFrom(state)
    rr.action.CopyFrom(action)
    return rr


# -- shared with the start of a run --------------------------------------------------------------------------
def input_key(message_id: str, injection_id: str) -> str:
    """The history event id of a user input: its message id when it has one (a message may come
    as a run request, as a user message action or inside injected context, and is one input),
    else the injection id."""
    return f"user:{message_id}" if message_id else f"injection:{injection_id}"


def user_message(um: pb.UserMessage, mode: prompting.Mode) -> Message:
    return Message(role="user", parts=[TextPart(text=render_user_message(um, mode))])


def injected_context(ica: pb.InjectContextAction, mode: prompting.Mode) -> Injected | None:
    """An inject_context_action's payload as one message (None: it carried none)."""
    payload = which(ica, "payload")
    if payload == "user_context":
        um = ica.user_context.user_message
        ctx = render_request_context(ica.user_context.request_context)
        return Injected(input_key(um.message_id, ica.injection_id), user_message(um, mode), ctx, ica.injection_id, um)
    if payload == "system_context":
        sc = ica.system_context
        text = f"<system_context producer={sc.producer!r}>\n{sc.content}\n</system_context>"
        return Injected(input_key("", ica.injection_id), Message(role="user", parts=[TextPart(text=text)]), "", ica.injection_id)
    return None
