"""Cursor's own agent SDK (`@cursor/sdk` 1.0.32) running local agents against the real server:
its transport (RunSSE + BidiAppend over HTTP/1.1), its model check, its own tool executor."""
from __future__ import annotations

import json
from pathlib import Path

from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer

from .client import SdkDriver
from .conftest import MODEL


def test_a_text_turn(sdk: SdkDriver, fresh_provider: FakeProviderServer, workspace: Path) -> None:
    fresh_provider.enqueue(OPENAI_CHAT.text(["Hello ", "from ", "BYOK"]))
    run = sdk.run(MODEL, workspace, [{"prompt": "say hello"}])
    result = run.result(0)
    assert (result["status"], result["result"]) == ("finished", "Hello from BYOK")
    assert run.text(0) == "Hello from BYOK"
    assert len(fresh_provider.requests) == 1
    sent = fresh_provider.requests[0].json()["messages"]
    assert "say hello" in str(sent[-1]["content"])


def call(call_id: str, name: str, **args: object) -> CallSpec:
    return CallSpec(call_id, name, [json.dumps(args)])


def tool_results(provider: FakeProviderServer, index: int) -> list[str]:
    return [str(m["content"]) for m in provider.requests[index].json()["messages"] if m["role"] == "tool"]


def test_read_and_shell_run_in_the_agents_workspace(sdk: SdkDriver, fresh_provider: FakeProviderServer, workspace: Path) -> None:
    """The SDK's run request has no request context: the server asks its executor for one
    (workspace, terminals folder, shell, OS) and runs the tools there, not in the SDK's own cwd."""
    (workspace / "notes.txt").write_text("the workspace's own notes\n")
    fresh_provider.enqueue(
        OPENAI_CHAT.tool_calls([call("c_read", "Read", path="notes.txt"), call("c_pwd", "Shell", command="pwd")]),
        OPENAI_CHAT.text(["done"]),
    )
    run = sdk.run(MODEL, workspace, [{"prompt": "read the notes, then where am I?"}])
    assert run.result(0)["status"] == "finished", run.errors()
    read, shell = tool_results(fresh_provider, 1)
    assert "the workspace's own notes" in read
    assert f"\n{workspace}\n" in f"\n{shell}\n", shell  # `pwd` printed the workspace on a line of its own
    assert [c["type"] for c in run.tool_calls(0)] == ["read", "shell"]
    # The client's answer reached the model as the request context: its workspace and shell.
    context = str(fresh_provider.requests[0].json()["messages"])
    assert str(workspace) in context
