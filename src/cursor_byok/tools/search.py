"""Glob, Grep and ReadLints: searches and diagnostics executed by the IDE."""
from __future__ import annotations

from typing import Any

from google.protobuf.message import Message

from ._wire import pb, unknown_fields, which
from .arguments import Arguments
from .base import ToolExecution
from .paths import resolve_path
from .steps import Step

__all__ = ["GlobExecution", "GrepExecution", "ReadLintsExecution"]

GREP_OUTPUT_MODES = ("content", "files_with_matches", "count")


def _unions(success: pb.GrepSuccess) -> list[pb.GrepUnionResult]:
    unions = [success.workspace_results[key] for key in sorted(success.workspace_results)]
    if not unions and success.HasField("active_editor_result"):
        unions.append(success.active_editor_result)
    return unions


def _truncation_note(unions: list[pb.GrepUnionResult]) -> str:
    truncated = False
    for union in unions:
        kind = which(union, "result")
        if kind is not None:
            part = getattr(union, kind)
            truncated = truncated or part.client_truncated or part.ripgrep_truncated
    return "\n(Results truncated; narrow the search to see more.)" if truncated else ""


def _is_newer(union: pb.GrepUnionResult) -> bool:
    """A result set in a member this build does not know: a newer IDE, not an empty search."""
    return bool(unknown_fields(union, depth=1))


def _unread_note(unread: int) -> str:
    return f"{unread} result set(s) came from the IDE in a newer form this server cannot read; update cursor-byok to see them."


def render_grep(success: pb.GrepSuccess) -> tuple[str, bool]:
    """The model's text for a grep answer, and whether it is an error (nothing could be read)."""
    unions = _unions(success)
    blocks: list[str] = []
    unread = 0
    for union in unions:
        kind = which(union, "result")
        if kind == "files":
            blocks.extend(union.files.files)
        elif kind == "count":
            blocks.extend(f"{entry.file}:{entry.count}" for entry in union.count.counts)
        elif kind == "content":
            for match in union.content.matches:
                lines = [match.file]
                for line in match.matches:
                    separator = "-" if line.is_context_line else ":"
                    suffix = " [line truncated]" if line.content_truncated else ""
                    lines.append(f"{line.line_number}{separator}{line.content}{suffix}")
                blocks.append("\n".join(lines))
        elif kind is None and _is_newer(union):
            unread += 1
    if not blocks:
        return (_unread_note(unread), True) if unread else ("No matches found.", False)
    joiner = "\n\n" if any(which(u, "result") == "content" for u in unions) else "\n"
    text = joiner.join(blocks) + _truncation_note(unions)
    return (text + f"\n({_unread_note(unread)})" if unread else text), False


class GrepExecution(ToolExecution):
    """Grep → grep_args{pattern, path, glob, output_mode, context, case_insensitive, head_limit, ...}."""

    tool_name = "Grep"
    variant = "grep_tool_call"

    def _parse(self, a: Arguments) -> None:
        self.pattern = a.string("pattern", required=True) or ""
        path = a.string("path")
        self.path = resolve_path(path, self.ctx.workspace_root) if path else None
        self.glob = a.string("glob")
        self.output_mode = a.choice("output_mode", GREP_OUTPUT_MODES)
        self.case_insensitive = a.boolean("case_insensitive")
        self.context = a.integer("context_lines", minimum=0)
        self.context_before = a.integer("context_before", minimum=0)
        self.context_after = a.integer("context_after", minimum=0)
        self.head_limit = a.integer("head_limit", minimum=1)
        self.file_type = a.string("type")
        self.multiline = a.boolean("multiline")

    def _args_pb(self) -> Message:
        args = pb.GrepArgs(pattern=self.pattern, tool_call_id=self.call_id)
        optional = {
            "path": self.path,
            "glob": self.glob,
            "output_mode": self.output_mode,
            "case_insensitive": self.case_insensitive,
            "context": self.context,
            "context_before": self.context_before,
            "context_after": self.context_after,
            "head_limit": self.head_limit,
            "type": self.file_type,
            "multiline": self.multiline,
        }
        for name, value in optional.items():
            if value is not None:
                setattr(args, name, value)
        return args

    def _begin(self) -> Step:
        return self._exec("grep_args", self._args_pb(), expect=("grep_result",))

    def _error_result(self, message: str) -> Message:
        return pb.GrepResult(error=pb.GrepError(error=message))

    def _on_exec(self, kind: str, result: pb.GrepResult, message: pb.ExecClientMessage) -> Step:
        variant = which(result, "result")
        if variant == "success":
            text, is_error = render_grep(result.success)
            return self._finish(text, is_error=is_error, result=result)
        if variant == "error":
            return self._finish(f"Grep failed: {result.error.error}", is_error=True, result=result)
        return self._fail("Grep returned no result")


