"""Pure builders of the server messages the runtime writes (one place that knows their shapes)."""
from __future__ import annotations

import functools

from google.protobuf.message import Message

from ..hotpath import encode_nested_frame
from ..protocol import agent_pb2 as pb, encode_server_message
from ..run import Usage


def _field_numbers(message: type[Message], *names: str) -> tuple[int, ...]:
    """The numbers of the fields `names`, each in the message the one before it holds."""
    numbers, descriptor = [], message.DESCRIPTOR
    for name in names:
        field = descriptor.fields_by_name[name]
        numbers.append(field.number)
        descriptor = field.message_type
    return tuple(numbers)


_TEXT_DELTA = _field_numbers(pb.AgentServerMessage, "interaction_update", "text_delta", "text")
_THINKING_DELTA = _field_numbers(pb.AgentServerMessage, "interaction_update", "thinking_delta", "text")
# What a thinking delta carries after its text (thinking_style's number is the higher one).
_THINKING_STYLE = pb.ThinkingDeltaUpdate(thinking_style=pb.THINKING_STYLE_DEFAULT).SerializeToString()


def text_delta_frame(text: str) -> bytes:
    """The frame of the message `interaction_update.text_delta.text = text`, built straight from the
    text: a run writes one per delta, and a message object built, serialized and framed costs
    several times as much."""
    return encode_nested_frame(_TEXT_DELTA, text.encode())


def thinking_delta_frame(text: str) -> bytes:
    """The frame of `interaction_update.thinking_delta` with `text` in the default thinking style,
    as `text_delta_frame`."""
    return encode_nested_frame(_THINKING_DELTA, text.encode(), _THINKING_STYLE)


def thinking_completed(duration_ms: int) -> pb.AgentServerMessage:
    m = pb.AgentServerMessage()
    m.interaction_update.thinking_completed.thinking_duration_ms = max(1, duration_ms)
    return m


def token_delta(tokens: int) -> pb.AgentServerMessage:
    m = pb.AgentServerMessage()
    m.interaction_update.token_delta.tokens = tokens
    return m


def step_started(step: int) -> pb.AgentServerMessage:
    m = pb.AgentServerMessage()
    m.interaction_update.step_started.step_id = step
    return m


@functools.lru_cache(maxsize=64)
def step_started_frame(step: int) -> bytes:
    """`step_started(step)`'s frame: the same few steps start every run, so each is encoded once."""
    return encode_server_message(step_started(step))


def step_completed(step: int, duration_ms: int) -> pb.AgentServerMessage:
    m = pb.AgentServerMessage()
    sc = m.interaction_update.step_completed
    sc.step_id = step
    sc.step_duration_ms = duration_ms
    return m


def turn_ended(usage: Usage | None) -> pb.AgentServerMessage:
    m = pb.AgentServerMessage()
    te = m.interaction_update.turn_ended
    te.SetInParent()
    if usage is not None:
        for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"):
            value = getattr(usage, name)
            if value is not None:
                setattr(te, name, value)
    return m


def summary_started() -> pb.AgentServerMessage:
    m = pb.AgentServerMessage()
    m.interaction_update.summary_started.SetInParent()
    return m


def summary_completed() -> pb.AgentServerMessage:
    m = pb.AgentServerMessage()
    m.interaction_update.summary_completed.SetInParent()
    return m


def user_message_appended(user_message: pb.UserMessage) -> pb.AgentServerMessage:
    m = pb.AgentServerMessage()
    m.interaction_update.user_message_appended.user_message.CopyFrom(user_message)
    return m


def _injection_state(injection_id: str) -> tuple[pb.AgentServerMessage, pb.ContextInjectionState]:
    m = pb.AgentServerMessage()
    s = m.interaction_update.context_injection_state
    s.injection_id = injection_id
    return m, s.state


def injection_queued(injection_id: str) -> pb.AgentServerMessage:
    m, state = _injection_state(injection_id)
    state.queued.SetInParent()
    return m


def injection_queued_for_next_turn(injection_id: str) -> pb.AgentServerMessage:
    m, state = _injection_state(injection_id)
    state.queued_for_next_turn.SetInParent()
    return m


def injection_delivered(injection_id: str, step: int, at_ms: int) -> pb.AgentServerMessage:
    m, state = _injection_state(injection_id)
    d = state.delivered
    d.step = step
    d.delivery_batch_id = injection_id
    d.delivered_at_ms = at_ms
    return m


def injection_rejected(injection_id: str, reason: str) -> pb.AgentServerMessage:
    m, state = _injection_state(injection_id)
    state.rejected.reason = reason
    return m


def exec_abort(exec_id: int) -> pb.AgentServerMessage:
    m = pb.AgentServerMessage()
    m.exec_server_control_message.abort.id = exec_id
    return m


def exec_request(message: pb.ExecServerMessage) -> pb.AgentServerMessage:
    m = pb.AgentServerMessage()
    m.exec_server_message.CopyFrom(message)
    return m


def interaction_query(query: pb.InteractionQuery) -> pb.AgentServerMessage:
    m = pb.AgentServerMessage()
    m.interaction_query.CopyFrom(query)
    return m


def interaction(update: pb.InteractionUpdate) -> pb.AgentServerMessage:
    m = pb.AgentServerMessage()
    m.interaction_update.CopyFrom(update)
    return m


def set_blob(kv_id: int, blob_id: bytes, data: bytes) -> pb.AgentServerMessage:
    m = pb.AgentServerMessage()
    kv = m.kv_server_message
    kv.id = kv_id
    kv.set_blob_args.blob_id = blob_id
    kv.set_blob_args.blob_data = data
    return m


def get_blob(kv_id: int, blob_id: bytes) -> pb.AgentServerMessage:
    m = pb.AgentServerMessage()
    kv = m.kv_server_message
    kv.id = kv_id
    kv.get_blob_args.blob_id = blob_id
    return m


def checkpoint(state: pb.ConversationStateStructure) -> pb.AgentServerMessage:
    m = pb.AgentServerMessage()
    m.conversation_checkpoint_update.CopyFrom(state)
    return m
