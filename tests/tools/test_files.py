from __future__ import annotations

from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.tools import start_tool
from tests.harness.newer import add_newer_member

from .support import done, reply, request, sent


def read_success(content: str, **extra) -> pb.ReadResult:
    return pb.ReadResult(success=pb.ReadSuccess(content=content, **extra))


def test_read_sends_read_args_and_numbers_lines(ctx):
    execution = start_tool(request("Read", {"path": "src/a.py", "offset": 2, "limit": 2}), ctx)
    message = sent(execution.first())
    assert message.WhichOneof("message") == "read_args"
    assert message.exec_id == "call-1"
    assert message.read_args.path == "/ws/src/a.py"
    assert message.read_args.tool_call_id == "call-1"
    assert message.read_args.offset == 2
    assert message.read_args.limit == 2
    outcome = done(execution.on_exec_result(reply(message, read_result=read_success("b\nc\n", range_applied=True, total_lines=4))))
    assert not outcome.is_error
    assert outcome.content == "     2|b\n     3|c"
    card = execution.completed()
    assert card.tool_call_id == "call-1"
    assert card.read_tool_call.args.path == "/ws/src/a.py"
    assert card.read_tool_call.result.success.content == "b\nc"
    assert card.read_tool_call.result.success.read_range.start_line == 2


def test_read_slices_when_the_ide_did_not_apply_the_range(ctx):
    execution = start_tool(request("Read", {"path": "/abs/f.txt", "offset": 3, "limit": 1}), ctx)
    message = sent(execution.first())
    assert message.read_args.path == "/abs/f.txt"
    outcome = done(execution.on_exec_result(reply(message, read_result=read_success("1\n2\n3\n4\n"))))
    assert outcome.content == "     3|3"


def test_read_empty_file_and_truncation_note(ctx):
    execution = start_tool(request("Read", {"path": "e"}), ctx)
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), read_result=read_success(""))))
    assert outcome.content == "File is empty."
    execution = start_tool(request("Read", {"path": "big"}), ctx)
    outcome = done(
        execution.on_exec_result(
            reply(sent(execution.first()), read_result=read_success("x\n", truncated=True, total_lines=9000))
        )
    )
    assert outcome.content.startswith("     1|x")
    assert "9000 lines" in outcome.content


def test_read_error_variants_are_errors(ctx):
    cases = {
        "file_not_found": pb.ReadResult(file_not_found=pb.ReadFileNotFound(path="/ws/x")),
        "permission_denied": pb.ReadResult(permission_denied=pb.ReadPermissionDenied(path="/ws/x")),
        "rejected": pb.ReadResult(rejected=pb.ReadRejected(path="/ws/x", reason="ignored by .cursorignore")),
        "error": pb.ReadResult(error=pb.ReadError(path="/ws/x", error="EIO")),
        "invalid_file": pb.ReadResult(invalid_file=pb.ReadInvalidFile(path="/ws/x", reason="directory")),
    }
    expected_text = {
        "file_not_found": "File not found: /ws/x",
        "permission_denied": "Permission denied",
        "rejected": "ignored by .cursorignore",
        "error": "EIO",
        "invalid_file": "directory",
    }
    for kind, result in cases.items():
        execution = start_tool(request("Read", {"path": "x"}), ctx)
        outcome = done(execution.on_exec_result(reply(sent(execution.first()), read_result=result)))
        assert outcome.is_error, kind
        assert expected_text[kind] in outcome.content
        assert execution.completed().read_tool_call.result.WhichOneof("result") == "error"


def test_read_success_is_decided_by_the_oneof_not_the_text(ctx):
    execution = start_tool(request("Read", {"path": "x"}), ctx)
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), read_result=read_success("Error: not found"))))
    assert not outcome.is_error


def test_read_accepts_redacted_read_result(ctx):
    execution = start_tool(request("Read", {"path": "x"}), ctx)
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), redacted_read_result=read_success("s\n"))))
    assert outcome.content == "     1|s"


def test_write_sends_whole_file_and_presents_edit(ctx):
    execution = start_tool(request("Write", {"path": "n.txt", "contents": "a\nb\n"}), ctx)
    assert execution.placeholder().WhichOneof("tool") == "edit_tool_call"
    message = sent(execution.first())
    assert message.WhichOneof("message") == "write_args"
    assert message.write_args.path == "/ws/n.txt"
    assert message.write_args.file_text == "a\nb\n"
    assert message.write_args.tool_call_id == "call-1"
    started = execution.started(started_at_ms=5)
    assert started.started_at_ms == 5
    assert started.edit_tool_call.args.stream_content == "a\nb\n"
    outcome = done(
        execution.on_exec_result(reply(message, write_result=pb.WriteResult(success=pb.WriteSuccess(path="/ws/n.txt"))))
    )
    assert not outcome.is_error
    success = execution.completed().edit_tool_call.result.success
    assert success.after_full_file_content == "a\nb\n"
    assert success.lines_added == 2


