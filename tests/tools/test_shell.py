from __future__ import annotations

from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.tools import Done, ExecStep, Progress, ToolContext, parse_terminal_file, start_tool

from .support import done, reply, request, sent


def stream(message: pb.ExecServerMessage, **event) -> pb.ExecClientMessage:
    return reply(message, shell_stream=pb.ShellStream(**event))


def test_shell_stream_args(ctx):
    execution = start_tool(request("Shell", {"command": "ls -la", "working_directory": "sub", "timeout_ms": 5000}), ctx)
    message = sent(execution.first())
    assert message.WhichOneof("message") == "shell_stream_args"
    assert message.DESCRIPTOR.fields_by_name["shell_stream_args"].number == 14
    args = message.shell_stream_args
    assert args.command == "ls -la"
    assert args.working_directory == "/ws/sub"
    assert args.timeout == 5000
    assert args.tool_call_id == "call-1"
    assert args.close_stdin is True
    assert args.timeout_behavior == pb.TIMEOUT_BEHAVIOR_BACKGROUND
    assert args.hard_timeout == 86_400_000
    assert args.file_output_threshold_bytes == 40_000
    assert message.accept_hook_additional_contexts is True
    card = execution.started().shell_tool_call
    assert card.args.description == "ls -la"  # defaults to the command
    assert card.description == "ls -la"


def test_shell_default_timeout_and_directory(ctx):
    args = sent(start_tool(request("Shell", {"command": "true"}), ctx).first()).shell_stream_args
    assert args.timeout == 30_000
    assert args.working_directory == "/ws"


def test_shell_streaming_progress_then_exit(ctx):
    execution = start_tool(request("Shell", {"command": "make"}), ctx, model_call_id="resp-9")
    message = sent(execution.first())
    assert execution.on_exec_result(stream(message, start=pb.ShellStreamStart())) == Progress([])
    step = execution.on_exec_result(stream(message, stdout=pb.ShellStreamStdout(data="building\n")))
    assert isinstance(step, Progress) and len(step.updates) == 1
    update = step.updates[0].tool_call_delta
    assert update.call_id == "call-1" and update.model_call_id == "resp-9"
    assert update.tool_call_delta.shell_tool_call_delta.stdout.content == "building\n"
    step = execution.on_exec_result(stream(message, stderr=pb.ShellStreamStderr(data="warning\n")))
    assert step.updates[0].tool_call_delta.tool_call_delta.shell_tool_call_delta.stderr.content == "warning\n"
    assert not execution.done
    outcome = done(execution.on_exec_result(stream(message, exit=pb.ShellStreamExit(code=0, cwd="/ws"))))
    assert not outcome.is_error
    assert outcome.content == "Exit code: 0\n\nbuilding\nwarning\n"
    result = execution.completed().shell_tool_call.result
    assert result.success.exit_code == 0
    assert result.success.stdout == "building\n"
    assert result.success.stderr == "warning\n"
    # the IDE's stream_close after exit is ignored
    assert execution.on_stream_close(message.id) == Progress([])


def test_shell_non_zero_exit_is_a_failure(ctx):
    execution = start_tool(request("Shell", {"command": "false"}), ctx)
    message = sent(execution.first())
    outcome = done(execution.on_exec_result(stream(message, exit=pb.ShellStreamExit(code=2))))
    assert outcome.is_error and outcome.content.startswith("Exit code: 2")
    assert execution.completed().shell_tool_call.result.failure.exit_code == 2


def test_shell_stream_closed_without_exit_is_an_error(ctx):
    execution = start_tool(request("Shell", {"command": "sleep 1"}), ctx)
    message = sent(execution.first())
    execution.on_exec_result(stream(message, stdout=pb.ShellStreamStdout(data="x")))
    outcome = done(execution.on_stream_close(message.id))
    assert outcome.is_error and outcome.content == "shell stream closed without a result"
    assert execution.completed().shell_tool_call.result.WhichOneof("result") == "spawn_error"


def test_shell_rejected_and_permission_denied(ctx):
    execution = start_tool(request("Shell", {"command": "rm -rf /"}), ctx)
    outcome = done(execution.on_exec_result(stream(sent(execution.first()), rejected=pb.ShellRejected(reason="blocked"))))
    assert outcome.is_error and "blocked" in outcome.content
    execution = start_tool(request("Shell", {"command": "x"}), ctx)
    outcome = done(
        execution.on_exec_result(stream(sent(execution.first()), permission_denied=pb.ShellPermissionDenied(error="sandbox")))
    )
    assert outcome.is_error and "sandbox" in outcome.content