class GlobExecution(ToolExecution):
    """Glob → grep_args{pattern "", path=target_directory, glob=glob_pattern, files_with_matches}."""

    tool_name = "Glob"
    variant = "glob_tool_call"

    def _parse(self, a: Arguments) -> None:
        self.glob_pattern = a.string("glob_pattern", required=True, non_empty=True) or ""
        directory = a.string("target_directory")
        self.target_directory = resolve_path(directory, self.ctx.workspace_root) if directory else None

    def _args_pb(self) -> Message:
        args = pb.GlobToolArgs(glob_pattern=self.glob_pattern)
        if self.target_directory is not None:
            args.target_directory = self.target_directory
        return args

    def _begin(self) -> Step:
        args = pb.GrepArgs(
            pattern="", glob=self.glob_pattern, output_mode="files_with_matches", tool_call_id=self.call_id
        )
        if self.target_directory is not None:
            args.path = self.target_directory
        return self._exec("grep_args", args, expect=("grep_result",))

    def _error_result(self, message: str) -> Message:
        return pb.GlobToolResult(error=pb.GlobToolError(error=message))

    def _on_exec(self, kind: str, result: pb.GrepResult, message: pb.ExecClientMessage) -> Step:
        variant = which(result, "result")
        if variant == "error":
            return self._fail(f"Glob failed: {result.error.error}")
        if variant != "success":
            return self._fail("Glob returned no result")
        files: list[str] = []
        client_truncated = ripgrep_truncated = False
        unread = 0
        for union in _unions(result.success):
            kind_ = which(union, "result")
            if kind_ == "files":
                files.extend(union.files.files)
                client_truncated |= union.files.client_truncated
                ripgrep_truncated |= union.files.ripgrep_truncated
            elif kind_ == "count":
                files.extend(entry.file for entry in union.count.counts)
            elif kind_ == "content":
                files.extend(match.file for match in union.content.matches)
            elif kind_ is None and _is_newer(union):
                unread += 1
        if not files and unread:
            return self._fail(_unread_note(unread))
        card = pb.GlobToolSuccess(
            pattern=self.glob_pattern,
            path=self.target_directory or result.success.path,
            files=files,
            total_files=len(files),
            client_truncated=client_truncated,
            ripgrep_truncated=ripgrep_truncated,
        )
        if not files:
            text = f"No files found matching {self.glob_pattern}."
        else:
            text = "\n".join(files)
            if client_truncated or ripgrep_truncated:
                text += "\n(Results truncated; use a narrower pattern to see more.)"
            if unread:
                text += f"\n({_unread_note(unread)})"
        return self._finish(text, is_error=False, result=pb.GlobToolResult(success=card))


_SEVERITY = {1: "error", 2: "warning", 3: "info", 4: "hint"}


def _diagnostics_failure(path: str, kind: str | None, result: Any) -> str:
    if kind == "file_not_found":
        return f"{path}: file not found"
    if kind == "permission_denied":
        return f"{path}: permission denied"
    if kind == "rejected":
        return f"{path}: rejected ({result.reason or 'no reason given'})"
    if kind == "error":
        return f"{path}: {result.error or 'unknown error'}"
    return f"{path}: no diagnostics result"


class ReadLintsExecution(ToolExecution):
    """ReadLints → one diagnostics_args{path, tool_call_id} per path, sent one after another.

    No paths means the workspace root (one request for the root directory). The call fails only
    when every path failed; otherwise failures are listed in the text. Positions are reported as
    the IDE sent them (line:column).
    """

    tool_name = "ReadLints"
    variant = "read_lints_tool_call"

    def _parse(self, a: Arguments) -> None:
        paths = [p for p in a.string_list("paths") if p.strip()]
        if not paths and self.ctx.workspace_root:
            paths = [self.ctx.workspace_root]
        if not paths and not a.errors:
            a.errors.append("ReadLints needs at least one path in 'paths' (no workspace is open)")
        self.paths = [resolve_path(p, self.ctx.workspace_root) for p in paths]
        self._next = 0
        self._files: list[pb.FileDiagnostics] = []
        self._failures: list[str] = []

    def _args_pb(self) -> Message:
        return pb.ReadLintsToolArgs(paths=self.paths)

    def _begin(self) -> Step:
        return self._ask_next()

    def _ask_next(self) -> Step:
        path = self.paths[self._next]
        self._next += 1
        args = pb.DiagnosticsArgs(path=path, tool_call_id=self.call_id)
        return self._exec("diagnostics_args", args, expect=("diagnostics_result",))

    def _error_result(self, message: str) -> Message:
        return pb.ReadLintsToolResult(error=pb.ReadLintsToolError(error_message=message))

    def _on_exec(self, kind: str, result: pb.DiagnosticsResult, message: pb.ExecClientMessage) -> Step:
        path = self.paths[self._next - 1]
        variant = which(result, "result")
        if variant == "success":
            entry = pb.FileDiagnostics(path=result.success.path or path)
            for diagnostic in result.success.diagnostics:
                item = entry.diagnostics.add(
                    severity=diagnostic.severity,
                    message=diagnostic.message,
                    source=diagnostic.source,
                    code=diagnostic.code,
                    is_stale=diagnostic.is_stale,
                )
                item.range.start.CopyFrom(diagnostic.range.start)
                item.range.end.CopyFrom(diagnostic.range.end)
            entry.diagnostics_count = len(entry.diagnostics)
            self._files.append(entry)
        else:
            self._failures.append(_diagnostics_failure(path, variant, getattr(result, variant) if variant else None))
        if self._next < len(self.paths):
            return self._ask_next()
        return self._complete()

    def _complete(self) -> Step:
        if not self._files:
            return self._fail("ReadLints failed:\n" + "\n".join(self._failures))
        blocks: list[str] = []
        total = 0
        for entry in self._files:
            total += len(entry.diagnostics)
            if not entry.diagnostics:
                continue
            lines = [f"{entry.path}:"]
            for item in entry.diagnostics:
                severity = _SEVERITY.get(item.severity, "diagnostic")
                origin = " ".join(part for part in (item.source, item.code) if part)
                origin = f" ({origin})" if origin else ""
                lines.append(
                    f"  L{item.range.start.line}:{item.range.start.column} [{severity}] {item.message}{origin}"
                )
            blocks.append("\n".join(lines))
        text = "\n\n".join(blocks) if blocks else "No linter errors found."
        if self._failures:
            text += "\n\nCould not read diagnostics for:\n" + "\n".join(self._failures)
        card = pb.ReadLintsToolSuccess(
            file_diagnostics=self._files, total_files=len(self._files), total_diagnostics=total
        )
        return self._finish(text, is_error=False, result=pb.ReadLintsToolResult(success=card))
