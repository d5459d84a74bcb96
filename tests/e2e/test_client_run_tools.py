"""Tools the client's own executor runs (issue 31 item 10) through the real server: a web fetch,
input to a background shell, MCP resources (offered only while the run has MCP servers)."""
from __future__ import annotations

import json
import uuid

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.ide import ScriptedIDE, run_request

from .conftest import MODEL


def call(call_id: str, name: str, **args: object) -> CallSpec:
    return CallSpec(call_id, name, [json.dumps(args)])


def tool_contents(provider: FakeProviderServer, index: int) -> list[str]:
    return [str(m["content"]) for m in provider.requests[index].json()["messages"] if m["role"] == "tool"]


def offered(provider: FakeProviderServer, index: int) -> set[str]:
    return {t["function"]["name"] for t in provider.requests[index].json()["tools"]}


def with_mcp_server(msg: pb.AgentClientMessage) -> pb.AgentClientMessage:
    tool = msg.run_request.mcp_tools.mcp_tools.add(name="weather-get_forecast", provider_identifier="weather", tool_name="get_forecast")
    tool.input_schema_json = json.dumps({"type": "object", "properties": {"city": {"type": "string"}}})
    return msg


async def test_web_fetch_and_shell_input_round_trip(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(
        OPENAI_CHAT.tool_calls([call("c_fetch", "WebFetch", url="https://example.com/doc"), call("c_stdin", "WriteShellStdin", shell_id=7, chars="y\n")]),
        OPENAI_CHAT.text(["ok"]),
    )
    log = await ide.turn(run_request("fetch it and answer the prompt", model=MODEL, conversation_id=uuid.uuid4().hex))
    assert log.text == "ok" and log.terminal is None
    sent = [e.WhichOneof("message") for e in ide.exec_log]
    assert sent == ["fetch_args", "write_shell_stdin_args"]
    fetch, stdin = (e for e in ide.exec_log)
    assert (fetch.fetch_args.url, fetch.fetch_args.tool_call_id) == ("https://example.com/doc", "c_fetch")
    assert (stdin.write_shell_stdin_args.shell_id, stdin.write_shell_stdin_args.chars) == (7, "y\n")
    fetched, typed = tool_contents(provider, 1)
    assert "the page at https://example.com/doc" in fetched and "HTTP 200" in fetched
    assert "Wrote 2 characters to shell 7" in typed
    assert {"WebFetch", "WriteShellStdin"} <= offered(provider, 0)
    assert not {"ListMcpResources", "FetchMcpResource"} & offered(provider, 0)  # no MCP server: not offered


async def test_mcp_resources_are_listed_and_read_when_mcp_servers_exist(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(
        OPENAI_CHAT.tool_calls([call("c_list", "ListMcpResources")]),
        OPENAI_CHAT.tool_calls([call("c_read", "FetchMcpResource", server="weather", uri="weather://oslo")]),
        OPENAI_CHAT.text(["read it"]),
    )
    await ide.turn(with_mcp_server(run_request("what resources?", model=MODEL, conversation_id=uuid.uuid4().hex)))
    assert {"ListMcpResources", "FetchMcpResource", "CallMcpTool"} <= offered(provider, 0)
    listed = tool_contents(provider, 1)[0]
    assert "weather://oslo (Oslo) [server weather]" in listed
    assert tool_contents(provider, 2)[-1] == "contents of weather://oslo"
    read = [e.read_mcp_resource_exec_args for e in ide.exec_log if e.WhichOneof("message") == "read_mcp_resource_exec_args"]
    assert [(r.server, r.uri, r.tool_call_id) for r in read] == [("weather", "weather://oslo", "c_read")]


async def test_a_background_subagent_is_awaited(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(OPENAI_CHAT.tool_calls([call("c_wait", "AwaitSubagent", agent_id="sub-1", timeout_ms=5000)]), OPENAI_CHAT.text(["ok"]))
    await ide.turn(run_request("wait for the reviewer", model=MODEL, conversation_id=uuid.uuid4().hex))
    awaited = [e.subagent_await_args for e in ide.exec_log if e.WhichOneof("message") == "subagent_await_args"]
    assert [(a.agent_id, a.timeout_ms) for a in awaited] == [("sub-1", 5000)]
    (result,) = tool_contents(provider, 1)
    assert "sub-1 is done: all tests pass" in result and "2 tool calls" in result


async def test_a_shell_run_in_the_background_is_spawned(ide: ScriptedIDE, provider: FakeProviderServer) -> None:
    provider.enqueue(OPENAI_CHAT.tool_calls([call("c_bg", "Shell", command="./serve", run_in_background=True)]), OPENAI_CHAT.text(["ok"]))
    await ide.turn(run_request("start the server", model=MODEL, conversation_id=uuid.uuid4().hex))
    (spawn,) = [e.background_shell_spawn_args for e in ide.exec_log if e.WhichOneof("message") == "background_shell_spawn_args"]
    assert (spawn.command, spawn.tool_call_id, spawn.enable_write_shell_stdin_tool) == ("./serve", "c_bg", True)
    (result,) = tool_contents(provider, 1)
    assert "shell_id=11" in result and "in the background" in result