def test_write_failures(ctx):
    for result, text in [
        (pb.WriteResult(permission_denied=pb.WritePermissionDenied(path="p", error="EACCES")), "EACCES"),
        (pb.WriteResult(no_space=pb.WriteNoSpace(path="p")), "No space"),
        (pb.WriteResult(error=pb.WriteError(path="p", error="boom")), "boom"),
        (pb.WriteResult(rejected=pb.WriteRejected(path="p", reason="user said no")), "user said no"),
    ]:
        execution = start_tool(request("Write", {"path": "p", "contents": ""}), ctx)
        outcome = done(execution.on_exec_result(reply(sent(execution.first()), write_result=result)))
        assert outcome.is_error and text in outcome.content
        assert execution.completed().edit_tool_call.result.WhichOneof("result") != "success"


def _str_replace(ctx, args, file_text):
    execution = start_tool(request("StrReplace", {"path": "f.py", **args}), ctx)
    read = sent(execution.first())
    assert read.WhichOneof("message") == "read_args"
    assert read.read_args.path == "/ws/f.py"
    step = execution.on_exec_result(reply(read, read_result=pb.ReadResult(success=pb.ReadSuccess(content=file_text))))
    return execution, step


def test_str_replace_exact_match_then_write(ctx):
    execution, step = _str_replace(ctx, {"old_string": "b = 1", "new_string": "b = 2"}, "a = 0\nb = 1\n")
    write = sent(step)
    assert write.WhichOneof("message") == "write_args"
    assert write.write_args.file_text == "a = 0\nb = 2\n"
    assert write.write_args.tool_call_id == "call-1"
    assert write.exec_id == "call-1"
    outcome = done(execution.on_exec_result(reply(write, write_result=pb.WriteResult(success=pb.WriteSuccess()))))
    assert outcome.content == "Replaced 1 occurrence in /ws/f.py."
    card = execution.completed().edit_tool_call
    assert card.args.stream_content == "b = 2"
    assert card.result.success.before_full_file_content == "a = 0\nb = 1\n"
    assert card.result.success.after_full_file_content == "a = 0\nb = 2\n"


def test_str_replace_missing_and_ambiguous(ctx):
    execution, step = _str_replace(ctx, {"old_string": "zzz", "new_string": "y"}, "abc\n")
    outcome = done(step)
    assert outcome.is_error and outcome.content == "old_string not found in /ws/f.py"
    execution, step = _str_replace(ctx, {"old_string": "x", "new_string": "y"}, "x x x\n")
    outcome = done(step)
    assert outcome.is_error
    assert outcome.content == "old_string appears 3 times in /ws/f.py; add context or set replace_all"


def test_str_replace_replace_all(ctx):
    execution, step = _str_replace(ctx, {"old_string": "x", "new_string": "y", "replace_all": True}, "x x x\n")
    assert sent(step).write_args.file_text == "y y y\n"


def test_str_replace_preserves_crlf(ctx):
    original = "one\r\ntwo\r\nthree\r\n"
    execution, step = _str_replace(ctx, {"old_string": "one\ntwo", "new_string": "uno\ndos"}, original)
    assert sent(step).write_args.file_text == "uno\r\ndos\r\nthree\r\n"
    execution, step = _str_replace(ctx, {"old_string": "two\r\n", "new_string": "2\r\n"}, original)
    assert sent(step).write_args.file_text == "one\r\n2\r\nthree\r\n"


def test_str_replace_read_failure_presents_edit_failure(ctx):
    execution = start_tool(request("StrReplace", {"path": "f", "old_string": "a", "new_string": "b"}), ctx)
    read = sent(execution.first())
    outcome = done(execution.on_exec_result(reply(read, read_result=pb.ReadResult(file_not_found=pb.ReadFileNotFound()))))
    assert outcome.is_error
    assert execution.completed().edit_tool_call.result.WhichOneof("result") == "file_not_found"


def test_str_replace_refuses_a_truncated_read(ctx):
    execution, step = _str_replace(ctx, {"old_string": "a", "new_string": "b"}, "a\n")
    assert sent(step)  # sanity: normal read goes on to write
    execution = start_tool(request("StrReplace", {"path": "f", "old_string": "a", "new_string": "b"}), ctx)
    read = sent(execution.first())
    result = pb.ReadResult(success=pb.ReadSuccess(content="a\n", truncated=True))
    assert done(execution.on_exec_result(reply(read, read_result=result))).is_error


