from __future__ import annotations

from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.tools import ToolContext, start_tool

from .support import done, reply, request, sent


def test_glob_maps_to_grep_args_files_with_matches(ctx):
    execution = start_tool(request("Glob", {"glob_pattern": "**/*.py", "target_directory": "src"}), ctx)
    message = sent(execution.first())
    args = message.grep_args
    assert message.WhichOneof("message") == "grep_args"
    assert args.pattern == ""
    assert args.path == "/ws/src"
    assert args.glob == "**/*.py"
    assert args.output_mode == "files_with_matches"
    assert args.tool_call_id == "call-1"
    success = pb.GrepSuccess(pattern="", path="/ws/src", output_mode="files_with_matches")
    success.workspace_results["/ws"].files.files.extend(["/ws/src/a.py", "/ws/src/b.py"])
    success.workspace_results["/ws"].files.total_files = 2
    outcome = done(execution.on_exec_result(reply(message, grep_result=pb.GrepResult(success=success))))
    assert outcome.content == "/ws/src/a.py\n/ws/src/b.py"
    card = execution.completed().glob_tool_call
    assert card.args.glob_pattern == "**/*.py" and card.args.target_directory == "/ws/src"
    assert list(card.result.success.files) == ["/ws/src/a.py", "/ws/src/b.py"]
    assert card.result.success.total_files == 2


def test_glob_without_matches_and_with_error(ctx):
    execution = start_tool(request("Glob", {"glob_pattern": "*.zig"}), ctx)
    message = sent(execution.first())
    assert not message.grep_args.HasField("path")
    outcome = done(execution.on_exec_result(reply(message, grep_result=pb.GrepResult(success=pb.GrepSuccess()))))
    assert outcome.content == "No files found matching *.zig." and not outcome.is_error
    execution = start_tool(request("Glob", {"glob_pattern": "*.zig"}), ctx)
    result = pb.GrepResult(error=pb.GrepError(error="rg missing"))
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), grep_result=result)))
    assert outcome.is_error and "rg missing" in outcome.content
    assert execution.completed().glob_tool_call.result.error.error == "Glob failed: rg missing"


def test_grep_args_carry_options(ctx):
    execution = start_tool(
        request(
            "Grep",
            {
                "pattern": "def \\w+",
                "path": "lib",
                "glob": "*.py",
                "output_mode": "content",
                "case_insensitive": True,
                "context_lines": 2,
                "head_limit": 50,
            },
        ),
        ctx,
    )
    args = sent(execution.first()).grep_args
    assert args.pattern == "def \\w+"
    assert args.path == "/ws/lib"
    assert args.glob == "*.py"
    assert args.output_mode == "content"
    assert args.case_insensitive is True
    assert args.context == 2
    assert args.head_limit == 50
    assert args.tool_call_id == "call-1"
    assert execution.started().grep_tool_call.args == args


def test_grep_content_rendering(ctx):
    execution = start_tool(request("Grep", {"pattern": "x", "output_mode": "content"}), ctx)
    message = sent(execution.first())
    success = pb.GrepSuccess(pattern="x", output_mode="content")
    content = success.workspace_results["/ws"].content
    match = content.matches.add(file="/ws/a.py")
    match.matches.add(line_number=3, content="before", is_context_line=True)
    match.matches.add(line_number=4, content="x = 1")
    content.client_truncated = True
    outcome = done(execution.on_exec_result(reply(message, grep_result=pb.GrepResult(success=success))))
    assert outcome.content.startswith("/ws/a.py\n3-before\n4:x = 1")
    assert "truncated" in outcome.content
    assert execution.completed().grep_tool_call.result.success.pattern == "x"


def test_grep_count_and_no_match(ctx):
    execution = start_tool(request("Grep", {"pattern": "x", "output_mode": "count"}), ctx)
    message = sent(execution.first())
    success = pb.GrepSuccess()
    success.workspace_results["/ws"].count.counts.add(file="/ws/a.py", count=7)
    outcome = done(execution.on_exec_result(reply(message, grep_result=pb.GrepResult(success=success))))
    assert outcome.content == "/ws/a.py:7"
    execution = start_tool(request("Grep", {"pattern": "x"}), ctx)
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), grep_result=pb.GrepResult(success=pb.GrepSuccess()))))
    assert outcome.content == "No matches found." and not outcome.is_error


