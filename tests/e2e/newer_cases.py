"""The sweep's coverage list: what the code switches on (SWITCHES, checked against the source by
`test_every_switch_is_swept`), the wire enums it reads by value, and one case (or more) for each:
where in a turn the IDE's message carries the newer value."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import descriptor_pool
from google.protobuf.message import Message

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import CallSpec
from tests.harness.newer import NEWER_ENUM_VALUE, add_newer_member

NEWER = NEWER_ENUM_VALUE

# Every switch on the wire in src/: (module, function, oneof or enum type) → what it reads there.
SWITCHES: dict[tuple[str, str, str], tuple[str, ...]] = {
    ("protocol/bidi.py", "client_message", "message"): ("agent.v1.AgentClientMessage.message",),
    ("protocol/ids.py", "_check_action", "action"): ("agent.v1.ConversationAction.action",),
    ("gateway/routing.py", "route_for", "message"): ("agent.v1.AgentClientMessage.message",),
    ("interceptor/team.py", "_run_request_model", "message"): ("agent.v1.AgentClientMessage.message",),
    ("conversation/service.py", "ConversationService.deliver", "message"): ("agent.v1.AgentClientMessage.message",),
    ("conversation/service.py", "ConversationService.deliver", "action"): ("agent.v1.ConversationAction.action",),
    ("conversation/runtime.py", "ConversationRuntime._on_client_input", "message"): ("agent.v1.AgentClientMessage.message",),
    ("conversation/actions.py", "decide", "action"): ("agent.v1.ConversationAction.action",),
    ("conversation/actions.py", "_refused_injection", "payload"): ("agent.v1.InjectContextAction.payload",),
    ("conversation/actions.py", "injected_context", "payload"): ("agent.v1.InjectContextAction.payload",),
    ("conversation/turn_input.py", "_turn_input", "action"): ("agent.v1.ConversationAction.action",),
    ("conversation/run_setup.py", "turn_start", "action"): ("agent.v1.ConversationAction.action",),
    ("conversation/run_setup.py", "request_env", "action"): ("agent.v1.ConversationAction.action",),
    ("conversation/client_context.py", "lacks_request_context", "action"): ("agent.v1.ConversationAction.action",),
    ("conversation/client_context.py", "with_request_context", "action"): ("agent.v1.ConversationAction.action",),
    ("conversation/client_context.py", "ContextQuery.takes", "message"): ("agent.v1.ExecClientControlMessage.message",),
    ("conversation/tool_calls.py", "ToolRounds.on_client_message", "message"): (
        "agent.v1.ExecClientMessage.message", "agent.v1.ExecClientControlMessage.message",
    ),
    ("conversation/sync.py", "BlobSync.on_reply", "message"): ("agent.v1.KvClientMessage.message",),
    # `cursor-byok replay` plays a capture's client side: which recorded message answers what
    ("capture/replay.py", "_Session.__init__", "message"): ("agent.v1.AgentClientMessage.message",),
    ("capture/replay.py", "_Session._continue_conversation", "message"): ("agent.v1.AgentClientMessage.message",),
    ("capture/replay.py", "_answered_id", "message"): ("agent.v1.ExecClientControlMessage.message",),
    ("capture/replay.py", "_readdress", "message"): (
        "agent.v1.AgentClientMessage.message", "agent.v1.ExecClientControlMessage.message", "agent.v1.KvClientMessage.message",
    ),
    ("conversation/history/request.py", "background_completion_messages", "BackgroundTaskKind"): ("agent.v1.BackgroundTaskCompletion.kind",),
    ("conversation/history/request.py", "background_completion_messages", "BackgroundTaskStatus"): ("agent.v1.BackgroundTaskCompletion.status",),
    ("conversation/persistence.py", "ConversationRecords.run_started", "AgentMode"): ("agent.v1.UserMessage.mode",),
    ("tools/base.py", "ToolExecution.on_exec_result", "message"): ("agent.v1.ExecClientMessage.message",),
    ("tools/base.py", "ToolExecution.on_interaction_response", "result"): ("agent.v1.InteractionResponse.result",),
    ("tools/files.py", "read_content", "output"): ("agent.v1.ReadSuccess.output",),
    ("tools/files.py", "ReadExecution._on_exec", "result"): ("agent.v1.ReadResult.result",),
    ("tools/files.py", "_EditExecution._on_write", "result"): ("agent.v1.WriteResult.result",),
    ("tools/files.py", "StrReplaceExecution._on_exec", "result"): ("agent.v1.ReadResult.result",),
    ("tools/files.py", "DeleteExecution._on_exec", "result"): ("agent.v1.DeleteResult.result",),
    ("tools/files.py", "LsExecution._on_exec", "result"): ("agent.v1.LsResult.result",),
    ("tools/search.py", "_truncation_note", "result"): ("agent.v1.GrepUnionResult.result",),
    ("tools/search.py", "render_grep", "result"): ("agent.v1.GrepUnionResult.result",),
    ("tools/search.py", "GrepExecution._on_exec", "result"): ("agent.v1.GrepResult.result",),
    ("tools/search.py", "GlobExecution._on_exec", "result"): ("agent.v1.GrepResult.result", "agent.v1.GrepUnionResult.result"),
    ("tools/search.py", "ReadLintsExecution._on_exec", "result"): ("agent.v1.DiagnosticsResult.result",),
    ("tools/shell.py", "ShellExecution._on_exec", "event"): ("agent.v1.ShellStream.event",),
    ("tools/shell.py", "ShellExecution._on_shell_result", "result"): ("agent.v1.ShellResult.result",),
    ("tools/shell.py", "ShellExecution._on_spawned", "result"): ("agent.v1.BackgroundShellSpawnResult.result",),
    ("tools/shell.py", "AwaitExecution._on_exec", "result"): ("agent.v1.ReadResult.result",),
    ("tools/mcp.py", "McpExecution._on_exec", "result"): ("agent.v1.McpResult.result",),
    ("tools/client_run.py", "WebFetchExecution._on_exec", "result"): ("agent.v1.FetchResult.result",),
    ("tools/client_run.py", "WriteShellStdinExecution._on_exec", "result"): ("agent.v1.WriteShellStdinResult.result",),
    ("tools/client_run.py", "AwaitSubagentExecution._on_exec", "result"): ("agent.v1.SubagentAwaitResult.result",),
    ("tools/client_run.py", "ListMcpResourcesExecution._on_exec", "result"): ("agent.v1.ListMcpResourcesExecResult.result",),
    ("tools/client_run.py", "FetchMcpResourceExecution._on_exec", "result"): ("agent.v1.ReadMcpResourceExecResult.result",),
    ("tools/client_run.py", "FetchMcpResourceExecution._on_exec", "content"): ("agent.v1.ReadMcpResourceSuccess.content",),
    ("tools/mcp.py", "McpExecution._on_success", "content"): ("agent.v1.McpToolResultContentItem.content",),
    ("tools/task.py", "TaskExecution._on_exec", "result"): ("agent.v1.SubagentResult.result",),
    ("tools/interactive.py", "AskQuestionExecution._on_interaction", "result"): ("agent.v1.AskQuestionResult.result",),
    ("tools/interactive.py", "SwitchModeExecution._on_interaction", "result"): ("agent.v1.SwitchModeRequestResponse.result",),
    ("tools/interactive.py", "CreatePlanExecution._on_interaction", "result"): ("agent.v1.CreatePlanResult.result",),
}

# Wire enums read by value (compared, defaulted, copied into a card), never by name.
VALUE_READS = (
    "agent.v1.ShellStreamExit.abort_reason",
    "agent.v1.ShellStreamBackgrounded.reason",
    "agent.v1.SubagentSuccess.background_reason",
    "agent.v1.Diagnostic.severity",
)


# -- building newer values ------------------------------------------------------------------------------------
def resolve(message: Message, path: str) -> Message | None:
    """The message at a dotted path ('' is the message itself; `name[0]` the first element of a
    repeated field, `name[*]` the first value of a map), or None when it is not there."""
    node = message
    for part in filter(None, path.split(".")):
        name, _, index = part.partition("[")
        if index:
            items = getattr(node, name)
            if not items:
                return None
            node = items[sorted(items)[0]] if index == "*]" else items[0]
        elif node.HasField(name):
            node = getattr(node, name)
        else:
            return None
    return node


# -- the cases ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One target given a newer value in the client message the IDE sends as `on` (the first one
    `path` resolves in). `build` makes the message to alter from that one (default: a copy); the
    altered message goes before the one the IDE meant to send, or instead of a run request."""

    target: str  # <message type>.<oneof or enum field>
    on: str  # the AgentClientMessage member that triggers it
    path: str  # from the AgentClientMessage to the message holding the target
    calls: tuple[CallSpec, ...] = ()  # what the model calls before it answers
    build: Callable[[pb.AgentClientMessage], pb.AgentClientMessage] | None = None
    refused: str | None = None  # the code the turn may be refused with instead
    label: str = ""

    @property
    def id(self) -> str:
        short = self.target.removeprefix("agent.v1.")
        return f"{short}[{self.label}]" if self.label else short

    def alter(self, natural: pb.AgentClientMessage) -> pb.AgentClientMessage | None:
        msg = pb.AgentClientMessage()
        msg.CopyFrom(self.build(natural) if self.build else natural)
        holder = resolve(msg, self.path)
        if holder is None:
            return None
        owner, _, name = self.target.rpartition(".")
        assert holder.DESCRIPTOR.full_name == owner, (holder.DESCRIPTOR.full_name, self.target)
        if name in holder.DESCRIPTOR.oneofs_by_name:
            add_newer_member(holder, name)
        else:
            setattr(holder, name, NEWER)
        return msg


