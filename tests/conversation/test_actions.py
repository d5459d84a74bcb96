"""actions.decide: what a conversation action does, by the stream it came on and the run's phase."""
from __future__ import annotations

import pytest

from cursor_byok import prompting
from cursor_byok.conversation import Phase
from cursor_byok.conversation.actions import (
    CancelQueued,
    CancelRun,
    CancelSubagent,
    EndStream,
    FollowUp,
    Ignore,
    Inject,
    Reject,
    Situation,
    Stream,
    decide,
)
from cursor_byok.protocol import agent_pb2 as pb

ACTIVE = Stream("req-a", 0, "run-a")
QUEUED = Stream("req-b", 0, "run-b")


def situation(phase: Phase) -> Situation:
    return Situation(phase, ACTIVE, (QUEUED,), prompting.Mode.AGENT, "fresh")


def action(kind: str, **fields: str) -> pb.ConversationAction:
    a = pb.ConversationAction()
    if kind == "cancel":
        a.cancel_action.SetInParent()
    elif kind == "cancel_subagent":
        a.cancel_subagent_action.subagent_id = "task-1"
    elif kind == "user_message":
        a.user_message_action.user_message.text = "more"
        a.user_message_action.user_message.message_id = fields.get("message_id", "m1")
    elif kind == "background":
        a.background_task_completion_action.completions.add(task_id="t1", tool_call_id="c1")
    elif kind == "inject":
        a.inject_context_action.injection_id = "inj-1"
        a.inject_context_action.expected_run_id = fields.get("expected", "run-a")
        a.inject_context_action.user_context.user_message.text = "queued follow-up"
    return a


RUNNING = [Phase.PREPARING, Phase.MODELING, Phase.WAITING_TOOLS, Phase.INTERRUPTING]
ENDING = [Phase.CHECKPOINTING, Phase.FINALIZING]


@pytest.mark.parametrize("phase", RUNNING)
def test_a_running_run_takes_input_and_is_cancelled(phase: Phase) -> None:
    assert decide(situation(phase), ACTIVE.key, action("cancel")) == CancelRun()
    assert decide(situation(phase), ACTIVE.key, action("cancel_subagent")) == CancelSubagent("task-1")
    user = decide(situation(phase), ACTIVE.key, action("user_message"))
    assert isinstance(user, Inject) and user.interrupt and user.items[0].key == "user:m1"
    assert user.items[0].injection_id == "user-message:m1"
    background = decide(situation(phase), ACTIVE.key, action("background"))
    assert isinstance(background, Inject) and not background.interrupt and background.items[0].injection_id == ""
    injected = decide(situation(phase), ACTIVE.key, action("inject"))
    assert isinstance(injected, Inject) and injected.items[0].injection_id == "inj-1"


@pytest.mark.parametrize("phase", ENDING)
def test_input_after_the_model_finished_becomes_the_next_run_on_the_stream(phase: Phase) -> None:
    for kind in ("user_message", "background"):
        assert decide(situation(phase), ACTIVE.key, action(kind)) == FollowUp(ACTIVE.key, action(kind))
    assert decide(situation(phase), ACTIVE.key, action("inject")) == FollowUp(ACTIVE.key, action("inject"), "inj-1")
    assert isinstance(decide(situation(phase), ACTIVE.key, action("cancel_subagent")), Ignore)
    expected = EndStream() if phase is Phase.FINALIZING else CancelRun()
    assert decide(situation(phase), ACTIVE.key, action("cancel")) == expected


@pytest.mark.parametrize("phase", RUNNING + ENDING)
def test_an_injection_for_another_run_is_rejected_visibly(phase: Phase) -> None:
    decision = decide(situation(phase), ACTIVE.key, action("inject", expected="run-z"))
    assert isinstance(decision, Reject) and decision.stream == ACTIVE.key and decision.injection_id == "inj-1"
    # Without a Cursor run id, the request id is what an injection names.
    bare = Situation(phase, Stream("req-a", 0, ""), (), prompting.Mode.AGENT)
    assert isinstance(decide(bare, ACTIVE.key, action("inject", expected="req-a")), (Inject, FollowUp))


def test_actions_belong_to_their_stream() -> None:
    now = situation(Phase.MODELING)
    assert decide(now, QUEUED.key, action("cancel")) == CancelQueued(QUEUED.key)
    assert decide(now, QUEUED.key, action("user_message")) == FollowUp(QUEUED.key, action("user_message"))
    assert isinstance(decide(now, QUEUED.key, action("inject", expected="run-a")), Reject)  # B's injection names B's run
    for kind in ("cancel", "user_message", "inject", "cancel_subagent", "background"):
        assert isinstance(decide(now, ("req-old", 0), action(kind)), Ignore)  # a finished stream
        assert isinstance(decide(now, ("req-a", 1), action(kind)), Ignore)  # an earlier generation's input


def test_an_input_without_an_id_gets_one_unique_in_its_run() -> None:
    decision = decide(situation(Phase.MODELING), ACTIVE.key, action("user_message", message_id=""))
    assert isinstance(decision, Inject)
    assert decision.items[0].injection_id == "user-message:fresh" and decision.items[0].key == "injection:user-message:fresh"
