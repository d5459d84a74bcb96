"""Shell (streamed exec) and Await (polls a background shell's terminal file)."""
from __future__ import annotations

import re
from typing import Any

from google.protobuf.message import Message
import msgspec

from ._wire import pb, which
from .arguments import Arguments
from .base import ToolExecution
from .files import read_content, read_failure_text, unreadable_text
from .paths import join_path, resolve_path
from .render import clip_middle, decode_text
from .steps import Progress, Step

__all__ = [
    "ShellExecution",
    "AwaitExecution",
    "TerminalFile",
    "parse_terminal_file",
    "SHELL_HARD_TIMEOUT_MS",
    "SHELL_FILE_OUTPUT_THRESHOLD_BYTES",
]

# ShellArgs values the IDE expects for agent shells (PROTOCOL 2.2.1).
SHELL_HARD_TIMEOUT_MS = 86_400_000
SHELL_FILE_OUTPUT_THRESHOLD_BYTES = 40_000
# Output characters kept for the model (head and tail halves).
MODEL_OUTPUT_LIMIT = 40_000
_INT32_MAX = 2**31 - 1


class _OutputBuffer:
    """Keeps the first and last `limit // 2` characters of a stream, in O(limit) memory."""

    def __init__(self, limit: int = MODEL_OUTPUT_LIMIT) -> None:
        self._half = limit // 2
        self._head = ""
        self._tail = ""
        self._dropped = 0

    def append(self, data: str) -> None:
        if len(self._head) < self._half:
            room = self._half - len(self._head)
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail += data
        if len(self._tail) > 2 * self._half:
            cut = len(self._tail) - self._half
            self._dropped += cut
            self._tail = self._tail[cut:]

    def text(self) -> str:
        if not self._dropped and len(self._tail) <= self._half:
            return self._head + self._tail
        tail = self._tail[-self._half :]
        elided = self._dropped + len(self._tail) - len(tail)
        return f"{self._head}\n... [{elided} characters elided] ...\n{tail}"


def _shell_delta(call_id: str, model_call_id: str, stream: str, data: str) -> pb.InteractionUpdate:
    delta = pb.ShellToolCallDelta()
    getattr(delta, stream).content = data
    return pb.InteractionUpdate(
        tool_call_delta=pb.ToolCallDeltaUpdate(
            call_id=call_id,
            tool_call_delta=pb.ToolCallDelta(shell_tool_call_delta=delta),
            model_call_id=model_call_id,
        )
    )


_ABORT_REASONS = {1: "aborted by the user", 2: "timed out"}