def call(tool: str, **args: object) -> CallSpec:
    return CallSpec(f"c_{tool.lower()}", tool, [json.dumps(args)])


def model_calls(case: Case, workspace: Path) -> list[CallSpec]:
    return [CallSpec(c.id, c.name, [p.replace("{ws}", str(workspace)) for p in c.arg_pieces]) for c in case.calls]


READ = call("Read", path="{ws}/a.txt")
SHELL = call("Shell", command="echo hi", working_directory="{ws}")
MCP = call("mcp_weather_get_forecast", city="Oslo")
ASK = call("AskQuestion", questions=[{"id": "q1", "prompt": "Which?", "options": [{"id": "a", "label": "A"}, {"id": "b", "label": "B"}]}])


def exec_reply_to_throw(fill: Callable[[pb.ExecClientMessage], None]) -> Callable[[pb.AgentClientMessage], pb.AgentClientMessage]:
    """The scripted IDE cannot run it and throws: answer the exec instead."""

    def build(natural: pb.AgentClientMessage) -> pb.AgentClientMessage:
        msg = pb.AgentClientMessage()
        msg.exec_client_message.id = natural.exec_client_control_message.throw.id
        fill(msg.exec_client_message)
        return msg

    return build


def _action(fill: Callable[[pb.ConversationAction], None]) -> Callable[[pb.AgentClientMessage], pb.AgentClientMessage]:
    def build(_: pb.AgentClientMessage) -> pb.AgentClientMessage:
        msg = pb.AgentClientMessage()
        fill(msg.conversation_action)
        return msg

    return build


