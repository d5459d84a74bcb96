"""Driving rules shared by every tool: wrong kinds, empty results, stale ids, invalid input."""
from __future__ import annotations

import pytest

from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.tools import (
    Done,
    ExecStep,
    Phase,
    Progress,
    ResultKindMismatch,
    ToolProtocolError,
    start_tool,
)

from .support import asked, done, reply, request, sent


def test_wrong_result_kind_raises_and_leaves_the_call_waiting(ctx):
    execution = start_tool(request("Read", {"path": "a"}), ctx)
    message = sent(execution.first())
    wrong = reply(message, write_result=pb.WriteResult(success=pb.WriteSuccess()))
    with pytest.raises(ResultKindMismatch) as raised:
        execution.on_exec_result(wrong)
    assert raised.value.got == "write_result"
    assert "result kind write_result does not match the requested tool Read" in str(raised.value)
    assert execution.phase is Phase.EXEC and execution.outcome is None
    # the right result still completes the call
    result = pb.ReadResult(success=pb.ReadSuccess(content="ok\n"))
    assert not done(execution.on_exec_result(reply(message, read_result=result))).is_error


def test_wrong_kind_can_be_turned_into_a_failure_by_the_runtime(ctx):
    execution = start_tool(request("Delete", {"path": "a"}), ctx)
    message = sent(execution.first())
    try:
        execution.on_exec_result(reply(message, read_result=pb.ReadResult()))
    except ResultKindMismatch as mismatch:
        outcome = done(execution.on_throw(str(mismatch)))
    assert outcome.is_error and "does not match" in outcome.content
    assert execution.completed().delete_tool_call.result.WhichOneof("result") == "error"


def test_interaction_response_for_an_exec_is_a_mismatch(ctx):
    execution = start_tool(request("Read", {"path": "a"}), ctx)
    sent(execution.first())
    response = pb.InteractionResponse(
        switch_mode_request_response=pb.SwitchModeRequestResponse(approved=pb.SwitchModeRequestResponse.Approved())
    )
    with pytest.raises(ResultKindMismatch):
        execution.on_interaction_response(response)
    execution = start_tool(request("SwitchMode", {"target_mode": "plan"}), ctx)
    asked(execution.first())
    with pytest.raises(ResultKindMismatch):
        execution.on_exec_result(pb.ExecClientMessage(read_result=pb.ReadResult()))
    wrong = pb.InteractionResponse(ask_question_interaction_response=pb.AskQuestionInteractionResponse())
    with pytest.raises(ResultKindMismatch):
        execution.on_interaction_response(wrong)


def test_empty_exec_client_message_is_ignored(ctx):
    execution = start_tool(request("Read", {"path": "a"}), ctx)
    message = sent(execution.first())
    assert execution.on_exec_result(pb.ExecClientMessage(id=message.id, exec_id="call-1")) == Progress([])
    assert execution.phase is Phase.EXEC
    assert execution.on_interaction_response(pb.InteractionResponse()) == Progress([])


def test_result_for_an_earlier_exec_of_the_same_call_is_ignored(ctx):
    execution = start_tool(request("StrReplace", {"path": "f", "old_string": "a", "new_string": "b"}), ctx)
    read = sent(execution.first())
    write = sent(execution.on_exec_result(reply(read, read_result=pb.ReadResult(success=pb.ReadSuccess(content="a\n")))))
    # a duplicate of the read result, and a stream_close for the read exec, change nothing
    assert execution.on_exec_result(reply(read, read_result=pb.ReadResult(success=pb.ReadSuccess()))) == Progress([])
    assert execution.on_stream_close(read.id) == Progress([])
    assert execution.on_throw("late", read.id) == Progress([])
    assert not execution.done
    assert not done(execution.on_exec_result(reply(write, write_result=pb.WriteResult(success=pb.WriteSuccess())))).is_error


def test_stream_close_before_a_result_fails_non_shell_execs(ctx):
    execution = start_tool(request("Read", {"path": "a"}), ctx)
    message = sent(execution.first())
    outcome = done(execution.on_stream_close(message.id))
    assert outcome.is_error and "closed without a result" in outcome.content