class ShellExecution(ToolExecution):
    """Shell → shell_stream_args (14); ShellStream events until exit or backgrounded.

    stdout/stderr become tool_call_delta{shell_tool_call_delta} progress updates. Exit code 0
    (not aborted) is a ShellSuccess, anything else a ShellFailure (is_error). A plain
    shell_result answer is accepted too.
    """

    tool_name = "Shell"
    variant = "shell_tool_call"

    def _parse(self, a: Arguments) -> None:
        self.command = a.string("command", required=True, non_empty=True) or ""
        directory = a.string("working_directory")
        self.working_directory = (
            resolve_path(directory, self.ctx.workspace_root) if directory else (self.ctx.workspace_root or "")
        )
        timeout = a.integer("timeout_ms", minimum=1)
        self.timeout_ms = min(timeout if timeout is not None else self.ctx.shell_timeout_ms, _INT32_MAX)
        self.description = a.string("description")
        self.run_in_background = bool(a.boolean("run_in_background"))
        self._interleaved = _OutputBuffer()
        self._stdout = _OutputBuffer()
        self._stderr = _OutputBuffer()

    def _shell_args(self) -> pb.ShellArgs:
        args = pb.ShellArgs(
            command=self.command,
            working_directory=self.working_directory,
            timeout=self.timeout_ms,
            tool_call_id=self.call_id,
            close_stdin=True,
            timeout_behavior=pb.TIMEOUT_BEHAVIOR_BACKGROUND,
            hard_timeout=SHELL_HARD_TIMEOUT_MS,
            file_output_threshold_bytes=SHELL_FILE_OUTPUT_THRESHOLD_BYTES,
        )
        if self.description is not None:
            args.description = self.description
        if self.ctx.conversation_id:
            args.conversation_id = self.ctx.conversation_id
        return args

    def _args_pb(self) -> Message:
        args = self._shell_args()
        args.description = self.description or self.command
        return args

    def _decorate(self, card: Message) -> None:
        card.description = self.description or self.command

    def _begin(self) -> Step:
        if self.run_in_background:
            # Spawned by the client with its stdin open, so WriteShellStdin can type into it.
            spawn = pb.BackgroundShellSpawnArgs(
                command=self.command, working_directory=self.working_directory, tool_call_id=self.call_id,
                enable_write_shell_stdin_tool=True,
            )
            if self.description is not None:
                spawn.description = self.description
            return self._exec("background_shell_spawn_args", spawn, expect=("background_shell_spawn_result",))
        return self._exec("shell_stream_args", self._shell_args(), expect=("shell_stream", "shell_result"))

    def _error_result(self, message: str) -> Message:
        return pb.ShellResult(
            spawn_error=pb.ShellSpawnError(
                command=self.command, working_directory=self.working_directory, error=message
            )
        )

    def _on_stream_close(self) -> Step:
        return self._fail("shell stream closed without a result")

    def _on_exec(self, kind: str, result: Any, message: pb.ExecClientMessage) -> Step:
        if kind == "shell_result":
            return self._on_shell_result(result)
        if kind == "background_shell_spawn_result":
            return self._on_spawned(result)
        event = which(result, "event")
        if event in ("stdout", "stderr"):
            data = getattr(result, event).data
            if not data:
                return Progress([])
            self._interleaved.append(data)
            (self._stdout if event == "stdout" else self._stderr).append(data)
            return Progress([_shell_delta(self.call_id, self.model_call_id, event, data)])
        if event == "exit":
            return self._on_exit(result.exit, message)
        if event == "backgrounded":
            return self._on_backgrounded(result.backgrounded)
        if event == "rejected":
            reason = result.rejected.reason or "no reason given"
            return self._finish(
                f"The command was rejected: {reason}", is_error=True, result=pb.ShellResult(rejected=result.rejected)
            )
        if event == "permission_denied":
            detail = result.permission_denied.error or "permission denied"
            return self._finish(
                f"Permission denied running the command: {detail}",
                is_error=True,
                result=pb.ShellResult(permission_denied=result.permission_denied),
            )
        if event == "sandbox_unsupported":
            reason = result.sandbox_unsupported.reason or "the sandbox is not supported"
            return self._fail(f"The command could not run: {reason}")
        return Progress([])  # start, hook_context, or an event this server does not know

    def _on_exit(self, exit_: pb.ShellStreamExit, message: pb.ExecClientMessage) -> Step:
        output = self._interleaved.text()
        succeeded = exit_.code == 0 and not exit_.aborted
        fields: dict[str, Any] = dict(
            command=self.command,
            working_directory=exit_.cwd or self.working_directory,
            exit_code=exit_.code,
            stdout=self._stdout.text(),
            stderr=self._stderr.text(),
            interleaved_output=output,
        )
        if exit_.HasField("local_execution_time_ms"):
            fields["local_execution_time_ms"] = exit_.local_execution_time_ms
        elif message.HasField("local_execution_time_ms"):
            fields["local_execution_time_ms"] = message.local_execution_time_ms
        if exit_.HasField("output_location"):
            fields["output_location"] = exit_.output_location
        if succeeded:
            shell_result = pb.ShellResult(success=pb.ShellSuccess(**fields))
        else:
            failure = pb.ShellFailure(aborted=exit_.aborted, **fields)
            if exit_.HasField("abort_reason"):
                failure.abort_reason = exit_.abort_reason
            shell_result = pb.ShellResult(failure=failure)
        lines = [f"Exit code: {exit_.code}"]
        if exit_.aborted:
            lines.append(f"The command was {_ABORT_REASONS.get(exit_.abort_reason, 'aborted')}.")
        if exit_.HasField("output_location") and exit_.output_location.file_path:
            location = exit_.output_location
            lines.append(
                f"Full output: {location.file_path} ({location.line_count} lines, {location.size_bytes} bytes)"
            )
        lines.append("")
        lines.append(output if output else "(no output)")
        return self._finish("\n".join(lines), is_error=not succeeded, result=shell_result)

    def _on_spawned(self, result: pb.BackgroundShellSpawnResult) -> Step:
        variant = which(result, "result")
        if variant != "success":
            failure = getattr(result, variant) if variant else None
            detail = (getattr(failure, "error", "") or getattr(failure, "reason", "")) if failure is not None else ""
            return self._fail(f"The command could not be started in the background: {detail or variant or 'no result'}")
        spawned = result.success
        event = pb.ShellStreamBackgrounded(shell_id=spawned.shell_id, command=spawned.command, working_directory=spawned.working_directory)
        if spawned.HasField("pid"):
            event.pid = spawned.pid
        return self._on_backgrounded(event, started=True)

    def _on_backgrounded(self, event: pb.ShellStreamBackgrounded, *, started: bool = False) -> Step:
        output = self._interleaved.text()
        success = pb.ShellSuccess(
            command=event.command or self.command,
            working_directory=event.working_directory or self.working_directory,
            shell_id=event.shell_id,
            stdout=self._stdout.text(),
            stderr=self._stderr.text(),
            interleaved_output=output,
        )
        for name in ("pid", "ms_to_wait"):
            if event.HasField(name):
                setattr(success, name, getattr(event, name))
        if event.HasField("reason"):
            success.background_reason = event.reason
        shell_result = pb.ShellResult(success=success, is_background=True)
        if event.HasField("pid"):
            shell_result.pid = event.pid
        header = f"Command {'started in' if started else 'moved to'} the background, shell_id={event.shell_id}"
        if event.HasField("pid"):
            header += f", pid={event.pid}"
        lines = [header + "."]
        if self.ctx.terminals_folder:
            shell_result.terminals_folder = self.ctx.terminals_folder
            lines.append(f"Its output is written to {join_path(self.ctx.terminals_folder, f'{event.shell_id}.txt')}.")
        lines.append(f"Use Await with shell_id={event.shell_id} to wait for it to finish.")
        if output:
            lines.append("")
            lines.append("Output so far:")
            lines.append(output)
        return self._finish("\n".join(lines), is_error=False, result=shell_result)

    def _on_shell_result(self, result: pb.ShellResult) -> Step:
        variant = which(result, "result")
        if variant in ("success", "failure"):
            part = getattr(result, variant)
            output = part.interleaved_output or (part.stdout + part.stderr)
            output = clip_middle(output, MODEL_OUTPUT_LIMIT)
            text = f"Exit code: {part.exit_code}\n\n{output or '(no output)'}"
            return self._finish(text, is_error=variant == "failure", result=result)
        if variant == "timeout":
            return self._finish(f"The command timed out after {result.timeout.timeout_ms} ms.", is_error=True, result=result)
        if variant == "rejected":
            return self._finish(f"The command was rejected: {result.rejected.reason}", is_error=True, result=result)
        if variant == "spawn_error":
            return self._finish(f"The command could not start: {result.spawn_error.error}", is_error=True, result=result)
        if variant == "permission_denied":
            return self._finish(
                f"Permission denied running the command: {result.permission_denied.error}", is_error=True, result=result
            )
        return self._fail("Shell returned no result")


