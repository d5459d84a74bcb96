"""InteractionUpdates that present a tool call while the model streams it and when it runs.

Order per call (PROTOCOL 2.2.1): partial_tool_call placeholder when the call opens; partials
while its arguments stream; tool_call_started right before the first exec/query;
tool_call_completed when done. Write/StrReplace stream differently: one partial with
edit_tool_call.args.path once the path is complete, then tool_call_delta
edit_tool_call_delta.stream_content_delta pieces of contents/new_string with CR/CRLF as LF.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ._wire import pb
from .paths import resolve_path

if TYPE_CHECKING:
    from .base import ToolExecution

__all__ = [
    "ArgsStream",
    "partial_args_updates",
    "started_update",
    "completed_update",
    "tool_call_variant",
]

# Which ToolCall oneof member presents each model tool (None: no card).
_VARIANTS: dict[str, str] = {
    "Read": "read_tool_call",
    "Write": "edit_tool_call",
    "StrReplace": "edit_tool_call",
    "Delete": "delete_tool_call",
    "Ls": "ls_tool_call",
    "Glob": "glob_tool_call",
    "Grep": "grep_tool_call",
    "Shell": "shell_tool_call",
    "Await": "await_tool_call",
    "ReadLints": "read_lints_tool_call",
    "TodoWrite": "update_todos_tool_call",
    "AskQuestion": "ask_question_tool_call",
    "SwitchMode": "switch_mode_tool_call",
    "CreatePlan": "create_plan_tool_call",
    "Task": "task_tool_call",
    "CallMcpTool": "mcp_tool_call",
}
# Edit tools: the argument streamed into the card as content.
_EDIT_CONTENT_KEY = {"Write": "contents", "StrReplace": "new_string"}
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def tool_call_variant(name: str) -> str | None:
    if name in _VARIANTS:
        return _VARIANTS[name]
    if name.startswith("mcp_"):
        return "mcp_tool_call"
    return None


def _placeholder(call_id: str, variant: str) -> pb.ToolCall:
    tool_call = pb.ToolCall(tool_call_id=call_id)
    getattr(tool_call, variant).args.SetInParent()
    return tool_call


class _TopLevelStrings:
    """Incremental scanner of a JSON object's top-level string values (escapes decoded).

    Feeds characters of `interesting` keys to `on_chars(key, text)` and reports their end with
    `on_end(key)`. Values nested deeper, and non-string values, are skipped.
    """

    def __init__(self, interesting: frozenset[str]) -> None:
        self.interesting = interesting
        self.depth = 0
        self.expect_key = False
        self.after_colon = False
        self.in_string = False
        self.role = "skip"  # "key" | "value" | "skip" for the string being read
        self.key_chars: list[str] = []
        self.last_key = ""
        self.escape = False
        self.unicode_digits: str | None = None
        self.high_surrogate: int | None = None
        self.out: list[tuple[str, str | None]] = []  # (key, text) pieces; text None = value ended

    def feed(self, text: str) -> list[tuple[str, str | None]]:
        self.out = []
        for ch in text:
            if self.in_string:
                self._string_char(ch)
            else:
                self._structural(ch)
        return self.out

    def _structural(self, ch: str) -> None:
        if ch == '"':
            self.in_string = True
            if self.depth == 1 and self.expect_key:
                self.role = "key"
                self.key_chars = []
            elif self.depth == 1 and self.after_colon:
                self.role = "value" if self.last_key in self.interesting else "skip"
                self.after_colon = False
            else:
                self.role = "skip"
        elif ch in "{[":
            if self.depth == 0 and ch == "{":
                self.expect_key = True
            elif self.depth == 1:
                self.after_colon = False
            self.depth += 1
        elif ch in "}]":
            self.depth = max(self.depth - 1, 0)
        elif self.depth == 1 and ch == ":":
            self.after_colon = True
        elif self.depth == 1 and ch == ",":
            self.expect_key = True
            self.after_colon = False
        elif self.depth == 1 and not ch.isspace():
            self.after_colon = False  # a number, true/false/null

    def _emit(self, text: str) -> None:
        if self.role == "key":
            self.key_chars.append(text)
        elif self.role == "value":
            self.out.append((self.last_key, text))

    def _emit_code(self, code: int) -> None:
        if 0xD800 <= code < 0xDC00:
            if self.high_surrogate is not None:
                self._emit("\ufffd")
            self.high_surrogate = code
            return
        if 0xDC00 <= code < 0xE000 and self.high_surrogate is not None:
            combined = 0x10000 + ((self.high_surrogate - 0xD800) << 10) + (code - 0xDC00)
            self.high_surrogate = None
            self._emit(chr(combined))
            return
        self._flush_surrogate()
        self._emit(chr(code) if not 0xD800 <= code < 0xE000 else "\ufffd")

    def _flush_surrogate(self) -> None:
        if self.high_surrogate is not None:
            self.high_surrogate = None
            self._emit("\ufffd")

    def _string_char(self, ch: str) -> None:
        if self.unicode_digits is not None:
            self.unicode_digits += ch
            if len(self.unicode_digits) == 4:
                digits, self.unicode_digits = self.unicode_digits, None
                try:
                    self._emit_code(int(digits, 16))
                except ValueError:
                    self._emit("\ufffd")
            return
        if self.escape:
            self.escape = False
            if ch == "u":
                self.unicode_digits = ""
                return
            self._flush_surrogate()
            self._emit(_ESCAPES.get(ch, ch))
            return
        if ch == "\\":
            self.escape = True
            return
        self._flush_surrogate()
        if ch == '"':
            self.in_string = False
            if self.role == "key":
                self.last_key = "".join(self.key_chars)
                self.expect_key = False
            elif self.role == "value":
                self.out.append((self.last_key, None))
            self.role = "skip"
            return
        self._emit(ch)


class ArgsStream:
    """Presentation of one call's streaming arguments. Create when the model opens the call."""

    def __init__(
        self,
        call_id: str,
        name: str,
        model_call_id: str,
        *,
        workspace_root: str | None = None,
        stream_edits: bool = True,
    ) -> None:
        self.call_id = call_id
        self.name = name
        self.model_call_id = model_call_id
        self.variant = tool_call_variant(name)
        self.workspace_root = workspace_root
        self._content_key = _EDIT_CONTENT_KEY.get(name) if stream_edits else None
        self._scanner = (
            _TopLevelStrings(frozenset({"path", self._content_key})) if self._content_key is not None else None
        )
        self._path_chars: list[str] = []
        self._path: str | None = None
        self._held: list[str] = []  # content that arrived before the path was complete
        self._last_was_cr = False

    def _partial(self, args_text_delta: str, tool_call: pb.ToolCall) -> pb.InteractionUpdate:
        return pb.InteractionUpdate(
            partial_tool_call=pb.PartialToolCallUpdate(
                call_id=self.call_id,
                tool_call=tool_call,
                args_text_delta=args_text_delta,
                model_call_id=self.model_call_id,
            )
        )

    def opened(self) -> list[pb.InteractionUpdate]:
        """The placeholder partial_tool_call (args_text_delta ""); nothing for unknown tools."""
        if self.variant is None:
            return []
        return [self._partial("", _placeholder(self.call_id, self.variant))]

    def feed(self, args_text_delta: str) -> list[pb.InteractionUpdate]:
        if self.variant is None or not args_text_delta:
            return []
        if self._scanner is None:
            return [self._partial(args_text_delta, _placeholder(self.call_id, self.variant))]
        updates: list[pb.InteractionUpdate] = []
        content: list[str] = []
        for key, text in self._scanner.feed(args_text_delta):
            if key == "path" and self._path is None:
                if text is not None:
                    self._path_chars.append(text)
                    continue
                self._path = resolve_path("".join(self._path_chars), self.workspace_root)
                tool_call = pb.ToolCall(tool_call_id=self.call_id)
                tool_call.edit_tool_call.args.path = self._path
                updates.append(self._partial("", tool_call))
                if self._held:
                    content.extend(self._held)
                    self._held = []
            elif key == self._content_key and text:
                normalized = self._newlines(text)
                if normalized:
                    (content if self._path is not None else self._held).append(normalized)
        if content:
            updates.append(self._content_delta("".join(content)))
        return updates

    def _newlines(self, text: str) -> str:
        out: list[str] = []
        for ch in text:
            if ch == "\r":
                out.append("\n")
                self._last_was_cr = True
                continue
            if ch == "\n" and self._last_was_cr:
                self._last_was_cr = False
                continue
            self._last_was_cr = False
            out.append(ch)
        return "".join(out)

    def _content_delta(self, text: str) -> pb.InteractionUpdate:
        return pb.InteractionUpdate(
            tool_call_delta=pb.ToolCallDeltaUpdate(
                call_id=self.call_id,
                tool_call_delta=pb.ToolCallDelta(
                    edit_tool_call_delta=pb.EditToolCallDelta(stream_content_delta=text)
                ),
                model_call_id=self.model_call_id,
            )
        )