def _completion(action: pb.ConversationAction) -> None:
    c = action.background_task_completion_action.completions.add(task_id="t1", tool_call_id="c_old", title="render", detail="Rendered.")
    c.kind = pb.BACKGROUND_TASK_KIND_SHELL
    c.status = pb.BACKGROUND_TASK_STATUS_SUCCESS


def _inject(action: pb.ConversationAction) -> None:
    action.inject_context_action.injection_id = "inj-1"
    action.inject_context_action.user_context.user_message.text = "also this"


def _control(natural: pb.AgentClientMessage) -> pb.AgentClientMessage:
    msg = pb.AgentClientMessage()
    msg.exec_client_control_message.stream_close.id = natural.exec_client_message.id
    return msg


def _shell_result(natural: pb.AgentClientMessage) -> pb.AgentClientMessage:
    msg = pb.AgentClientMessage()
    msg.exec_client_message.id = natural.exec_client_message.id
    msg.exec_client_message.shell_result.success.SetInParent()
    return msg


def _aborted_exit(natural: pb.AgentClientMessage) -> pb.AgentClientMessage:
    msg = pb.AgentClientMessage()
    msg.CopyFrom(natural)
    if msg.exec_client_message.shell_stream.HasField("exit"):
        msg.exec_client_message.shell_stream.exit.aborted = True
    return msg