def _unreadable_successes() -> dict[str, pb.ReadSuccess]:
    by_blob = pb.ReadSuccess(output_blob_id=b"\x01\x02", total_lines=3)
    newer = pb.ReadSuccess(content="a\n", total_lines=1)
    add_newer_member(newer, "output")
    return {"by blob id": by_blob, "newer member": pb.ReadSuccess.FromString(newer.SerializeToString())}


def test_content_the_server_cannot_read_is_never_taken_for_an_empty_file(ctx):
    for name, success in _unreadable_successes().items():
        execution = start_tool(request("Read", {"path": "f.py"}), ctx)
        outcome = done(execution.on_exec_result(reply(sent(execution.first()), read_result=pb.ReadResult(success=success))))
        assert outcome.is_error and "cannot read" in outcome.content and "empty" not in outcome.content, name

        execution = start_tool(request("StrReplace", {"path": "f.py", "old_string": "", "new_string": "new"}), ctx)
        outcome = done(execution.on_exec_result(reply(sent(execution.first()), read_result=pb.ReadResult(success=success))))
        assert outcome.is_error and "cannot read" in outcome.content, name  # no write of a file it never saw


def test_delete_args_and_results(ctx):
    execution = start_tool(request("Delete", {"path": "old.txt"}), ctx)
    message = sent(execution.first())
    assert message.delete_args.path == "/ws/old.txt"
    assert message.delete_args.tool_call_id == "call-1"
    outcome = done(execution.on_exec_result(reply(message, delete_result=pb.DeleteResult(success=pb.DeleteSuccess(path="/ws/old.txt")))))
    assert outcome.content == "Deleted /ws/old.txt." and not outcome.is_error
    assert execution.completed().delete_tool_call.result.HasField("success")
    for result in [
        pb.DeleteResult(file_not_found=pb.DeleteFileNotFound()),
        pb.DeleteResult(not_file=pb.DeleteNotFile(actual_type="directory")),
        pb.DeleteResult(permission_denied=pb.DeletePermissionDenied(client_visible_error="ro")),
        pb.DeleteResult(file_busy=pb.DeleteFileBusy()),
        pb.DeleteResult(rejected=pb.DeleteRejected(reason="no")),
        pb.DeleteResult(error=pb.DeleteError(error="x")),
    ]:
        execution = start_tool(request("Delete", {"path": "old.txt"}), ctx)
        assert done(execution.on_exec_result(reply(sent(execution.first()), delete_result=result))).is_error


def test_ls_renders_tree(ctx):
    execution = start_tool(request("Ls", {"path": ".", "ignore": ["node_modules"]}), ctx)
    message = sent(execution.first())
    assert message.ls_args.path == "/ws"
    assert list(message.ls_args.ignore) == ["node_modules"]
    assert message.ls_args.tool_call_id == "call-1"
    root = pb.LsDirectoryTreeNode(abs_path="/ws", children_were_processed=True)
    sub = root.children_dirs.add(abs_path="/ws/src", children_were_processed=True)
    sub.children_files.add(name="main.py")
    root.children_dirs.add(abs_path="/ws/big", num_files=12)
    root.children_files.add(name="README.md")
    outcome = done(execution.on_exec_result(reply(message, ls_result=pb.LsResult(success=pb.LsSuccess(directory_tree_root=root)))))
    assert outcome.content == "/ws/\n  - big/ (12 files)\n  - src/\n    - main.py\n  - README.md"
    execution = start_tool(request("Ls", {"path": "/x"}), ctx)
    result = pb.LsResult(error=pb.LsError(path="/x", error="ENOENT"))
    assert done(execution.on_exec_result(reply(sent(execution.first()), ls_result=result))).is_error


def test_read_binary_and_image_data(ctx):
    import base64

    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
    execution = start_tool(request("Read", {"path": "logo.png"}), ctx)
    result = pb.ReadResult(success=pb.ReadSuccess(data=png, path="/ws/logo.png"))
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), read_result=result)))
    assert not outcome.is_error and "image/png" in outcome.content
    assert [i.media_type for i in outcome.images] == ["image/png"]
    assert base64.b64decode(outcome.images[0].data_base64) == png
    execution = start_tool(request("Read", {"path": "blob.bin"}), ctx)
    result = pb.ReadResult(success=pb.ReadSuccess(data=b"\xff\xfe\x00\x01"))
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), read_result=result)))
    assert "binary file (4 bytes)" in outcome.content and outcome.images == []
    execution = start_tool(request("Read", {"path": "utf8.txt"}), ctx)
    result = pb.ReadResult(success=pb.ReadSuccess(data="héllo\n".encode()))
    outcome = done(execution.on_exec_result(reply(sent(execution.first()), read_result=result)))
    assert outcome.content == "     1|héllo"
