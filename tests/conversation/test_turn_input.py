"""turn_input: a stored input is run again until a final answer follows it, under whichever key it
was stored."""
from __future__ import annotations

from cursor_byok import prompting
from cursor_byok.conversation.history import ConversationHistory, EntryKind
from cursor_byok.conversation.turn_input import commit_turn_input
from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.run import Message, TextPart, ToolCallPart, ToolResultPart


def user_turn(message_id: str, text: str = "hello") -> pb.AgentRunRequest:
    rr = pb.AgentRunRequest()
    rr.action.user_message_action.user_message.text = text
    rr.action.user_message_action.user_message.message_id = message_id
    return rr


def commit(history: ConversationHistory, rr: pb.AgentRunRequest, run: str):  # type: ignore[no-untyped-def]
    return commit_turn_input(history, rr, run, run, prompting.Mode.AGENT)


def say(history: ConversationHistory, *parts: object) -> None:
    history.append(EntryKind.ASSISTANT, f"a{history.next_seq}", Message("assistant", list(parts)), "r")  # type: ignore[arg-type]


def test_a_stored_message_runs_again_until_a_final_answer_follows_it() -> None:
    history = ConversationHistory("c")
    first = commit(history, user_turn("m1"), "r1")
    assert first.call_model and [e.event_id for e in first.entries] == ["user:m1"]
    retry = commit(history, user_turn("m1"), "r2")
    assert retry.call_model and retry.entries == []  # stored, not answered: the model is called, nothing stored twice
    say(history, ToolCallPart("c1", "Read", "{}"))
    history.append(EntryKind.TOOL_RESULTS, "t1", Message("tool", [ToolResultPart("c1", "Read", "x")]), "r2")
    assert commit(history, user_turn("m1"), "r3").call_model  # a tool call is not an answer
    say(history, TextPart("done"))
    answered = commit(history, user_turn("m1"), "r4")
    assert not answered.call_model and answered.entries == []


def test_a_message_stored_mid_run_by_an_earlier_version_is_found_by_its_message_id() -> None:
    history = ConversationHistory("c")
    history.append(EntryKind.INJECTION, "injection:user-message:m7", Message("user", [TextPart("hi")]), "r0")
    say(history, TextPart("answer"))
    turn = commit(history, user_turn("m7"), "r1")
    assert not turn.call_model and len(history) == 2


def test_a_background_completion_wakes_the_model_once() -> None:
    rr = pb.AgentRunRequest()
    rr.action.background_task_completion_action.completions.add(task_id="t", tool_call_id="c", detail="built")
    history = ConversationHistory("c")
    assert commit(history, rr, "r1").call_model
    assert commit(history, rr, "r2").call_model  # delivered, the follow-up was cut short
    say(history, TextPart("noted"))
    assert not commit(history, rr, "r3").call_model
