"""Read, Write, StrReplace, Delete, Ls: file tools executed by the IDE."""
from __future__ import annotations

from typing import Any

from google.protobuf.message import Message

from ._wire import pb, unknown_fields, which
from .arguments import Arguments
from .base import ToolExecution, make_image
from .edit import EditProblem, apply_str_replace, count_lines
from .paths import resolve_path
from .render import decode_text, number_lines, sniff_image, split_lines
from .steps import Step

__all__ = ["ReadExecution", "WriteExecution", "StrReplaceExecution", "DeleteExecution", "LsExecution"]

_READ_RESULTS = ("read_result", "redacted_read_result")


def read_content(success: pb.ReadSuccess) -> str | bytes | None:
    """The file as the IDE sent it: text, or bytes to decode or show as binary. None when it came
    in a form this server cannot read (by blob id, or one newer than this build): never taken for
    an empty file."""
    output = which(success, "output")
    if output == "data":
        return success.data
    if output is None and (success.HasField("output_blob_id") or unknown_fields(success, depth=1)):
        return None
    return success.content


def unreadable_text(path: str) -> str:
    return f"The IDE sent {path} in a form this server cannot read (newer than this build?); its content is unknown"


def read_failure_text(path: str, kind: str | None, result: Any) -> str:
    """Text for a non-success ReadResult variant."""
    if kind == "file_not_found":
        return f"File not found: {path}"
    if kind == "permission_denied":
        return f"Permission denied reading {path}"
    if kind == "rejected":
        return f"Reading {path} was rejected: {result.reason or 'no reason given'}"
    if kind == "invalid_file":
        return f"Cannot read {path}: {result.reason or 'invalid file'}"
    if kind == "error":
        return f"Error reading {path}: {result.error or 'unknown error'}"
    return f"Reading {path} returned no result"


class ReadExecution(ToolExecution):
    """Read → read_args{path, tool_call_id, offset, limit}; text is numbered lines `N|line`.

    offset is the 1-based first line, limit a line count. If the IDE did not apply the range
    (ReadSuccess.range_applied false) the server slices the returned text itself.
    """

    tool_name = "Read"
    variant = "read_tool_call"

    def _parse(self, a: Arguments) -> None:
        self.path = resolve_path(a.string("path", required=True, non_empty=True) or "", self.ctx.workspace_root)
        self.offset = a.integer("offset")
        self.limit = a.integer("limit", minimum=1)

    def _args_pb(self) -> Message:
        args = pb.ReadToolArgs(path=self.path, include_line_numbers=True)
        if self.offset is not None:
            args.offset = self.offset
        if self.limit is not None:
            args.limit = self.limit
        return args

    def _begin(self) -> Step:
        args = pb.ReadArgs(path=self.path, tool_call_id=self.call_id)
        if self.offset is not None:
            args.offset = self.offset
        if self.limit is not None:
            args.limit = self.limit
        return self._exec("read_args", args, expect=_READ_RESULTS)

    def _error_result(self, message: str) -> Message:
        return pb.ReadToolResult(error=pb.ReadToolError(error_message=message))

    def _on_exec(self, kind: str, result: pb.ReadResult, message: pb.ExecClientMessage) -> Step:
        variant = which(result, "result")
        if variant != "success":
            return self._fail(read_failure_text(self.path, variant, getattr(result, variant) if variant else None))
        success = result.success
        path = success.path or self.path
        content = read_content(success)
        if content is None:
            return self._fail(unreadable_text(path))
        if isinstance(content, bytes):
            text = decode_text(content)
            if text is None:
                mime = sniff_image(success.data)
                shown = pb.ReadToolSuccess(path=path, file_size=len(success.data), data=success.data)
                if mime is not None:
                    return self._finish(
                        f"Image file {path} ({mime}, {len(success.data)} bytes) is attached.",
                        is_error=False,
                        result=pb.ReadToolResult(success=shown),
                        images=[make_image(mime, success.data)],
                    )
                return self._finish(
                    f"{path} is a binary file ({len(success.data)} bytes); its content is not shown.",
                    is_error=False,
                    result=pb.ReadToolResult(success=shown),
                )
        else:
            text = content
        lines = split_lines(text)
        total = success.total_lines or len(lines)
        first = 1
        if success.range_applied:
            first = self.offset if self.offset and self.offset > 0 else 1
        elif self.offset is not None or self.limit is not None:
            start = 0
            if self.offset is not None:
                start = self.offset - 1 if self.offset > 0 else max(len(lines) + self.offset, 0)
            end = len(lines) if self.limit is None else start + self.limit
            lines = lines[start:end]
            first = start + 1
        shown_text = "\n".join(lines)
        card = pb.ReadToolSuccess(
            content=shown_text,
            is_empty=not lines,
            exceeded_limit=success.truncated,
            total_lines=max(total, 0),
            file_size=max(min(success.file_size, 2**32 - 1), 0),
            path=path,
            include_line_numbers=True,
        )
        if lines:
            card.read_range.start_line = first
            card.read_range.end_line = first + len(lines) - 1
        if not lines:
            body = "File is empty." if total == 0 else f"No lines in the requested range ({path} has {total} lines)."
        else:
            body = number_lines(lines, first)
            if success.truncated:
                body += f"\n\n(Output truncated; {path} has {total} lines. Use offset and limit to read more.)"
        return self._finish(body, is_error=False, result=pb.ReadToolResult(success=card))