def partial_args_updates(
    call_id: str, name: str, args_text_delta: str, model_call_id: str, *, stream: ArgsStream | None = None
) -> list[pb.InteractionUpdate]:
    """Updates for one chunk of streamed arguments.

    Pass the call's ArgsStream for Write/StrReplace (their content streaming needs state across
    chunks); without it every tool gets one partial_tool_call carrying the raw chunk.
    """
    if stream is None:
        stream = ArgsStream(call_id, name, model_call_id, stream_edits=False)
    return stream.feed(args_text_delta)


def started_update(execution: ToolExecution, *, started_at_ms: int | None = None) -> pb.InteractionUpdate:
    return pb.InteractionUpdate(
        tool_call_started=pb.ToolCallStartedUpdate(
            call_id=execution.call_id,
            tool_call=execution.started(started_at_ms),
            model_call_id=execution.model_call_id,
        )
    )


def completed_update(
    execution: ToolExecution, *, completed_at_ms: int | None = None, started_at_ms: int | None = None
) -> pb.InteractionUpdate:
    return pb.InteractionUpdate(
        tool_call_completed=pb.ToolCallCompletedUpdate(
            call_id=execution.call_id,
            tool_call=execution.completed(completed_at_ms, started_at_ms),
            model_call_id=execution.model_call_id,
        )
    )