# ----------------------------------------------------------------------------- Await

_FINISHED_STATUSES = frozenset(
    {"succeeded", "success", "completed", "failed", "error", "aborted", "cancelled", "canceled", "killed", "exited"}
)
_FOOTER_KEYS = frozenset({"exit_code", "error", "elapsed_ms", "ended_at"})
_SHELL_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_FIELD = re.compile(r"^([a-z_]+):\s?(.*)$")


class TerminalFile(msgspec.Struct):
    """What the IDE's terminal file `<terminals_folder>/<shell_id>.txt` says about a shell."""

    finished: bool
    output: str
    fields: dict[str, str] = msgspec.field(default_factory=dict)

    @property
    def exit_code(self) -> int | None:
        value = self.fields.get("exit_code", "").strip()
        return int(value) if value.lstrip("-").isdigit() else None

    @property
    def elapsed_ms(self) -> int | None:
        for key in ("elapsed_ms", "running_for_ms"):
            value = self.fields.get(key, "").strip()
            if value.isdigit():
                return int(value)
        return None


def _fields(lines: list[str]) -> dict[str, str] | None:
    out: dict[str, str] = {}
    for line in lines:
        match = _FIELD.match(line.strip())
        if match is None:
            return None
        out[match.group(1)] = match.group(2)
    return out