def _edit_failure_from_read(path: str, kind: str | None, result: Any) -> pb.EditResult:
    if kind == "file_not_found":
        return pb.EditResult(file_not_found=pb.EditFileNotFound(path=path))
    if kind == "permission_denied":
        return pb.EditResult(read_permission_denied=pb.EditReadPermissionDenied(path=path))
    if kind == "rejected":
        return pb.EditResult(rejected=pb.EditRejected(path=path, reason=result.reason))
    text = read_failure_text(path, kind, result)
    return pb.EditResult(error=pb.EditError(path=path, error=text, model_visible_error=text))


def _write_failure(path: str, kind: str | None, result: Any) -> tuple[str, pb.EditResult]:
    if kind == "permission_denied":
        detail = result.error or "permission denied"
        return (
            f"Permission denied writing {path}: {detail}",
            pb.EditResult(
                write_permission_denied=pb.EditWritePermissionDenied(
                    path=path, error=result.error, is_readonly=result.is_readonly
                )
            ),
        )
    if kind == "rejected":
        return (
            f"Writing {path} was rejected: {result.reason or 'no reason given'}",
            pb.EditResult(rejected=pb.EditRejected(path=path, reason=result.reason)),
        )
    if kind == "no_space":
        text = f"No space left on device writing {path}"
    elif kind == "error":
        text = f"Error writing {path}: {result.error or 'unknown error'}"
    else:
        text = f"Writing {path} returned no result"
    return text, pb.EditResult(error=pb.EditError(path=path, error=text, model_visible_error=text))


class _EditExecution(ToolExecution):
    """Shared by Write and StrReplace: presented as edit_tool_call, finished by a write exec."""

    variant = "edit_tool_call"
    path: str
    _before: str | None = None

    _after: str = ""

    def _stream_content(self) -> str:
        """EditArgs.stream_content: the whole new file (Write) or new_string (StrReplace)."""
        return ""

    def _args_pb(self) -> Message:
        return pb.EditArgs(path=self.path, stream_content=self._stream_content())

    def _error_result(self, message: str) -> Message:
        return pb.EditResult(error=pb.EditError(path=self.path, error=message, model_visible_error=message))

    def _write(self, file_text: str) -> Step:
        self._after = file_text
        args = pb.WriteArgs(path=self.path, file_text=file_text, tool_call_id=self.call_id)
        return self._exec("write_args", args, expect=("write_result",))

    def _on_write(self, result: pb.WriteResult, summary: str, added: int, removed: int) -> Step:
        variant = which(result, "result")
        if variant != "success":
            text, card = _write_failure(self.path, variant, getattr(result, variant) if variant else None)
            return self._finish(text, is_error=True, result=card)
        success = pb.EditSuccess(
            path=result.success.path or self.path,
            lines_added=added,
            lines_removed=removed,
            after_full_file_content=self._after,
        )
        if self._before is not None:
            success.before_full_file_content = self._before
        return self._finish(summary, is_error=False, result=pb.EditResult(success=success))


