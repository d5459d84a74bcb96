"""The pure parts of checkpoint turns and derived state: steps close in order and a published step
never changes; tool calls keep the order they started in; the state a checkpoint derives."""
from __future__ import annotations

import hashlib

from cursor_byok.conversation.actions import follow_up_request
from cursor_byok.conversation.history import DerivedState, StepLog, TurnLog, decode_turn
from cursor_byok.protocol import agent_pb2 as pb


def read_call(call_id: str, path: str, ok: bool = True) -> pb.ToolCall:
    call = pb.ToolCall(tool_call_id=call_id)
    call.read_tool_call.args.path = path
    if ok:
        call.read_tool_call.result.success.path = path
    else:
        call.read_tool_call.result.error.error_message = "no such file"
    return call


def kinds(log: StepLog) -> list[str]:
    return [pb.ConversationStep.FromString(data).WhichOneof("message") for _, data in log.published()]


def test_steps_close_at_boundaries_and_what_was_published_never_changes() -> None:
    log = StepLog()
    log.thinking("hmm")
    log.text("partial")  # thinking closes (duration at least 1 ms) when text begins
    assert kinds(log) == ["thinking_message"]
    first = log.published()
    log.text(" answer")
    log.tool_started("c1")
    log.tool_started("c2")
    log.tool_completed("c2", read_call("c2", "/b"))  # finished first, but started second
    assert kinds(log) == ["thinking_message", "assistant_message"]
    log.tool_completed("c1", read_call("c1", "/a"))
    assert kinds(log) == ["thinking_message", "assistant_message", "tool_call", "tool_call"]
    published = log.published()
    assert published[: len(first)] == first
    steps = [pb.ConversationStep.FromString(data) for _, data in published]
    assert steps[1].assistant_message.text == "partial answer"
    assert [s.tool_call.tool_call_id for s in steps[2:]] == ["c1", "c2"]
    assert all(hashlib.sha256(data).digest() == bid for bid, data in published)


def test_turns_carry_the_earlier_ones_and_a_continuation_extends_the_last() -> None:
    earlier = pb.ConversationTurnStructure(agent_conversation_turn=pb.AgentConversationTurnStructure(request_id="r0", steps=[b"s" * 32]))
    earlier_bytes = earlier.SerializeToString()
    earlier_id = hashlib.sha256(earlier_bytes).digest()
    turns = TurnLog("r1")
    turns.steps.text("more")  # no user message: it extends the state's last turn
    turns.close()
    assert turns.continues()
    ids, blobs = turns.build([b"x" * 32, earlier_id], earlier_bytes)
    assert ids[0] == b"x" * 32 and ids[1] != earlier_id and len(ids) == 2
    extended = decode_turn(dict(blobs)[ids[1]])
    assert extended is not None and extended.request_id == "r0" and len(extended.steps) == 2

    turns = TurnLog("r2")
    turns.begin(pb.UserMessage(text="hi", mode=pb.AGENT_MODE_AGENT), pb.AGENT_MODE_PLAN)
    turns.steps.text("hello")
    turns.close()
    ids, blobs = turns.build([earlier_id], None)
    assert ids[0] == earlier_id and len(ids) == 2
    turn = decode_turn(dict(blobs)[ids[1]])
    assert turn is not None and turn.request_id == "r2"
    assert pb.UserMessage.FromString(dict(blobs)[turn.user_message]).mode == pb.AGENT_MODE_PLAN


def test_derived_state_from_the_calls() -> None:
    base = pb.ConversationStateStructure(read_paths=["/a"])
    base.subagent_states["agent-old"].created_timestamp_ms = 1
    derived = DerivedState(base)
    derived.add([read_call("1", "/a"), read_call("2", "/b"), read_call("3", "/c", ok=False)])
    derived.add([read_call("4", "/b")])  # taken in pieces, as steps publish

    plan = pb.ToolCall()
    plan.create_plan_tool_call.args.plan = "1. do it"
    derived.add([plan])
    assert derived.plan is None  # not accepted (no success)
    plan.create_plan_tool_call.result.success.SetInParent()
    derived.add([plan])
    assert derived.plan is not None and pb.ConversationPlan.FromString(derived.plan[1]).plan == "1. do it"

    task = pb.ToolCall(tool_call_id="t1", started_at_ms=5, completed_at_ms=9)
    task.task_tool_call.args.description = "look around"
    task.task_tool_call.result.success.agent_id = "agent-7"
    resumed = pb.ToolCall(tool_call_id="t2", started_at_ms=20, completed_at_ms=30)
    resumed.task_tool_call.result.success.agent_id = "agent-old"
    derived.add([task, resumed])

    state = pb.ConversationStateStructure()
    state.CopyFrom(base)
    derived.apply(state)
    assert list(state.read_paths) == ["/a", "/b"] and state.plan == derived.plan[0]
    run = state.subagent_runs_by_parent_tool_call_id["t1"]
    assert (run.subagent_id, run.status, run.title, run.completed_timestamp_ms) == ("agent-7", pb.SUBAGENT_RUN_STATUS_SUCCESS, "look around", 9)
    assert state.subagent_states["agent-7"].created_timestamp_ms == 5
    old = state.subagent_states["agent-old"]
    assert (old.created_timestamp_ms, old.last_used_timestamp_ms) == (1, 30)  # a resumed agent keeps its origin


def test_a_follow_up_keeps_the_state_it_builds_on() -> None:
    base = pb.AgentRunRequest(conversation_id="c")
    base.conversation_state.active_branch_name = "from-the-ide"
    action = pb.ConversationAction()
    action.user_message_action.user_message.text = "more"
    assert follow_up_request(base, action, None).conversation_state.active_branch_name == "from-the-ide"
    newer = pb.ConversationStateStructure(active_branch_name="from-our-checkpoint")
    assert follow_up_request(base, action, newer).conversation_state.active_branch_name == "from-our-checkpoint"