def test_throw_and_abort(ctx):
    execution = start_tool(request("Grep", {"pattern": "x"}), ctx)
    message = sent(execution.first())
    outcome = done(execution.on_throw("ripgrep crashed", message.id))
    assert outcome.is_error and "ripgrep crashed" in outcome.content
    assert execution.completed().grep_tool_call.result.error.error == outcome.content
    execution = start_tool(request("Shell", {"command": "sleep 100"}), ctx)
    sent(execution.first())
    outcome = done(execution.on_abort("a newer user message arrived"))
    assert outcome.is_error and outcome.content == "Tool execution was interrupted: a newer user message arrived"
    # once done, nothing else changes the outcome
    assert execution.on_abort("again") == Progress([])
    assert execution.on_exec_result(pb.ExecClientMessage(shell_stream=pb.ShellStream(exit=pb.ShellStreamExit()))) == Progress([])
    assert execution.outcome is outcome


def test_invalid_json_arguments(ctx):
    execution = start_tool(request("Read", raw='{"path": '), ctx)
    step = execution.first()
    assert isinstance(step, Done)
    assert step.outcome.is_error and "Invalid arguments for Read" in step.outcome.content
    assert "not valid JSON" in step.outcome.content
    assert execution.completed().read_tool_call.result.error.error_message == step.outcome.content


def test_argument_error_reported_by_the_provider(ctx):
    execution = start_tool(request("Shell", error="unterminated string at 12"), ctx)
    outcome = done(execution.first())
    assert outcome.is_error and "unterminated string at 12" in outcome.content


def test_missing_and_mistyped_arguments(ctx):
    outcome = done(start_tool(request("Read", {}), ctx).first())
    assert outcome.is_error and "missing required argument 'path'" in outcome.content
    outcome = done(start_tool(request("Read", {"path": "a", "limit": "many"}), ctx).first())
    assert outcome.is_error and "'limit' must be an integer" in outcome.content
    outcome = done(start_tool(request("Write", {"path": "a"}), ctx).first())
    assert outcome.is_error and "contents" in outcome.content
    outcome = done(start_tool(request("Read", raw="[1, 2]"), ctx).first())
    assert outcome.is_error and "JSON object" in outcome.content


def test_unknown_tool(ctx):
    execution = start_tool(request("GenerateImage", {"prompt": "cat"}), ctx)
    assert not execution.presentable
    outcome = done(execution.first())
    assert outcome.is_error and outcome.content == "unknown tool: GenerateImage"
    assert execution.completed().WhichOneof("tool") is None
    outcome = done(start_tool(request("Nope", raw="{bad json"), ctx).first())
    assert outcome.content == "unknown tool: Nope"


def test_lifecycle_misuse_raises(ctx):
    execution = start_tool(request("Read", {"path": "a"}), ctx)
    with pytest.raises(ToolProtocolError):
        execution.completed()
    assert isinstance(execution.first(), ExecStep)
    with pytest.raises(ToolProtocolError):
        execution.first()


def test_placeholder_has_variant_and_id_only(ctx):
    execution = start_tool(request("Shell", {"command": "ls"}), ctx)
    placeholder = execution.placeholder()
    assert placeholder.WhichOneof("tool") == "shell_tool_call"
    assert placeholder.tool_call_id == "call-1"
    assert placeholder.shell_tool_call.args == pb.ShellArgs()
    assert not placeholder.HasField("started_at_ms")
    completed_card = None
    sent_message = sent(execution.first())
    execution.on_exec_result(reply(sent_message, shell_stream=pb.ShellStream(exit=pb.ShellStreamExit(code=0))))
    completed_card = execution.completed(completed_at_ms=9, started_at_ms=3)
    assert (completed_card.started_at_ms, completed_card.completed_at_ms) == (3, 9)


def test_out_of_range_integers_are_argument_errors(ctx):
    outcome = done(start_tool(request("Read", {"path": "a", "offset": 10**12}), ctx).first())
    assert outcome.is_error and "'offset' is out of range" in outcome.content


def test_lone_surrogates_do_not_break_the_wire(ctx):
    execution = start_tool(request("Write", raw='{"path": "a\\ud800b", "contents": "x\\udc00"}'), ctx)
    message = sent(execution.first())
    assert message.write_args.path == "/ws/a\ufffdb"
    assert message.write_args.file_text == "x\ufffd"
    assert message.SerializeToString()