class WriteExecution(_EditExecution):
    """Write → write_args{path, file_text = contents, tool_call_id}; no read first."""

    tool_name = "Write"

    def _parse(self, a: Arguments) -> None:
        self.path = resolve_path(a.string("path", required=True, non_empty=True) or "", self.ctx.workspace_root)
        self.contents = a.text("contents")

    def _stream_content(self) -> str:
        return self.contents

    def _begin(self) -> Step:
        return self._write(self.contents)

    def _on_exec(self, kind: str, result: pb.WriteResult, message: pb.ExecClientMessage) -> Step:
        lines = count_lines(self.contents)
        return self._on_write(result, f"Wrote {lines} lines to {self.path}.", lines, 0)


class StrReplaceExecution(_EditExecution):
    """StrReplace → read_args{path}, exact replacement here, then write_args with the whole file."""

    tool_name = "StrReplace"

    def _parse(self, a: Arguments) -> None:
        self.path = resolve_path(a.string("path", required=True, non_empty=True) or "", self.ctx.workspace_root)
        self.old_string = a.text("old_string")
        self.new_string = a.text("new_string")
        self.replace_all = bool(a.boolean("replace_all"))
        self._summary = ""
        self._added = 0
        self._removed = 0

    def _stream_content(self) -> str:
        return self.new_string

    def _begin(self) -> Step:
        return self._exec("read_args", pb.ReadArgs(path=self.path, tool_call_id=self.call_id), expect=_READ_RESULTS)

    def _on_exec(self, kind: str, result: Any, message: pb.ExecClientMessage) -> Step:
        if kind == "write_result":
            return self._on_write(result, self._summary, self._added, self._removed)
        variant = which(result, "result")
        if variant != "success":
            detail = getattr(result, variant) if variant else None
            return self._finish(
                read_failure_text(self.path, variant, detail),
                is_error=True,
                result=_edit_failure_from_read(self.path, variant, detail),
            )
        success = result.success
        content = read_content(success)
        if content is None:
            return self._fail(unreadable_text(self.path))
        original = decode_text(content) if isinstance(content, bytes) else content
        if original is None:
            return self._fail(f"{self.path} is not a UTF-8 text file; StrReplace cannot edit it")
        # Editing a partial read would cut the file: refuse when the IDE says it sent less.
        if success.truncated or success.total_lines > count_lines(original) + 1:
            return self._fail(f"{self.path} is too large to edit through StrReplace (the IDE truncated it)")
        try:
            replacement = apply_str_replace(
                original, self.old_string, self.new_string, replace_all=self.replace_all, path=self.path
            )
        except EditProblem as problem:
            return self._fail(str(problem))
        self._before = original
        plural = "s" if replacement.occurrences != 1 else ""
        self._summary = f"Replaced {replacement.occurrences} occurrence{plural} in {self.path}."
        self._added = replacement.lines_added
        self._removed = replacement.lines_removed
        step = self._write(replacement.text)
        return step


