"""Tools whose whole work is done by the client's own executor: a web fetch, input to a running
shell, and the MCP servers' resources. Each is one exec request and its result, rendered for the
model; the server adds nothing but the arguments' checks."""
from __future__ import annotations

from google.protobuf.message import Message

from ._wire import pb, which
from .arguments import Arguments
from .base import ToolExecution
from .steps import Step

__all__ = [
    "AwaitSubagentExecution",
    "FetchMcpResourceExecution",
    "ListMcpResourcesExecution",
    "WebFetchExecution",
    "WriteShellStdinExecution",
]

_UINT32_MAX = 2**32 - 1


class WebFetchExecution(ToolExecution):
    """WebFetch{url} → fetch_args{url, tool_call_id}: the client fetches the page (as the user's
    own browser would, through its network and proxy settings) and returns it as text."""

    tool_name = "WebFetch"
    variant = "fetch_tool_call"

    def _parse(self, a: Arguments) -> None:
        self.url = (a.string("url", required=True, non_empty=True) or "").strip()
        if self.url and not self.url.lower().startswith(("http://", "https://")):
            a.errors.append("argument 'url' must be an http:// or https:// URL")

    def _args_pb(self) -> Message:
        return pb.FetchArgs(url=self.url, tool_call_id=self.call_id)

    def _begin(self) -> Step:
        return self._exec("fetch_args", self._args_pb(), expect=("fetch_result",))

    def _error_result(self, message: str) -> Message:
        return pb.FetchResult(error=pb.FetchError(url=self.url, error=message))

    def _on_exec(self, kind: str, result: pb.FetchResult, message: pb.ExecClientMessage) -> Step:
        if which(result, "result") != "success":
            return self._finish(f"Fetching {self.url} failed: {result.error.error or 'no result'}", is_error=True, result=result)
        page = result.success
        head = f"{page.url or self.url} (HTTP {page.status_code}, {page.content_type or 'unknown type'})"
        return self._finish(f"{head}\n\n{page.content}", is_error=not 200 <= page.status_code < 400, result=result)


class WriteShellStdinExecution(ToolExecution):
    """WriteShellStdin{shell_id, chars} → write_shell_stdin_args: characters typed into a shell
    that runs in the background (its id from the Shell call that moved it there)."""

    tool_name = "WriteShellStdin"
    variant = "write_shell_stdin_tool_call"

    def _parse(self, a: Arguments) -> None:
        shell_id = a.integer("shell_id", minimum=0)
        if shell_id is None and "shell_id" not in a.raw:
            a.errors.append("argument 'shell_id' is required")
        self.shell_id = min(shell_id or 0, _UINT32_MAX)
        self.chars = a.string("chars", required=True) or ""

    def _args_pb(self) -> Message:
        return pb.WriteShellStdinArgs(shell_id=self.shell_id, chars=self.chars)

    def _begin(self) -> Step:
        return self._exec("write_shell_stdin_args", self._args_pb(), expect=("write_shell_stdin_result",))

    def _error_result(self, message: str) -> Message:
        return pb.WriteShellStdinResult(error=pb.WriteShellStdinError(error=message))

    def _on_exec(self, kind: str, result: pb.WriteShellStdinResult, message: pb.ExecClientMessage) -> Step:
        if which(result, "result") != "success":
            return self._finish(f"Writing to shell {self.shell_id} failed: {result.error.error or 'no result'}", is_error=True, result=result)
        offset = result.success.terminal_file_length_before_input_written
        text = (
            f"Wrote {len(self.chars)} characters to shell {self.shell_id}. Its output after the input starts at "
            f"character {offset} of its terminal file; use Await with shell_id={self.shell_id} to read it."
        )
        return self._finish(text, is_error=False, result=result)