def _as_injection(natural: pb.AgentClientMessage) -> pb.AgentClientMessage:
    msg = pb.AgentClientMessage()
    msg.CopyFrom(natural)
    _inject(msg.run_request.action)
    return msg


CASES = [
    # what the IDE appends: a newer client message, action or injection, mid-run or as the run request
    Case("agent.v1.AgentClientMessage.message", "exec_client_message", "", (READ,), build=lambda _: pb.AgentClientMessage(), label="mid-run"),
    Case("agent.v1.AgentClientMessage.message", "run_request", "", refused="invalid_argument", label="first append"),
    Case("agent.v1.ConversationAction.action", "exec_client_message", "conversation_action", (READ,), build=_action(_completion), label="mid-run"),
    Case("agent.v1.ConversationAction.action", "run_request", "run_request.action", refused="invalid_argument", label="run request"),
    Case("agent.v1.InjectContextAction.payload", "exec_client_message", "conversation_action.inject_context_action", (READ,), build=_action(_inject), label="mid-run"),
    Case("agent.v1.InjectContextAction.payload", "run_request", "run_request.action.inject_context_action", build=_as_injection, refused="invalid_argument", label="run request"),
    Case("agent.v1.BackgroundTaskCompletion.kind", "exec_client_message", "conversation_action.background_task_completion_action.completions[0]", (READ,), build=_action(_completion)),
    Case("agent.v1.BackgroundTaskCompletion.status", "exec_client_message", "conversation_action.background_task_completion_action.completions[0]", (READ,), build=_action(_completion)),
    Case("agent.v1.UserMessage.mode", "run_request", "run_request.action.user_message_action.user_message"),
    # stream and control messages, acks, interaction answers
    Case("agent.v1.ExecClientMessage.message", "exec_client_message", "exec_client_message", (READ,)),
    Case("agent.v1.ExecClientControlMessage.message", "exec_client_message", "exec_client_control_message", (READ,), build=_control),
    Case("agent.v1.KvClientMessage.message", "kv_client_message", "kv_client_message"),
    Case("agent.v1.InteractionResponse.result", "interaction_response", "interaction_response", (ASK,)),
    # tool results
    Case("agent.v1.ReadResult.result", "exec_client_message", "exec_client_message.read_result", (READ,)),
    Case("agent.v1.ReadSuccess.output", "exec_client_message", "exec_client_message.read_result.success", (READ,), label="Read"),
    Case("agent.v1.ReadSuccess.output", "exec_client_message", "exec_client_message.read_result.success",
         (call("StrReplace", path="{ws}/a.txt", old_string="a", new_string="overwritten"),), label="StrReplace"),
    Case("agent.v1.WriteResult.result", "exec_client_message", "exec_client_message.write_result", (call("Write", path="{ws}/b.txt", contents="b\n"),)),
    Case("agent.v1.DeleteResult.result", "exec_client_message", "exec_client_message.delete_result", (call("Delete", path="{ws}/a.txt"),)),
    Case("agent.v1.LsResult.result", "exec_client_message", "exec_client_message.ls_result", (call("Ls", path="{ws}"),)),
    Case("agent.v1.GrepResult.result", "exec_client_message", "exec_client_message.grep_result", (call("Grep", pattern="a", path="{ws}"),), label="Grep"),
    Case("agent.v1.GrepResult.result", "exec_client_message", "exec_client_message.grep_result", (call("Glob", glob_pattern="*.txt", target_directory="{ws}"),), label="Glob"),
    Case("agent.v1.GrepUnionResult.result", "exec_client_message", "exec_client_message.grep_result.success.workspace_results[*]", (call("Grep", pattern="a", path="{ws}"),), label="Grep"),
    Case("agent.v1.GrepUnionResult.result", "exec_client_message", "exec_client_message.grep_result.success.workspace_results[*]", (call("Glob", glob_pattern="*.txt", target_directory="{ws}"),), label="Glob"),
    Case("agent.v1.ShellStream.event", "exec_client_message", "exec_client_message.shell_stream", (SHELL,)),
    Case("agent.v1.ShellResult.result", "exec_client_message", "exec_client_message.shell_result", (SHELL,), build=_shell_result),
    Case("agent.v1.ShellStreamExit.abort_reason", "exec_client_message", "exec_client_message.shell_stream.exit", (SHELL,), build=_aborted_exit),
    Case("agent.v1.ShellStreamBackgrounded.reason", "exec_client_message", "exec_client_message.shell_stream.backgrounded",
         (call("Shell", command="background:echo hi", working_directory="{ws}"),)),
    Case("agent.v1.McpResult.result", "exec_client_message", "exec_client_message.mcp_result", (MCP,)),
    Case("agent.v1.BackgroundShellSpawnResult.result", "exec_client_message", "exec_client_message.background_shell_spawn_result",
         (call("Shell", command="./serve", run_in_background=True),)),
    Case("agent.v1.FetchResult.result", "exec_client_message", "exec_client_message.fetch_result", (call("WebFetch", url="https://example.com/"),)),
    Case("agent.v1.WriteShellStdinResult.result", "exec_client_message", "exec_client_message.write_shell_stdin_result",
         (call("WriteShellStdin", shell_id=3, chars="y\n"),)),
    Case("agent.v1.SubagentAwaitResult.result", "exec_client_message", "exec_client_message.subagent_await_result",
         (call("AwaitSubagent", agent_id="sub-1"),)),
    Case("agent.v1.ListMcpResourcesExecResult.result", "exec_client_message", "exec_client_message.list_mcp_resources_exec_result",
         (call("ListMcpResources"),)),
    Case("agent.v1.ReadMcpResourceExecResult.result", "exec_client_message", "exec_client_message.read_mcp_resource_exec_result",
         (call("FetchMcpResource", server="weather", uri="weather://oslo"),)),
    Case("agent.v1.ReadMcpResourceSuccess.content", "exec_client_message", "exec_client_message.read_mcp_resource_exec_result.success",
         (call("FetchMcpResource", server="weather", uri="weather://oslo"),)),
    Case("agent.v1.McpToolResultContentItem.content", "exec_client_message", "exec_client_message.mcp_result.success.content[0]", (MCP,)),
    Case("agent.v1.SubagentResult.result", "exec_client_control_message", "exec_client_message.subagent_result",
         (call("Task", description="job", prompt="Do it."),), build=exec_reply_to_throw(lambda e: e.subagent_result.error.SetInParent())),
    Case("agent.v1.SubagentSuccess.background_reason", "exec_client_control_message", "exec_client_message.subagent_result.success",
         (call("Task", description="job", prompt="Do it."),), build=exec_reply_to_throw(lambda e: setattr(e.subagent_result.success, "agent_id", "child"))),
    Case("agent.v1.DiagnosticsResult.result", "exec_client_control_message", "exec_client_message.diagnostics_result",
         (call("ReadLints", paths=["{ws}/a.txt"]),), build=exec_reply_to_throw(lambda e: e.diagnostics_result.success.SetInParent())),
    Case("agent.v1.Diagnostic.severity", "exec_client_control_message", "exec_client_message.diagnostics_result.success.diagnostics[0]",
         (call("ReadLints", paths=["{ws}/a.txt"]),), build=exec_reply_to_throw(lambda e: e.diagnostics_result.success.diagnostics.add(message="unused"))),
    Case("agent.v1.AskQuestionResult.result", "interaction_response", "interaction_response.ask_question_interaction_response.result", (ASK,)),
    Case("agent.v1.SwitchModeRequestResponse.result", "interaction_response", "interaction_response.switch_mode_request_response",
         (call("SwitchMode", target_mode="plan"),)),
    Case("agent.v1.CreatePlanResult.result", "interaction_response", "interaction_response.create_plan_request_response.result",
         (call("CreatePlan", name="p", overview="o", plan="do it"),)),
]


def logged_kind(case: Case) -> str | None:
    """What the server logs once when it meets the case's unknown; None for a value read as an int."""
    owner, _, name = case.target.rpartition(".")
    descriptor = descriptor_pool.Default().FindMessageTypeByName(owner)
    if name in descriptor.oneofs_by_name:
        return case.target
    if case.target in VALUE_READS:
        return None
    return f"{descriptor.fields_by_name[name].enum_type.full_name}={NEWER}"