_DELETE_FAILURES = {
    "file_not_found": lambda path, r: f"File not found: {path}",
    "not_file": lambda path, r: f"{path} is not a file ({r.actual_type or 'unknown type'})",
    "permission_denied": lambda path, r: f"Permission denied deleting {path}: {r.client_visible_error or 'denied'}",
    "file_busy": lambda path, r: f"{path} is busy and cannot be deleted",
    "rejected": lambda path, r: f"Deleting {path} was rejected: {r.reason or 'no reason given'}",
    "error": lambda path, r: f"Error deleting {path}: {r.error or 'unknown error'}",
}


class DeleteExecution(ToolExecution):
    """Delete → delete_args{path, tool_call_id}."""

    tool_name = "Delete"
    variant = "delete_tool_call"

    def _parse(self, a: Arguments) -> None:
        self.path = resolve_path(a.string("path", required=True, non_empty=True) or "", self.ctx.workspace_root)

    def _args_pb(self) -> Message:
        return pb.DeleteArgs(path=self.path, tool_call_id=self.call_id)

    def _begin(self) -> Step:
        return self._exec("delete_args", self._args_pb(), expect=("delete_result",))

    def _error_result(self, message: str) -> Message:
        return pb.DeleteResult(error=pb.DeleteError(path=self.path, error=message))

    def _on_exec(self, kind: str, result: pb.DeleteResult, message: pb.ExecClientMessage) -> Step:
        variant = which(result, "result")
        if variant == "success":
            return self._finish(f"Deleted {result.success.path or self.path}.", is_error=False, result=result)
        if variant is None:
            return self._fail(f"Deleting {self.path} returned no result")
        text = _DELETE_FAILURES[variant](self.path, getattr(result, variant))
        return self._finish(text, is_error=True, result=result)


def render_tree(node: pb.LsDirectoryTreeNode) -> str:
    lines = [f"{node.abs_path.rstrip('/')}/"]

    def walk(current: pb.LsDirectoryTreeNode, depth: int) -> None:
        indent = "  " * depth
        for child in sorted(current.children_dirs, key=lambda n: n.abs_path):
            name = child.abs_path.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]
            if child.children_were_processed or child.children_dirs or child.children_files:
                lines.append(f"{indent}- {name}/")
                walk(child, depth + 1)
            else:
                count = f" ({child.num_files} files)" if child.num_files else ""
                lines.append(f"{indent}- {name}/{count}")
        for file in sorted(current.children_files, key=lambda f: f.name):
            lines.append(f"{indent}- {file.name}")

    walk(node, 1)
    return "\n".join(lines)


class LsExecution(ToolExecution):
    """Ls → ls_args{path, ignore, tool_call_id}; text is an indented tree."""

    tool_name = "Ls"
    variant = "ls_tool_call"

    def _parse(self, a: Arguments) -> None:
        self.path = resolve_path(a.string("path", required=True, non_empty=True) or "", self.ctx.workspace_root)
        self.ignore = a.string_list("ignore")

    def _args_pb(self) -> Message:
        return pb.LsArgs(path=self.path, ignore=self.ignore, tool_call_id=self.call_id)

    def _begin(self) -> Step:
        return self._exec("ls_args", self._args_pb(), expect=("ls_result",))

    def _error_result(self, message: str) -> Message:
        return pb.LsResult(error=pb.LsError(path=self.path, error=message))

    def _on_exec(self, kind: str, result: pb.LsResult, message: pb.ExecClientMessage) -> Step:
        variant = which(result, "result")
        if variant == "success":
            return self._finish(render_tree(result.success.directory_tree_root), is_error=False, result=result)
        if variant == "timeout":
            partial = render_tree(result.timeout.directory_tree_root)
            return self._finish(f"Listing {self.path} timed out; partial listing:\n{partial}", is_error=True, result=result)
        if variant == "rejected":
            return self._finish(f"Listing {self.path} was rejected: {result.rejected.reason}", is_error=True, result=result)
        if variant == "error":
            return self._finish(f"Error listing {self.path}: {result.error.error}", is_error=True, result=result)
        return self._fail(f"Listing {self.path} returned no result")