class AwaitSubagentExecution(ToolExecution):
    """AwaitSubagent{agent_id, timeout_ms?} → subagent_await_args: wait for a subagent the client
    runs in the background (a Task with run_in_background) and return its final message. The
    client has no card for it."""

    tool_name = "AwaitSubagent"
    variant = None

    def _parse(self, a: Arguments) -> None:
        self.agent_id = (a.string("agent_id", required=True, non_empty=True) or "").strip()
        timeout = a.integer("timeout_ms", minimum=0)
        self.timeout_ms = min(timeout if timeout is not None else self.ctx.await_default_timeout_ms, _UINT32_MAX)

    def _begin(self) -> Step:
        args = pb.SubagentAwaitArgs(agent_id=self.agent_id, timeout_ms=self.timeout_ms)
        return self._exec("subagent_await_args", args, expect=("subagent_await_result",))

    def _on_exec(self, kind: str, result: pb.SubagentAwaitResult, message: pb.ExecClientMessage) -> Step:
        variant = which(result, "result")
        if variant == "complete":
            done = result.complete
            head = f"Subagent {self.agent_id} finished after {done.tool_call_count} tool calls."
            where = f"\nTranscript: {done.transcript_path}" if done.transcript_path else ""
            return self._finish(f"{head}{where}\n\n{done.final_message or '(no final message)'}", is_error=False)
        if variant == "still_running":
            return self._finish(f"Subagent {self.agent_id} is still running (waited {self.timeout_ms} ms).", is_error=False)
        if variant == "not_found":
            return self._fail(f"No subagent with agent_id={self.agent_id}")
        return self._fail(f"Waiting for subagent {self.agent_id} failed: {result.error.error if variant == 'error' else 'no result'}")


def _resource_line(resource: pb.ListMcpResourcesExecResult.McpResource) -> str:
    details = [f"server {resource.server}"] if resource.server else []
    if resource.HasField("mime_type"):
        details.append(resource.mime_type)
    line = f"- {resource.uri}" + (f" ({resource.name})" if resource.HasField("name") and resource.name else "")
    line += f" [{', '.join(details)}]" if details else ""
    return line + (f": {resource.description}" if resource.HasField("description") and resource.description else "")


class ListMcpResourcesExecution(ToolExecution):
    """ListMcpResources{server?} → list_mcp_resources_exec_args: the resources the client's MCP
    servers offer (offered only while the run has MCP servers)."""

    tool_name = "ListMcpResources"
    variant = "list_mcp_resources_tool_call"

    def _parse(self, a: Arguments) -> None:
        self.server = a.string("server")

    def _args_pb(self) -> Message:
        args = pb.ListMcpResourcesExecArgs()
        if self.server:
            args.server = self.server
        return args

    def _begin(self) -> Step:
        return self._exec("list_mcp_resources_exec_args", self._args_pb(), expect=("list_mcp_resources_exec_result",))

    def _error_result(self, message: str) -> Message:
        return pb.ListMcpResourcesExecResult(error=pb.ListMcpResourcesError(error=message))

    def _on_exec(self, kind: str, result: pb.ListMcpResourcesExecResult, message: pb.ExecClientMessage) -> Step:
        variant = which(result, "result")
        if variant == "success":
            resources = result.success.resources
            text = "\n".join(_resource_line(r) for r in resources) if resources else "No MCP resources."
            return self._finish(text, is_error=False, result=result)
        reason = result.rejected.reason if variant == "rejected" else result.error.error if variant == "error" else ""
        return self._finish(f"Listing MCP resources failed: {reason or 'no result'}", is_error=True, result=result)


class FetchMcpResourceExecution(ToolExecution):
    """FetchMcpResource{server, uri} → read_mcp_resource_exec_args: one resource's content, read
    by the client from its MCP server (binary content is reported by size, not inlined)."""

    tool_name = "FetchMcpResource"
    variant = "read_mcp_resource_tool_call"

    def _parse(self, a: Arguments) -> None:
        self.server = a.string("server", required=True, non_empty=True) or ""
        self.uri = a.string("uri", required=True, non_empty=True) or ""

    def _args_pb(self) -> Message:
        return pb.ReadMcpResourceExecArgs(server=self.server, uri=self.uri, tool_call_id=self.call_id)

    def _begin(self) -> Step:
        return self._exec("read_mcp_resource_exec_args", self._args_pb(), expect=("read_mcp_resource_exec_result",))

    def _error_result(self, message: str) -> Message:
        return pb.ReadMcpResourceExecResult(error=pb.ReadMcpResourceError(uri=self.uri, error=message))

    def _on_exec(self, kind: str, result: pb.ReadMcpResourceExecResult, message: pb.ExecClientMessage) -> Step:
        variant = which(result, "result")
        if variant == "success":
            found = result.success
            if which(found, "content") == "blob":
                text = f"{self.uri}: {len(found.blob)} bytes of {found.mime_type or 'binary data'}"
            else:
                text = found.text
            return self._finish(text, is_error=False, result=result)
        if variant == "not_found":
            return self._finish(f"MCP resource not found: {self.uri}", is_error=True, result=result)
        reason = result.rejected.reason if variant == "rejected" else result.error.error if variant == "error" else ""
        return self._finish(f"Reading MCP resource {self.uri} failed: {reason or 'no result'}", is_error=True, result=result)