def test_shell_backgrounded_then_await(ctx, clock):
    shell = start_tool(request("Shell", {"command": "npm run dev"}, call_id="sh-1"), ctx)
    message = sent(shell.first())
    shell.on_exec_result(stream(message, stdout=pb.ShellStreamStdout(data="listening\n")))
    outcome = done(shell.on_exec_result(stream(message, backgrounded=pb.ShellStreamBackgrounded(shell_id=7, pid=4242))))
    assert not outcome.is_error
    assert "shell_id=7" in outcome.content
    assert "/home/u/.cursor/projects/ws/terminals/7.txt" in outcome.content
    card = shell.completed().shell_tool_call.result
    assert card.is_background and card.success.shell_id == 7 and card.pid == 4242

    waiter = start_tool(request("Await", {"shell_id": "7", "timeout_ms": 2000}, call_id="aw-1"), ctx)
    poll = sent(waiter.first())
    assert poll.WhichOneof("message") == "read_args"
    assert poll.read_args.path == "/home/u/.cursor/projects/ws/terminals/7.txt"
    assert poll.read_args.tool_call_id == "aw-1"
    running = "---\npid: 4242\ncwd: /ws\ncommand: npm run dev\nstatus: running\nrunning_for_ms: 900\n---\nlistening\n"
    clock.now += 500
    step = waiter.on_exec_result(reply(poll, read_result=pb.ReadResult(success=pb.ReadSuccess(content=running))))
    assert isinstance(step, ExecStep) and step.delay_ms == 700
    poll2 = sent(step)
    assert poll2.id != poll.id and poll2.read_args.path == poll.read_args.path
    finished = running + "compiled\n\n---\nexit_code: 0\nelapsed_ms: 3100\nended_at: 2025-01-01T00:00:00Z\n---\n"
    clock.now += 700
    outcome = done(waiter.on_exec_result(reply(poll2, read_result=pb.ReadResult(success=pb.ReadSuccess(content=finished)))))
    assert not outcome.is_error
    assert outcome.content.startswith("Shell 7 finished with exit code 0 after 3100 ms.")
    assert "listening\ncompiled" in outcome.content
    complete = waiter.completed().await_tool_call.result.success.complete
    assert complete.task_id == "7" and complete.exit_code == 0 and complete.runtime_ms == 3100
    assert waiter.seen_output == ("7", len("listening\ncompiled"))


def test_await_returns_only_output_not_seen_before(clock):
    ctx = ToolContext(terminals_folder="/t", clock_ms=clock, shell_output_seen={"5": len("first\n")})
    waiter = start_tool(request("Await", {"shell_id": "5", "timeout_ms": 0}), ctx)
    content = "---\nstatus: running\n---\nfirst\nsecond\n"
    outcome = done(waiter.on_exec_result(reply(sent(waiter.first()), read_result=pb.ReadResult(success=pb.ReadSuccess(content=content)))))
    assert "second" in outcome.content and "first" not in outcome.content
    assert waiter.seen_output == ("5", len("first\nsecond"))
    ctx = ToolContext(terminals_folder="/t", clock_ms=clock, shell_output_seen={"5": len("first\nsecond")})
    waiter = start_tool(request("Await", {"shell_id": "5", "timeout_ms": 0}), ctx)
    outcome = done(waiter.on_exec_result(reply(sent(waiter.first()), read_result=pb.ReadResult(success=pb.ReadSuccess(content=content)))))
    assert outcome.content.endswith("(no new output)")


def test_await_times_out_reporting_still_running(ctx, clock):
    waiter = start_tool(request("Await", {"shell_id": "3", "timeout_ms": 1000}), ctx)
    poll = sent(waiter.first())
    clock.now += 1000
    content = "---\nstatus: running\n---\npartial output\n"
    outcome = done(waiter.on_exec_result(reply(poll, read_result=pb.ReadResult(success=pb.ReadSuccess(content=content)))))
    assert not outcome.is_error
    assert "still running" in outcome.content and "partial output" in outcome.content
    assert waiter.completed().await_tool_call.result.success.still_running.wake_reason == "timeout"


def test_await_errors(clock):
    no_folder = ToolContext(workspace_root="/ws", clock_ms=clock)
    outcome = done(start_tool(request("Await", {"shell_id": "3"}), no_folder).first())
    assert outcome.is_error and "terminals folder" in outcome.content
    ctx = ToolContext(terminals_folder="/t", clock_ms=clock)
    waiter = start_tool(request("Await", {"shell_id": "9"}), ctx)
    outcome = done(
        waiter.on_exec_result(reply(sent(waiter.first()), read_result=pb.ReadResult(file_not_found=pb.ReadFileNotFound())))
    )
    assert outcome.is_error and "shell_id=9" in outcome.content
    outcome = done(start_tool(request("Await", {"shell_id": "../etc/passwd"}), ctx).first())
    assert outcome.is_error


def test_parse_terminal_file():
    running = parse_terminal_file("---\npid: 1\nstatus: running\n---\nhello\n")
    assert not running.finished and running.output == "hello"
    ended = parse_terminal_file("---\npid: 1\n---\nhello\n---\nexit_code: 3\nelapsed_ms: 12\n---\n")
    assert ended.finished and ended.exit_code == 3 and ended.elapsed_ms == 12 and ended.output == "hello"
    plain = parse_terminal_file("no header at all\n---\n")
    assert not plain.finished


def test_shell_plain_shell_result_is_accepted(ctx):
    execution = start_tool(request("Shell", {"command": "echo hi"}), ctx)
    result = pb.ShellResult(success=pb.ShellSuccess(exit_code=0, stdout="hi\n"))
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), shell_result=result)))
    assert outcome.content == "Exit code: 0\n\nhi\n" and not outcome.is_error


def test_shell_output_kept_bounded(ctx):
    execution = start_tool(request("Shell", {"command": "yes"}), ctx)
    message = sent(execution.first())
    chunk = "y\n" * 5000
    for _ in range(20):
        execution.on_exec_result(stream(message, stdout=pb.ShellStreamStdout(data=chunk)))
    outcome = done(execution.on_exec_result(stream(message, exit=pb.ShellStreamExit(code=0))))
    assert len(outcome.content) < 41_000
    assert "characters elided" in outcome.content
    assert isinstance(execution.on_exec_result(stream(message, exit=pb.ShellStreamExit(code=0))), Progress)
    assert not isinstance(execution.on_abort("late"), Done)