def parse_terminal_file(text: str) -> TerminalFile:
    """Parse a terminal file: a `---` header of `key: value` lines, the output, and, once the
    command ended, a `---` footer (exit_code / error, elapsed_ms, ended_at). [Format inferred
    from public notes on Cursor's terminal files; unknown shapes count as still running.]"""
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    fields: dict[str, str] = {}
    start = 0
    if lines and lines[0].strip() == "---":
        for index in range(1, len(lines)):
            if lines[index].strip() == "---":
                header = _fields(lines[1:index])
                if header is not None:
                    fields.update(header)
                    start = index + 1
                break
    end = len(lines)
    footer_found = False
    if end - start >= 2 and lines[-1].strip() == "---":
        for index in range(end - 2, start - 1, -1):
            if lines[index].strip() == "---":
                footer = _fields(lines[index + 1 : end - 1])
                if footer and _FOOTER_KEYS & footer.keys():
                    fields.update(footer)
                    footer_found = True
                    end = index
                break
    status = fields.get("status", "").strip().lower()
    finished = footer_found or status in _FINISHED_STATUSES
    output = "\n".join(lines[start:end]).strip("\n")
    return TerminalFile(finished=finished, output=output, fields=fields)


class AwaitExecution(ToolExecution):
    """Await{shell_id, timeout_ms?} → read_args of `<terminals_folder>/<shell_id>.txt`, repeated.

    The schema has no exec that waits on a background shell (subagent_await is for subagents),
    so Await polls the shell's terminal file: when it shows the command ended the call completes;
    otherwise another read is requested with ExecStep.delay_ms until timeout_ms has passed, and
    the call completes (not as an error) reporting the shell is still running. Only output the
    model has not seen is returned (ctx.shell_output_seen in, `seen_output` out).
    """

    tool_name = "Await"
    variant = "await_tool_call"

    def _parse(self, a: Arguments) -> None:
        shell_id = a.string("shell_id", required=True, non_empty=True) or ""
        if shell_id and not _SHELL_ID.match(shell_id.strip()):
            a.errors.append("argument 'shell_id' must be the id returned when the shell was backgrounded")
        self.shell_id = shell_id.strip()
        timeout = a.integer("timeout_ms", minimum=0)
        if timeout is None:
            timeout = a.integer("block_until_ms", minimum=0)
        self.timeout_ms = min(timeout if timeout is not None else self.ctx.await_default_timeout_ms, 2**32 - 1)
        self.path = join_path(self.ctx.terminals_folder, f"{self.shell_id}.txt") if self.ctx.terminals_folder else ""
        self._started_ms = 0
        self._reads = 0
        self._seen: tuple[str, int] | None = None

    @property
    def seen_output(self) -> tuple[str, int] | None:
        return self._seen

    def _new_output(self, output: str) -> str:
        """The part of `output` the model has not seen, remembering how much it has now seen."""
        seen = self.ctx.shell_output_seen.get(self.shell_id, 0)
        if seen > len(output):  # the file was rewritten: show it all again
            seen = 0
        self._seen = (self.shell_id, len(output))
        fresh = clip_middle(output[seen:], MODEL_OUTPUT_LIMIT)
        if seen and fresh:
            return f"(output after the {seen} characters shown before)\n{fresh}"
        if seen:
            return "(no new output)"
        return fresh or "(no output)"

    def _args_pb(self) -> Message:
        return pb.AwaitArgs(task_id=self.shell_id, block_until_ms=self.timeout_ms)

    def _error_result(self, message: str) -> Message:
        return pb.AwaitResult(error=pb.AwaitError(error=message))

    def _read(self, delay_ms: int) -> Step:
        args = pb.ReadArgs(path=self.path, tool_call_id=self.call_id)
        step = self._exec("read_args", args, expect=("read_result", "redacted_read_result"), delay_ms=delay_ms)
        # Cursor's executor answers an exec id it has run before from its cache (a replay): each
        # poll after the first is an execution of its own, with an exec id of its own.
        if self._reads:
            step.message.exec_id = f"{self.call_id}:{self._reads}"
        self._reads += 1
        return step

    def _begin(self) -> Step:
        if not self.path:
            return self._fail("Await cannot find the shell's output: the IDE did not report its terminals folder")
        self._started_ms = self.ctx.clock_ms()
        return self._read(0)

    def _on_exec(self, kind: str, result: pb.ReadResult, message: pb.ExecClientMessage) -> Step:
        variant = which(result, "result")
        if variant == "file_not_found":
            return self._fail(f"No shell with shell_id={self.shell_id} (no output file at {self.path})")
        if variant != "success":
            return self._fail(read_failure_text(self.path, variant, getattr(result, variant) if variant else None))
        success = result.success
        content = read_content(success)
        if content is None:
            return self._fail(unreadable_text(self.path))
        raw = (decode_text(content) or "") if isinstance(content, bytes) else content
        terminal = parse_terminal_file(raw)
        waited = max(self.ctx.clock_ms() - self._started_ms, 0)
        length = max(success.file_size, 0) or len(raw.encode("utf-8"))
        if terminal.finished:
            complete = pb.AwaitTaskComplete(
                task_id=self.shell_id,
                runtime_ms=terminal.elapsed_ms if terminal.elapsed_ms is not None else waited,
                output_file_path=self.path,
                output_length=length,
            )
            headline = f"Shell {self.shell_id} finished"
            if terminal.exit_code is not None:
                complete.exit_code = terminal.exit_code
                headline += f" with exit code {terminal.exit_code}"
            elif terminal.fields.get("error"):
                headline += f" with an error: {terminal.fields['error']}"
            if terminal.elapsed_ms is not None:
                headline += f" after {terminal.elapsed_ms} ms"
            text = f"{headline}.\nOutput file: {self.path}\n\n{self._new_output(terminal.output)}"
            card = pb.AwaitResult(success=pb.AwaitSuccess(complete=complete))
            return self._finish(text, is_error=False, result=card)
        remaining = self.timeout_ms - waited
        if remaining > 0:
            return self._read(min(self.ctx.await_poll_interval_ms, remaining))
        running = pb.AwaitTaskStillRunning(
            task_id=self.shell_id,
            runtime_ms=terminal.elapsed_ms if terminal.elapsed_ms is not None else waited,
            output_file_path=self.path,
            output_length=length,
            wake_reason="timeout",
        )
        text = (
            f"Shell {self.shell_id} is still running (waited {waited} ms).\nOutput file: {self.path}\n\n"
            f"{self._new_output(terminal.output)}"
        )
        return self._finish(text, is_error=False, result=pb.AwaitResult(success=pb.AwaitSuccess(still_running=running)))
