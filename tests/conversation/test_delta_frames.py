"""A text or thinking delta's frame is built straight from its string: byte for byte the frame of
the message it stands for, encoded as every other server message is."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cursor_byok.conversation import updates
from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.protocol import encode_server_message


def text_delta(text: str) -> pb.AgentServerMessage:
    return pb.AgentServerMessage(interaction_update=pb.InteractionUpdate(text_delta=pb.TextDeltaUpdate(text=text)))


def thinking_delta(text: str) -> pb.AgentServerMessage:
    delta = pb.ThinkingDeltaUpdate(text=text, thinking_style=pb.THINKING_STYLE_DEFAULT)
    return pb.AgentServerMessage(interaction_update=pb.InteractionUpdate(thinking_delta=delta))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_text_delta_frame_is_the_messages_frame(text: str) -> None:
    assert updates.text_delta_frame(text) == encode_server_message(text_delta(text))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_thinking_delta_frame_is_the_messages_frame(text: str) -> None:
    assert updates.thinking_delta_frame(text) == encode_server_message(thinking_delta(text))


def test_a_long_delta_has_multibyte_lengths() -> None:
    text = "é" * 100_000
    assert updates.text_delta_frame(text) == encode_server_message(text_delta(text))