def test_grep_rejects_an_unknown_output_mode(ctx):
    execution = start_tool(request("Grep", {"pattern": "x", "output_mode": "lines"}), ctx)
    outcome = done(execution.first())
    assert outcome.is_error and "output_mode" in outcome.content


def _diagnostics(path: str, *messages: str) -> pb.DiagnosticsResult:
    success = pb.DiagnosticsSuccess(path=path)
    for line, text in enumerate(messages, start=1):
        item = success.diagnostics.add(severity=pb.DIAGNOSTIC_SEVERITY_ERROR, message=text, source="pyright")
        item.range.start.line = line
        item.range.start.column = 4
    return pb.DiagnosticsResult(success=success)


def test_read_lints_asks_one_path_at_a_time(ctx):
    execution = start_tool(request("ReadLints", {"paths": ["a.py", "b.py", "c.py"]}), ctx)
    first = sent(execution.first())
    assert first.WhichOneof("message") == "diagnostics_args"
    assert first.diagnostics_args.path == "/ws/a.py"
    assert first.diagnostics_args.tool_call_id == "call-1"
    second = sent(execution.on_exec_result(reply(first, diagnostics_result=_diagnostics("/ws/a.py", "bad name"))))
    assert second.diagnostics_args.path == "/ws/b.py"
    assert second.id != first.id
    third = sent(execution.on_exec_result(reply(second, diagnostics_result=_diagnostics("/ws/b.py"))))
    assert third.diagnostics_args.path == "/ws/c.py"
    result = pb.DiagnosticsResult(file_not_found=pb.DiagnosticsFileNotFound(path="/ws/c.py"))
    outcome = done(execution.on_exec_result(reply(third, diagnostics_result=result)))
    assert not outcome.is_error
    assert "/ws/a.py:\n  L1:4 [error] bad name (pyright)" in outcome.content
    assert "/ws/c.py: file not found" in outcome.content
    card = execution.completed().read_lints_tool_call
    assert list(card.args.paths) == ["/ws/a.py", "/ws/b.py", "/ws/c.py"]
    assert card.result.success.total_diagnostics == 1
    assert card.result.success.total_files == 2


def test_read_lints_fails_when_every_path_fails_or_none_given(ctx):
    execution = start_tool(request("ReadLints", {"paths": ["a.py"]}), ctx)
    result = pb.DiagnosticsResult(error=pb.DiagnosticsError(path="/ws/a.py", error="no language server"))
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), diagnostics_result=result)))
    assert outcome.is_error and "no language server" in outcome.content
    outcome = done(start_tool(request("ReadLints", {}), ToolContext()).first())
    assert outcome.is_error and "at least one path" in outcome.content


def test_read_lints_without_paths_asks_for_the_workspace(ctx):
    execution = start_tool(request("ReadLints", {}), ctx)
    assert sent(execution.first()).diagnostics_args.path == "/ws"


def _newer_union() -> pb.GrepUnionResult:
    """A union whose result is a member this build does not know (field 99, an empty message)."""
    return pb.GrepUnionResult.FromString(bytes([0x9A, 0x06, 0x00]))


def test_grep_results_in_a_newer_form_are_not_reported_as_no_match(ctx):
    execution = start_tool(request("Grep", {"pattern": "x"}), ctx)
    success = pb.GrepSuccess()
    success.workspace_results["/ws"].CopyFrom(_newer_union())
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), grep_result=pb.GrepResult(success=success))))
    assert outcome.is_error and "No matches" not in outcome.content and "newer" in outcome.content


def test_grep_lists_what_it_read_and_says_what_it_could_not(ctx):
    execution = start_tool(request("Grep", {"pattern": "x", "output_mode": "files_with_matches"}), ctx)
    success = pb.GrepSuccess()
    success.workspace_results["/a"].files.files.append("/a/x.py")
    success.workspace_results["/b"].CopyFrom(_newer_union())
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), grep_result=pb.GrepResult(success=success))))
    assert outcome.content.startswith("/a/x.py\n") and "newer" in outcome.content and not outcome.is_error


def test_glob_results_in_a_newer_form_are_not_reported_as_no_files(ctx):
    execution = start_tool(request("Glob", {"glob_pattern": "*.py"}), ctx)
    success = pb.GrepSuccess()
    success.workspace_results["/ws"].CopyFrom(_newer_union())
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), grep_result=pb.GrepResult(success=success))))
    assert outcome.is_error and "No files" not in outcome.content and "newer" in outcome.content
